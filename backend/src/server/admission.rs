//! Admission control for the expensive endpoints (the demo's edit, retrieve and classify, and
//! the embedded LLM's `/v1`): at most `workers` requests run at once and at most `max_waiting`
//! wait, each for at most `max_wait`; anything beyond is answered at once with 503 and
//! `Retry-After`, so that an overloaded server stays responsive instead of queueing without
//! bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::{ApiError, ApiResult};

/// The seconds a refused client is told to wait.
const RETRY_SECONDS: u64 = 5;

/// Who may run now, and how many may wait.
pub struct Admission {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
    max_wait: Duration,
}

/// A running request's place; freed when dropped.
pub struct Turn {
    _permit: OwnedSemaphorePermit,
}

/// Counts a waiting request until dropped (also when its client goes away while it waits).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub fn new(workers: usize, max_waiting: usize, max_wait: Duration) -> Self {
        Self {
            running: Arc::new(Semaphore::new(workers.max(1))),
            waiting: AtomicUsize::new(0),
            max_waiting,
            max_wait,
        }
    }

    /// As many workers as cores, four waiting per worker, 30 s of waiting at most.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(cores, 4 * cores, Duration::from_secs(30))
    }

    /// Waits for a turn: 503 with `Retry-After` when too many already wait or the wait runs
    /// out.
    pub async fn enter(&self) -> ApiResult<Turn> {
        let busy = || {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the server is busy with other requests: try again shortly",
            )
            .retry_after(RETRY_SECONDS)
        };
        if let Ok(permit) = self.running.clone().try_acquire_owned() {
            return Ok(Turn { _permit: permit });
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(busy());
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.max_wait, self.running.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Turn { _permit: permit }),
            _ => Err(busy()),
        }
    }
}

/// Middleware: runs the request in a turn of `admission`.
pub async fn admit(
    State(admission): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    match admission.enter().await {
        Ok(turn) => {
            let response = next.run(request).await;
            let streamed = response
                .headers()
                .get(axum::http::header::CONTENT_TYPE)
                .is_some_and(|kind| kind.as_bytes().starts_with(b"text/event-stream"));
            if !streamed {
                return response;
            }
            // A streamed reply (`/v1` with `stream: true`) keeps its turn until it is sent or
            // its client leaves: the model works while the body is written.
            use futures_util::StreamExt;
            let (parts, body) = response.into_parts();
            let body = body.into_data_stream().map(move |chunk| {
                let _held = &turn;
                chunk
            });
            Response::from_parts(parts, axum::body::Body::from_stream(body))
        }
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn beyond_the_workers_and_the_waiting_room_requests_are_refused() {
        let admission = Arc::new(Admission::new(1, 1, Duration::from_millis(200)));
        let first = admission.enter().await.unwrap();
        // The second waits; the third finds the waiting room full.
        let waiter = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.enter().await.map(drop) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let refused = admission.enter().await.err().unwrap();
        assert_eq!(
            (refused.status, refused.retry_after),
            (StatusCode::SERVICE_UNAVAILABLE, Some(RETRY_SECONDS))
        );
        // The waiter gets in once the first is done.
        drop(first);
        waiter.await.unwrap().unwrap();
        // A wait that runs out is refused too, and leaves the room empty.
        let held = admission.enter().await.unwrap();
        assert!(admission.enter().await.is_err());
        assert_eq!(admission.waiting.load(Ordering::SeqCst), 0);
        drop(held);
        admission.enter().await.unwrap();
    }
}
