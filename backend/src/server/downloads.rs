//! The model files the browser downloads (the classifier's, and the Dis-AE's for LASS): the
//! weights in their compact int8 form ([`compact`], with as many bits per weight as each model
//! needs) and every file gzip-compressed, made once when the server starts and then served from memory
//! with `Content-Encoding: gzip`. Each file has an ETag (of its content), so that a browser
//! revalidating its cached copy gets 304 and downloads nothing while the model is unchanged.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flipside_shared::models::compact::{COMPACT_WEIGHTS_FILE, compact};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use crate::models::WEIGHTS_FILE;

/// One model directory's files as the browser gets them.
pub struct ModelDownloads {
    /// The model's name in messages ("classifier", "Dis-AE").
    model: &'static str,
    /// (file name, its gzip-compressed bytes — shared by every response, not copied — and its
    /// content's tag).
    files: Vec<(&'static str, Bytes, String)>,
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
                let tag = hex::encode(&Sha256::digest(&bytes)[..12]);
                Ok((file, Bytes::from(gzip(&bytes)?), tag))
            })
            .collect::<Result<_>>()?;
        Ok(Self { model, files })
    }

    /// Bytes over the wire for all the files together (compressed).
    pub fn download_bytes(&self) -> u64 {
        self.files.iter().map(|(_, gz, _)| gz.len() as u64).sum()
    }

    /// `file` as the response to a request with `headers`: compressed when the client accepts
    /// gzip (browsers do), else decompressed; 304 when `If-None-Match` names its ETag.
    pub fn response(&self, file: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
        let Some((_, gz, tag)) = self.files.iter().find(|(name, _, _)| *name == file) else {
            let names: Vec<&str> = self.files.iter().map(|(name, _, _)| *name).collect();
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
        response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response_headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
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
        if gzipped {
            response_headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            return Ok((response_headers, gz.clone()).into_response());
        }
        let mut bytes = Vec::new();
        GzDecoder::new(&gz[..])
            .read_to_end(&mut bytes)
            .map_err(|e| ApiError::internal(e.into()))?;
        Ok((response_headers, bytes).into_response())
    }
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
