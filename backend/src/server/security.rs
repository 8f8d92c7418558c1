//! Response headers that keep the browser app in its lane: a Content-Security-Policy that lets
//! the page run only its own scripts and WebAssembly (the inline bootstrap Trunk writes is
//! allowed by its hash, read from `index.html` when the server starts) and talk only to its own
//! origin, never framed; no MIME sniffing; no referrer sent elsewhere.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The headers every response gets (unless a handler set one already).
#[derive(Clone)]
pub struct SecurityHeaders(Arc<Vec<(HeaderName, HeaderValue)>>);

impl SecurityHeaders {
    /// The headers for the app in `static_dir` (its `index.html`'s inline scripts are hashed
    /// into the policy), or for the API alone.
    pub fn for_app(static_dir: Option<&Path>) -> Result<Self> {
        let inline = match static_dir {
            Some(dir) => {
                let path = dir.join("index.html");
                let html = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                inline_script_hashes(&html)
            }
            None => Vec::new(),
        };
        let policy = format!(
            "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{}; style-src 'self' \
             'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; worker-src 'self' \
             blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
            inline
                .iter()
                .map(|hash| format!(" 'sha256-{hash}'"))
                .collect::<String>()
        );
        let headers = vec![
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_str(&policy)?,
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("same-origin"),
            ),
        ];
        Ok(Self(Arc::new(headers)))
    }
}

/// Adds the headers to a response.
pub async fn add_headers(
    State(headers): State<SecurityHeaders>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    for (name, value) in headers.0.iter() {
        response
            .headers_mut()
            .entry(name)
            .or_insert_with(|| value.clone());
    }
    response
}

/// The base64 SHA-256 of each inline `<script>` (one without `src`) in `html`, as CSP hashes
/// them: over the exact text between the tags.
fn inline_script_hashes(html: &str) -> Vec<String> {
    let mut hashes = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<script") {
        let Some(open_end) = rest[start..].find('>').map(|i| start + i + 1) else {
            break;
        };
        let Some(close) = rest[open_end..].find("</script>").map(|i| open_end + i) else {
            break;
        };
        if !rest[start..open_end].contains("src=") {
            let body = &rest[open_end..close];
            hashes.push(base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body)));
        }
        rest = &rest[close + "</script>".len()..];
    }
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_scripts_are_hashed_as_browsers_do() {
        // The value Chromium reports for `<script>alert(1)</script>`.
        let html = "<head><script src=\"/a.js\"></script><script>alert(1)</script></head>";
        assert_eq!(
            inline_script_hashes(html),
            ["bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI="]
        );
    }
}
