//! The browser app's files (Trunk's `dist/`), served as a web page's assets should be: compressed
//! where the client accepts it, and cached by name. Trunk's post-build hook (`Trunk.toml`) writes
//! a gzipped copy (`NAME.gz`) beside each script, stylesheet and wasm module; a client that
//! accepts gzip gets that copy (`Content-Encoding: gzip`), any other the file itself. A file whose
//! name carries Trunk's content hash (`flipside-frontend-1f0e…_bg.wasm`) never changes, so it is
//! cacheable for a year without revalidation (`immutable`); any other file (`index.html`, which
//! names the hashed ones) is revalidated on every visit (`no-cache`, answered 304 when unchanged).

use std::path::Path;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::MethodRouter;
use tower_http::services::ServeDir;

/// `Cache-Control` of a file whose name carries its content hash.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of any other file of the app.
pub const REVALIDATE: &str = "no-cache";

/// The fewest hex digits taken for Trunk's content hash (a 64-bit hash written without leading
/// zeros: 16 digits, fewer only once in 16⁴ builds at this bound, when the file is simply
/// revalidated).
const HASH_DIGITS: usize = 12;

/// A router that serves the files of `dir`, and answers with `fallback` where there is none.
pub fn router(dir: &Path, fallback: MethodRouter) -> Router {
    let files = ServeDir::new(dir)
        .precompressed_gzip()
        .call_fallback_on_method_not_allowed(true)
        .fallback(fallback);
    Router::new()
        .fallback_service(files)
        .layer(axum::middleware::from_fn(cache_headers))
}

/// Middleware: `Cache-Control` by name, and `Vary: Accept-Encoding` (the same URL has a
/// compressed and a plain representation), on the files found; a fallback's answer is left alone.
async fn cache_headers(request: Request, next: Next) -> Response {
    let immutable = carries_content_hash(request.uri().path());
    let mut response = next.run(request).await;
    // A file found (the fallback's answers carry no Last-Modified), or unchanged since the
    // client's copy.
    let found = match response.status() {
        StatusCode::OK | StatusCode::PARTIAL_CONTENT => {
            response.headers().contains_key(header::LAST_MODIFIED)
        }
        StatusCode::NOT_MODIFIED => true,
        _ => false,
    };
    if found {
        let headers = response.headers_mut();
        let cache = if immutable { IMMUTABLE } else { REVALIDATE };
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    response
}

/// Whether the last segment of `path` is named as Trunk names a hashed file:
/// `STEM-HASH.EXT` or `STEM-HASH_bg.wasm`, HASH lower-case hex.
pub fn carries_content_hash(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, _extension)) = name.split_once('.') else {
        return false;
    };
    let stem = stem.strip_suffix("_bg").unwrap_or(stem);
    let Some((_, hash)) = stem.rsplit_once('-') else {
        return false;
    };
    hash.len() >= HASH_DIGITS
        && hash.len() <= 16
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_names_are_trunks() {
        for hashed in [
            "/flipside-frontend-4c1d2e3f5a6b7c8d_bg.wasm",
            "/flipside-frontend-4c1d2e3f5a6b7c8d.js",
            "/style-0123456789ab.css",
            "favicon-abcdefabcdefabcd.svg",
        ] {
            assert!(carries_content_hash(hashed), "{hashed}");
        }
        for plain in [
            "/",
            "/index.html",
            "/flipside-frontend.js",
            "/style-0123.css",
            "/style-0123456789AB.css",
            "/model-0123456789abcdefg.bin",
            "/dir-0123456789abcdef/index.html",
            "/flipside-frontend-4c1d2e3f5a6b7c8d",
        ] {
            assert!(!carries_content_hash(plain), "{plain}");
        }
    }
}
