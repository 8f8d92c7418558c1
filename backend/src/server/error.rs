//! The API's errors: a status, a stable code and a message, always sent as JSON.

use axum::Json;
use axum::extract::multipart::MultipartError;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flipside_shared::api;

/// An error answered to the client.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds the client should wait before trying again (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to try again in `seconds`.
    pub fn retry_after(self, seconds: u64) -> Self {
        Self {
            retry_after: Some(seconds.max(1)),
            ..self
        }
    }

    /// 400: the request is understood but its content is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 for the thing described.
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("no {what}"))
    }

    /// 409: the request conflicts with the resource's state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 500 for a failure the client cannot fix; the details go to the log, not the client.
    pub fn internal(error: anyhow::Error) -> Self {
        tracing::error!("internal error: {error:#}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed; see its log",
        )
    }
}

/// The longest message sent: a message quoting the client's input (a broken line of an upload)
/// is cut here rather than echoing megabytes back.
const MAX_MESSAGE_CHARS: usize = 500;

/// `message`, cut to [`MAX_MESSAGE_CHARS`] characters with a note of how much was left out.
fn shortened(message: String) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((end, _)) => {
            let left_out = message[end..].chars().count();
            format!("{}… ({left_out} more characters)", &message[..end])
        }
        None => message,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = api::ApiError {
            code: self.code.to_string(),
            message: shortened(self.message),
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(error: anyhow::Error) -> Self {
        ApiError::internal(error)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        ApiError::internal(error.into())
    }
}

/// A body or form that axum could not read: too large, not JSON, missing fields.
fn rejection(status: StatusCode, text: String) -> ApiError {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
        _ => "bad_request",
    };
    ApiError::new(status, code, text)
}

impl From<JsonRejection> for ApiError {
    fn from(error: JsonRejection) -> Self {
        rejection(error.status(), error.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(error: QueryRejection) -> Self {
        rejection(error.status(), error.body_text())
    }
}

impl From<MultipartError> for ApiError {
    fn from(error: MultipartError) -> Self {
        rejection(error.status(), error.body_text())
    }
}

impl From<axum::extract::multipart::MultipartRejection> for ApiError {
    fn from(error: axum::extract::multipart::MultipartRejection) -> Self {
        rejection(error.status(), error.body_text())
    }
}

/// A JSON body whose rejections are [`ApiError`]s (axum's own answer in plain text).
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct JsonBody<T>(pub T);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        assert_eq!(shortened("short".into()), "short");
        let long = format!("line 1: {}", "é".repeat(2_000_000));
        let cut = shortened(long);
        assert!(
            cut.chars().count() < MAX_MESSAGE_CHARS + 40,
            "{}",
            cut.len()
        );
        assert!(cut.starts_with("line 1: é") && cut.ends_with("(1999508 more characters)"));
    }
}
