//! What a handler leaves of a request body is read before its response goes out, when little is
//! left. A handler that answers early (403 before reading an upload, a 400 on its first bad
//! field, 413 once a body passes its route's limit) would otherwise leave the body's bytes unread
//! when hyper closes the connection, and a client still sending the body can lose the answer:
//! reqwest's blocking client reports the interrupted upload instead of the 403 or the 413. When
//! more than [`MAX_DRAIN_BYTES`] are left (by the body's declared length), or the rest takes
//! longer than [`DRAIN_TIME`] to arrive, the answer is not held back: the connection closes as
//! before. It runs inside [`super::body_pace`], so the rest must also keep its pace.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::{Stream, StreamExt};

use super::body_pace::has_body;

/// The most of a body read after its handler has answered: a body up to this much over its
/// route's limit (4 MiB for `/v1`, 1 MiB for the API) still gets its 413.
pub const MAX_DRAIN_BYTES: u64 = 4 << 20;

/// How long the rest of a body may take to arrive after its handler has answered.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Middleware: reads the rest of a request body its handler dropped unfinished (when at most
/// [`MAX_DRAIN_BYTES`] are left, within [`DRAIN_TIME`]) before the response is sent.
pub async fn read_unread_rest(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    if !has_body(&request) {
        return next.run(request).await;
    }
    let left = Arc::new(Mutex::new(None));
    let request = request.map(|body| {
        Body::from_stream(Returning {
            data: Some(body.into_data_stream()),
            read: 0,
            left: left.clone(),
        })
    });
    let response = next.run(request).await;
    let rest = left
        .lock()
        .expect("the body's slot is never poisoned")
        .take();
    if let Some((rest, read)) = rest {
        // A chunked body's rest is unknown: up to the limit is read, then the connection closes.
        let unread = declared.map_or(0, |length| length.saturating_sub(read));
        if unread <= MAX_DRAIN_BYTES {
            let _ = tokio::time::timeout(DRAIN_TIME, drain(rest)).await;
        }
    }
    response
}

/// Reads and drops up to [`MAX_DRAIN_BYTES`] of `rest`.
async fn drain(mut rest: BodyDataStream) {
    let mut read = 0u64;
    while let Some(Ok(chunk)) = rest.next().await {
        read += chunk.len() as u64;
        if read > MAX_DRAIN_BYTES {
            return;
        }
    }
}

/// A request body that hands what is left of it, and how many bytes it gave, to `left` when
/// dropped before its end.
struct Returning {
    data: Option<BodyDataStream>,
    read: u64,
    left: Arc<Mutex<Option<(BodyDataStream, u64)>>>,
}

impl Stream for Returning {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(data) = self.data.as_mut() else {
            return Poll::Ready(None);
        };
        let next = data.poll_next_unpin(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) => self.read += chunk.len() as u64,
            Poll::Ready(None | Some(Err(_))) => self.data = None,
            Poll::Pending => {}
        }
        next
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(data) = self.data.take()
            && let Ok(mut left) = self.left.lock()
        {
            *left = Some((data, self.read));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Serves one route that answers 403 without reading the body, behind the middleware.
    async fn refusing_server() -> std::net::SocketAddr {
        serve(Router::new().route("/", post(|| async { StatusCode::FORBIDDEN }))).await
    }

    /// Serves `app` behind the middleware.
    async fn serve(app: Router) -> std::net::SocketAddr {
        let app = app.layer(axum::middleware::from_fn(read_unread_rest));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    }

    /// Opens a connection and sends the head of a POST declaring `length` bytes, then the
    /// first `sent` of them.
    async fn start_upload(address: std::net::SocketAddr, length: u64, sent: usize) -> TcpStream {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let head = format!("POST / HTTP/1.1\r\nhost: test\r\ncontent-length: {length}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b'x'; sent]).await.unwrap();
        stream
    }

    /// Checks that the server has not answered a body still `rest` bytes short, then sends the
    /// rest and returns the answer's first bytes.
    async fn answer_after_the_rest(stream: &mut TcpStream, rest: usize) -> Option<String> {
        // Answering now would close the connection under a client still sending.
        let early = first_bytes(stream, Duration::from_millis(300)).await;
        assert_eq!(early, None, "answered before the body had arrived");
        stream.write_all(&vec![b'x'; rest]).await.unwrap();
        first_bytes(stream, Duration::from_secs(4)).await
    }

    /// Asserts that `answer` is the head of a response with `status`.
    fn assert_status(answer: Option<String>, status: u16) {
        let line = format!("HTTP/1.1 {status}");
        assert!(
            answer
                .as_deref()
                .is_some_and(|head| head.starts_with(&line)),
            "{answer:?}"
        );
    }

    /// The first bytes the server sends, waiting at most `wait`; `None` when it sent none.
    async fn first_bytes(stream: &mut TcpStream, wait: Duration) -> Option<String> {
        let mut buffer = [0u8; 64];
        match tokio::time::timeout(wait, stream.read(&mut buffer)).await {
            Ok(Ok(read)) => Some(String::from_utf8_lossy(&buffer[..read]).into_owned()),
            Ok(Err(error)) => Some(format!("error: {error}")),
            Err(_) => None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_early_answer_waits_for_the_rest_of_a_small_body() {
        let address = refusing_server().await;
        let length = 512 << 10;
        let mut stream = start_upload(address, length, 1024).await;
        let answer = answer_after_the_rest(&mut stream, length as usize - 1024).await;
        assert_status(answer, 403);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_early_answer_reaches_a_client_still_sending_its_body() {
        // reqwest's blocking client streams the upload; without the middleware it usually
        // reports "connection closed" while sending instead of the 403.
        let address = refusing_server().await;
        let bytes = 512usize << 10;
        let status = tokio::task::spawn_blocking(move || {
            let body = std::io::Cursor::new(vec![b'x'; bytes]);
            reqwest::blocking::Client::new()
                .post(format!("http://{address}/"))
                .body(reqwest::blocking::Body::sized(body, bytes as u64))
                .send()
                .map(|response| response.status().as_u16())
        })
        .await
        .unwrap();
        assert_eq!(status.unwrap(), 403);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_413_waits_for_a_small_rest_of_a_large_body() {
        // As /v1: a 4 MiB limit and a 5 MiB body, whose last MiB arrives after the 413.
        let limit = MAX_DRAIN_BYTES as usize;
        let app = Router::new()
            .route("/", post(|_: Bytes| async { StatusCode::OK }))
            .layer(axum::extract::DefaultBodyLimit::max(limit));
        let address = serve(app).await;
        let length = limit + (1 << 20);
        let mut stream = start_upload(address, length as u64, limit + 1024).await;
        let answer = answer_after_the_rest(&mut stream, length - limit - 1024).await;
        assert_status(answer, 413);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_over_the_limit_is_not_waited_for() {
        let address = refusing_server().await;
        let mut stream = start_upload(address, MAX_DRAIN_BYTES + 1, 1024).await;
        // Answered at once, well before DRAIN_TIME, with most of the body never sent.
        let answer = first_bytes(&mut stream, DRAIN_TIME / 2).await;
        assert_status(answer, 403);
    }
}
