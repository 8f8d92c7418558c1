//! Limits on a request's URI and headers, answered as JSON errors: at most [`MAX_URI_BYTES`] of
//! URI (else 414) and [`MAX_HEADERS`] headers of [`MAX_HEADER_BYTES`] in all (else 431).
//! hyper's own limits, beyond which it answers without a body, are set well above these
//! ([`HYPER_MAX_HEADERS`], [`HYPER_MAX_BUFFER`]).

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

pub const MAX_URI_BYTES: usize = 8 << 10;
pub const MAX_HEADERS: usize = 100;
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// The most headers hyper parses before refusing a request itself.
pub const HYPER_MAX_HEADERS: usize = 4 * MAX_HEADERS;
/// hyper's read buffer, which bounds a request's head.
pub const HYPER_MAX_BUFFER: usize = 1 << 20;

/// Middleware: refuses requests whose URI or headers are over the limits.
pub async fn check_size(request: Request, next: Next) -> Response {
    let uri = request
        .uri()
        .path_and_query()
        .map_or(0, |target| target.as_str().len());
    if uri > MAX_URI_BYTES {
        let message = format!("the URI has {uri} bytes; at most {MAX_URI_BYTES} are read");
        return ApiError::new(StatusCode::URI_TOO_LONG, "uri_too_long", message).into_response();
    }
    let headers = request.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        let message = format!(
            "{} headers of {bytes} bytes; at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} \
             bytes are read",
            headers.len()
        );
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            message,
        )
        .into_response();
    }
    next.run(request).await
}
