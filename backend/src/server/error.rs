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

impl ApiError {
    /// A failure to write: 507 when the server's disk (or a file size limit) is full, so that
    /// the client knows to retry later; otherwise 500.
    pub fn storage(error: std::io::Error) -> Self {
        use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
        if !matches!(error.kind(), StorageFull | QuotaExceeded | FileTooLarge) {
            return Self::internal(error.into());
        }
        tracing::error!("out of disk space: {error}");
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            "the server's disk is full: nothing was kept; try again later",
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

impl ApiError {
    /// The body the API answers this error with.
    pub fn body(&self) -> api::ApiError {
        api::ApiError {
            code: self.code.to_string(),
            message: shortened(self.message.clone()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
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

/// URL query parameters whose rejections are [`ApiError`]s (axum's own answer in plain text).
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct QueryParams<T>(pub T);

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

    /// Generated bodies for the API's request types: read, or refused as a client error whose
    /// JSON reply carries a stable code and a short message.
    mod properties {
        use super::*;
        use axum::extract::FromRequest;
        use flipside_shared::api::{ClassifyRequest, EditRequest, JobRequest, RetrieveRequest};
        use proptest::prelude::*;

        /// JSON made of the request types' own field names and odd values, or any bytes.
        fn body() -> impl Strategy<Value = Vec<u8>> {
            let field = proptest::sample::select(vec![
                "text",
                "label",
                "target",
                "method",
                "keywords",
                "seed",
                "k",
                "texts",
                "dataset",
                "limit",
                "max_words",
                "verify",
                "max_attempts",
                "x",
            ]);
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<u64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                ".{0,30}".prop_map(serde_json::Value::from),
                Just(serde_json::Value::from("core")),
            ];
            let value = leaf.prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6)
                        .prop_map(serde_json::Value::from),
                    proptest::collection::btree_map(".{0,8}", inner, 0..4)
                        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            });
            prop_oneof![
                3 => proptest::collection::btree_map(field, value, 0..8).prop_map(|fields| {
                    serde_json::to_vec(&fields).unwrap()
                }),
                1 => proptest::collection::vec(any::<u8>(), 0..200),
            ]
        }

        /// Reads `body` as a `T`; on refusal, checks the reply.
        fn check<T: serde::de::DeserializeOwned + Send + 'static>(
            body: Vec<u8>,
        ) -> Result<(), TestCaseError> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let request = axum::http::Request::builder()
                .method("POST")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body))
                .unwrap();
            let Err(error) = runtime.block_on(JsonBody::<T>::from_request(request, &())) else {
                return Ok(());
            };
            prop_assert!(error.status.is_client_error(), "{error:?}");
            let status = error.status;
            let response = error.into_response();
            prop_assert_eq!(response.status(), status);
            let bytes = runtime
                .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                .unwrap();
            let reply: api::ApiError = serde_json::from_slice(&bytes).unwrap();
            prop_assert!(!reply.code.is_empty() && !reply.message.is_empty());
            prop_assert!(reply.message.chars().count() < MAX_MESSAGE_CHARS + 40);
            Ok(())
        }

        proptest! {
            #![proptest_config(crate::property_config(600))]

            #[test]
            fn request_bodies_are_read_or_refused_with_a_clear_error(body in body()) {
                check::<EditRequest>(body.clone())?;
                check::<RetrieveRequest>(body.clone())?;
                check::<ClassifyRequest>(body.clone())?;
                check::<JobRequest>(body)?;
            }
        }
    }
}
