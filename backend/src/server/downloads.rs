//! The model files the browser downloads (the classifier's, and the Dis-AE's for LASS): the
//! weights in their compact int8 form ([`compact`], with as many bits per weight as each model
//! needs) and every file gzip-compressed, made once when the server starts and then served from
//! memory, with `Content-Encoding: gzip` to clients that take it (browsers do) and as they are
//! to others: no request reads, compresses or decompresses anything. Each file has a tag of its content: `/api/info` lists each
//! file's URL with it (`…?v=TAG`), which browsers may cache for a year since its content never
//! changes; the plain URL is revalidated with its ETag instead (304 while the model is
//! unchanged). Single byte ranges are served (206), so an interrupted download can resume.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Range;
use std::path::Path;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flate2::Compression;
use flate2::write::GzEncoder;
use flipside_shared::models::compact::{COMPACT_WEIGHTS_FILE, compact};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use crate::model_dirs::WEIGHTS_FILE;

/// The files of the classifier the browser downloads.
pub const CLASSIFIER_FILES: [&str; 3] = ["config.json", "tokenizer.json", COMPACT_WEIGHTS_FILE];
/// Bits per weight of the classifier the browser downloads: with 7, imdb-400 gives the same
/// label as in f32 for 99.1 % of Rotten Tomatoes' sentences and 99.3 % of IMDb reviews, and
/// is 18.3 MB over the wire (21.0 MB with 8; docs/src/methods.md, *What the browser downloads*).
pub const CLASSIFIER_BITS: u32 = 7;
/// Bits per weight of the Dis-AE the browser downloads: beam search is more sensitive (8 bits
/// keep 191 of 200 f32 outputs, 7 keep 180), and the model is small (3.8 MB over the wire).
pub const DIS_AE_BITS: u32 = 8;
/// The files of the Dis-AE the browser downloads.
pub const DIS_AE_FILES: [&str; 4] = [
    crate::lass::model::CONFIG_FILE,
    crate::lass::model::VOCABULARY_FILE,
    COMPACT_WEIGHTS_FILE,
    crate::lass::model::REPORT_FILE,
];

/// One model directory's files as the browser gets them.
pub struct ModelDownloads {
    /// The model's name in messages ("classifier", "Dis-AE").
    model: &'static str,
    files: Vec<ModelFile>,
}

/// One file, shared by every response (not copied).
struct ModelFile {
    name: &'static str,
    bytes: Bytes,
    gzipped: Bytes,
    /// Of the content.
    tag: String,
}

impl ModelDownloads {
    /// Reads `files` from `dir` and compresses them; [`COMPACT_WEIGHTS_FILE`] is made from the
    /// directory's `model.safetensors` with `bits` per weight.
    pub fn prepare(
        model: &'static str,
        dir: &Path,
        files: &[&'static str],
        bits: u32,
    ) -> Result<Self> {
        let files = files
            .iter()
            .map(|&file| {
                let bytes = if file == COMPACT_WEIGHTS_FILE {
                    let path = dir.join(WEIGHTS_FILE);
                    let weights = std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    compact(&weights, bits).with_context(|| format!("{}", path.display()))?
                } else {
                    let path = dir.join(file);
                    std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                };
                Ok(ModelFile {
                    name: file,
                    tag: hex::encode(&Sha256::digest(&bytes)[..12]),
                    gzipped: Bytes::from(gzip(&bytes)?),
                    bytes: Bytes::from(bytes),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self { model, files })
    }

    /// Each file's content-addressed URL under `base` (e.g. `/api/classifier`).
    pub fn urls(&self, base: &str) -> BTreeMap<String, String> {
        self.files
            .iter()
            .map(|file| {
                let url = format!("{base}/{}?v={}", file.name, file.tag);
                (file.name.to_string(), url)
            })
            .collect()
    }

    /// Bytes over the wire for all the files together (compressed).
    pub fn download_bytes(&self) -> u64 {
        self.files
            .iter()
            .map(|file| file.gzipped.len() as u64)
            .sum()
    }

    /// `file` as the response to a request with `headers`: compressed when the client accepts
    /// gzip (browsers do), else decompressed; 304 when `If-None-Match` names its ETag; 206 for a
    /// byte range. `version` is the `v` of a content-addressed URL: when it is the file's tag,
    /// the response may be cached for a year.
    pub fn response(
        &self,
        file: &str,
        version: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<Response, ApiError> {
        let Some(ModelFile {
            bytes,
            gzipped: gz,
            tag,
            ..
        }) = self.files.iter().find(|f| f.name == file)
        else {
            let names: Vec<&str> = self.files.iter().map(|f| f.name).collect();
            return Err(ApiError::not_found(format!(
                "{} file {file:?} (there are {})",
                self.model,
                names.join(", ")
            )));
        };
        let content_type = if file.ends_with(".json") {
            "application/json"
        } else {
            "application/octet-stream"
        };
        let mut response_headers = HeaderMap::new();
        response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        let cache = if version == Some(tag.as_str()) {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        };
        response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
        response_headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        response_headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        let gzipped = accepts_gzip(headers);
        // The two encodings are two representations, each with its own tag.
        let etag = format!("\"{tag}{}\"", if gzipped { "-gz" } else { "" });
        response_headers.insert(
            header::ETAG,
            HeaderValue::from_str(&etag).map_err(|e| ApiError::internal(e.into()))?,
        );
        if names_tag(headers, &etag) {
            return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
        }
        let body = if gzipped {
            response_headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            gz.clone()
        } else {
            bytes.clone()
        };
        // A range of a representation other than the client's (If-Range) is ignored.
        let same = headers
            .get(header::IF_RANGE)
            .is_none_or(|tag| tag.as_bytes() == etag.as_bytes());
        let total = body.len();
        match headers
            .get(header::RANGE)
            .filter(|_| same)
            .map(|r| byte_range(r, total))
        {
            None => Ok((response_headers, body).into_response()),
            Some(Some(range)) => {
                let content_range = format!("bytes {}-{}/{total}", range.start, range.end - 1);
                response_headers.insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&content_range)
                        .map_err(|e| ApiError::internal(e.into()))?,
                );
                let part = body.slice(range);
                Ok((StatusCode::PARTIAL_CONTENT, response_headers, part).into_response())
            }
            Some(None) => {
                let mut error = ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "range_not_satisfiable",
                    format!("the file has {total} bytes; ask for one range within them"),
                )
                .into_response();
                error.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{total}"))
                        .map_err(|e| ApiError::internal(e.into()))?,
                );
                Ok(error)
            }
        }
    }
}

/// The bytes a `Range` header asks for out of `total`: one range (`bytes=A-B`, `bytes=A-` or
/// `bytes=-N`); `None` when it is malformed, several, or outside the file.
fn byte_range(value: &HeaderValue, total: usize) -> Option<Range<usize>> {
    let spec = value.to_str().ok()?.trim().strip_prefix("bytes=")?;
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let range = if first.is_empty() {
        let suffix: usize = last.parse().ok()?;
        total.saturating_sub(suffix)..total
    } else {
        let start: usize = first.parse().ok()?;
        let end = if last.is_empty() {
            total
        } else {
            last.parse::<usize>().ok()?.saturating_add(1).min(total)
        };
        start..end
    };
    (range.start < range.end).then_some(range)
}

/// Whether `If-None-Match` names `etag` (or is `*`).
fn names_tag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == etag || tag == "*")
}

/// Whether `Accept-Encoding` names gzip (without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, accept.parse().unwrap());
        headers
    }

    #[test]
    fn a_named_tag_is_not_modified() {
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, "\"a\", W/\"b-gz\"".parse().unwrap());
        assert!(names_tag(&headers, "\"b-gz\""));
        assert!(names_tag(&headers, "\"a\""));
        assert!(!names_tag(&headers, "\"b\""));
        assert!(!names_tag(&HeaderMap::new(), "\"a\""));
    }

    #[test]
    fn byte_ranges_are_read_as_rfc_9110_says() {
        let range = |spec: &str| byte_range(&HeaderValue::from_str(spec).unwrap(), 100);
        assert_eq!(range("bytes=0-9"), Some(0..10));
        assert_eq!(range("bytes=90-"), Some(90..100));
        assert_eq!(range("bytes=-10"), Some(90..100));
        assert_eq!(range("bytes=95-200"), Some(95..100), "the end is clamped");
        assert_eq!(range("bytes=-500"), Some(0..100));
        assert_eq!(range("bytes=100-"), None, "past the end");
        assert_eq!(range("bytes=5-2"), None);
        assert_eq!(range("bytes=0-1,5-6"), None, "several ranges");
        assert_eq!(range("items=0-1"), None);
        assert_eq!(range("bytes=-0"), None);
        assert_eq!(range(&format!("bytes=0-{}", u64::MAX)), Some(0..100));
    }

    #[test]
    fn gzip_is_accepted_unless_refused() {
        assert!(accepts_gzip(&headers("gzip, deflate, br, zstd")));
        assert!(accepts_gzip(&headers("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&headers("*")));
        assert!(!accepts_gzip(&headers("gzip;q=0, br")));
        assert!(!accepts_gzip(&headers("gzip; q=0.000")));
        assert!(!accepts_gzip(&headers("identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
