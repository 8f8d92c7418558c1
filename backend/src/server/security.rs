//! Response headers that keep the browser app in its lane: a Content-Security-Policy that lets
//! the page run only its own scripts and WebAssembly (the inline bootstrap Trunk writes is
//! allowed by its hash, read from `index.html` whenever that file changes, so an app built or
//! rebuilt while the server runs is served with its own hashes) and talk only to its own
//! origin, never framed; no MIME sniffing; no referrer sent elsewhere.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The headers every response gets (unless a handler set one already); clones share them.
#[derive(Clone)]
pub struct SecurityHeaders {
    /// The app's `index.html`, if an app is served.
    index: Option<PathBuf>,
    /// The headers, and which `index.html` they were made from (`None` while it is missing).
    current: Arc<Mutex<(Option<FileVersion>, Headers)>>,
}

/// What tells one version of a file from the next: its modification time and length.
type FileVersion = (SystemTime, u64);

pub type Headers = Arc<Vec<(HeaderName, HeaderValue)>>;

impl SecurityHeaders {
    /// The headers for the app in `static_dir` (its `index.html`'s inline scripts are hashed
    /// into the policy once it exists), or for the API alone.
    pub fn for_app(static_dir: Option<&Path>) -> Self {
        let headers = Self {
            index: static_dir.map(|dir| dir.join("index.html")),
            current: Arc::new(Mutex::new((None, headers_allowing(&[])))),
        };
        headers.current();
        headers
    }

    /// The headers for the `index.html` on disk now, hashed again when it has changed.
    fn current(&self) -> Headers {
        let version = self.index.as_deref().and_then(|index| {
            let metadata = std::fs::metadata(index).ok()?;
            Some((metadata.modified().ok()?, metadata.len()))
        });
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(index) = &self.index
            && version != current.0
        {
            let hashes = match version.map(|_| std::fs::read_to_string(index)) {
                Some(Ok(html)) => inline_script_hashes(&html),
                Some(Err(error)) => {
                    tracing::warn!(
                        "cannot read {} (its inline scripts stay blocked): {error}",
                        index.display()
                    );
                    Vec::new()
                }
                None => Vec::new(),
            };
            *current = (version, headers_allowing(&hashes));
        }
        current.1.clone()
    }
}

/// The headers for answers that are never the app's page (errors written outside the app).
pub fn headers_without_app() -> Headers {
    static HEADERS: std::sync::LazyLock<Headers> =
        std::sync::LazyLock::new(|| headers_allowing(&[]));
    HEADERS.clone()
}

/// The headers with a policy that allows the inline scripts of these hashes.
fn headers_allowing(inline_hashes: &[String]) -> Headers {
    let policy = format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{}; style-src 'self' \
         'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; worker-src 'self' \
         blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        inline_hashes
            .iter()
            .map(|hash| format!(" 'sha256-{hash}'"))
            .collect::<String>()
    );
    Arc::new(vec![
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_str(&policy).expect("the policy is ASCII"),
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
    ])
}

/// Adds the headers to a response, and to the API's answers (`/api/`, `/v1/`) that set no
/// `Cache-Control` of their own (the model downloads do) `no-store`: they may carry a user's
/// data or the session's CSRF token, which no cache on the way may keep.
pub async fn add_headers(
    State(headers): State<SecurityHeaders>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let api = path.starts_with("/api/") || path.starts_with("/v1/");
    let mut response = next.run(request).await;
    for (name, value) in headers.current().iter() {
        response
            .headers_mut()
            .entry(name)
            .or_insert_with(|| value.clone());
    }
    if api {
        response
            .headers_mut()
            .entry(header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("no-store"));
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

    fn policy(headers: &SecurityHeaders) -> String {
        let current = headers.current();
        let (_, value) = current
            .iter()
            .find(|(name, _)| name == header::CONTENT_SECURITY_POLICY)
            .unwrap();
        value.to_str().unwrap().to_string()
    }

    #[test]
    fn the_policy_follows_the_index_html_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index.html");
        let headers = SecurityHeaders::for_app(Some(dir.path()));
        // Not built yet: no inline script is allowed.
        assert!(
            !policy(&headers).contains("sha256-"),
            "{}",
            policy(&headers)
        );

        let write = |html: &str, seconds: u64| {
            std::fs::write(&index, html).unwrap();
            let file = std::fs::File::options().write(true).open(&index).unwrap();
            let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
            file.set_modified(time).unwrap();
        };
        write("<script>alert(1)</script>", 1_000);
        let built = policy(&headers);
        assert!(
            built.contains("'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"),
            "{built}"
        );
        // Rebuilt with another bootstrap: the old hash goes.
        write("<script>alert(2)</script>", 2_000);
        let rebuilt = policy(&headers);
        assert!(rebuilt.contains("sha256-") && rebuilt != built, "{rebuilt}");
        std::fs::remove_file(&index).unwrap();
        assert!(!policy(&headers).contains("sha256-"));
    }
}
