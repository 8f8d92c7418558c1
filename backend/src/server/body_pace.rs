//! Request bodies must keep coming: once the handler starts reading, a body gets [`GRACE`] and
//! then must average at least [`MIN_BYTES_PER_SECOND`], or the request ends with 408 and the
//! connection is closed. A client sending a byte a second cannot hold a handler for long.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio::time::Instant;

use super::error::ApiError;

/// How long a body may take before the rate counts.
pub const GRACE: Duration = Duration::from_secs(10);

/// The slowest average rate a body may arrive at after [`GRACE`] (a 50 MB upload may take
/// 3.5 hours at this rate; a byte a second fails after about ten seconds).
pub const MIN_BYTES_PER_SECOND: u64 = 4096;

/// Middleware: paces the body of every request that has one.
pub async fn require_pace(request: Request, next: Next) -> Response {
    if !has_body(&request) {
        return next.run(request).await;
    }
    let too_slow = Arc::new(AtomicBool::new(false));
    let flag = too_slow.clone();
    let request = request.map(|body| paced(body, flag));
    let response = next.run(request).await;
    if !too_slow.load(Ordering::Relaxed) {
        return response;
    }
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request body arrived too slowly (after {} s it must average {} KiB/s)",
            GRACE.as_secs(),
            MIN_BYTES_PER_SECOND / 1024
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Whether `request` comes with a body (chunked, or a non-zero length).
pub fn has_body(request: &Request) -> bool {
    request.headers().contains_key(header::TRANSFER_ENCODING)
        || request
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length != "0")
}

/// A body being read: when reading began and how much has come.
struct Pace {
    data: BodyDataStream,
    started: Option<Instant>,
    received: u64,
    too_slow: Arc<AtomicBool>,
}

impl Pace {
    /// When the next bytes must have arrived by.
    fn deadline(&mut self) -> Instant {
        let started = *self.started.get_or_insert_with(Instant::now);
        started
            + GRACE
            + Duration::from_secs_f64(self.received as f64 / MIN_BYTES_PER_SECOND as f64)
    }
}

/// `body`, failing with a timeout (and setting `too_slow`) when it falls behind the pace.
fn paced(body: Body, too_slow: Arc<AtomicBool>) -> Body {
    let pace = Pace {
        data: body.into_data_stream(),
        started: None,
        received: 0,
        too_slow,
    };
    let chunks = futures_util::stream::unfold(Some(pace), |pace| async move {
        let mut pace = pace?;
        let deadline = pace.deadline();
        match tokio::time::timeout_at(deadline, pace.data.next()).await {
            Ok(Some(Ok(chunk))) => {
                pace.received += chunk.len() as u64;
                Some((Ok(chunk), Some(pace)))
            }
            Ok(Some(Err(error))) => Some((Err(error), None)),
            Ok(None) => None,
            Err(_) => {
                pace.too_slow.store(true, Ordering::Relaxed);
                let error = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the request body arrived too slowly",
                );
                Some((Err(axum::Error::new(error)), None))
            }
        }
    });
    Body::from_stream(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Bytes, to_bytes};

    /// A body of `chunks` bytes, one chunk every `every`.
    fn trickle(chunks: usize, size: usize, every: Duration) -> Body {
        let stream = futures_util::stream::iter(0..chunks).then(move |_| async move {
            tokio::time::sleep(every).await;
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; size]))
        });
        Body::from_stream(stream)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_fails_after_the_grace_and_a_steady_body_arrives_whole() {
        let too_slow = Arc::new(AtomicBool::new(false));
        let slow = paced(trickle(60, 1, Duration::from_secs(1)), too_slow.clone());
        let started = Instant::now();
        assert!(to_bytes(slow, usize::MAX).await.is_err());
        let waited = started.elapsed();
        assert!(too_slow.load(Ordering::Relaxed));
        assert!(
            waited >= GRACE && waited < GRACE + Duration::from_secs(2),
            "{waited:?}"
        );

        // 8 KiB a second for a minute: slower than the grace alone allows, within the rate.
        let too_slow = Arc::new(AtomicBool::new(false));
        let steady = paced(trickle(60, 8192, Duration::from_secs(1)), too_slow.clone());
        let bytes = to_bytes(steady, usize::MAX).await.unwrap();
        assert_eq!(bytes.len(), 60 * 8192);
        assert!(!too_slow.load(Ordering::Relaxed));
    }
}
