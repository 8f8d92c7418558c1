//! What a handler leaves of a small request body is read before its response goes out. A
//! handler that answers early (403 before reading an upload, a 400 on its first bad field) would
//! otherwise leave the body's bytes unread when hyper closes the connection, and a client still
//! sending the body can lose the answer: reqwest's blocking client reports the interrupted
//! upload instead of the 403. Bodies over [`MAX_DRAIN_BYTES`], or ones whose rest takes longer
//! than [`DRAIN_TIME`] to arrive, are not waited for: the connection closes as before. It runs
//! inside [`super::body_pace`], so the rest must also keep its pace.

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

/// The most of a body read after its handler has answered.
pub const MAX_DRAIN_BYTES: u64 = 1 << 20;

/// How long the rest of a body may take to arrive after its handler has answered.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Middleware: reads the rest of a request body its handler dropped unfinished (up to
/// [`MAX_DRAIN_BYTES`] within [`DRAIN_TIME`]) before the response is sent.
pub async fn read_unread_rest(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    if !has_body(&request) || declared.is_some_and(|length| length > MAX_DRAIN_BYTES) {
        return next.run(request).await;
    }
    let left = Arc::new(Mutex::new(None));
    let request = request.map(|body| {
        Body::from_stream(Returning {
            data: Some(body.into_data_stream()),
            left: left.clone(),
        })
    });
    let response = next.run(request).await;
    let rest = left
        .lock()
        .expect("the body's slot is never poisoned")
        .take();
    if let Some(rest) = rest {
        let _ = tokio::time::timeout(DRAIN_TIME, drain(rest)).await;
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

/// A request body that hands what is left of it to `left` when dropped before its end.
struct Returning {
    data: Option<BodyDataStream>,
    left: Arc<Mutex<Option<BodyDataStream>>>,
}

impl Stream for Returning {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(data) = self.data.as_mut() else {
            return Poll::Ready(None);
        };
        let next = data.poll_next_unpin(cx);
        if let Poll::Ready(None | Some(Err(_))) = next {
            self.data = None;
        }
        next
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(data) = self.data.take()
            && let Ok(mut left) = self.left.lock()
        {
            *left = Some(data);
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
        let app = Router::new()
            .route("/", post(|| async { StatusCode::FORBIDDEN }))
            .layer(axum::middleware::from_fn(read_unread_rest));
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
        // Answering now would close the connection under a client still sending.
        let early = first_bytes(&mut stream, Duration::from_millis(300)).await;
        assert_eq!(early, None, "answered before the body had arrived");
        stream
            .write_all(&vec![b'x'; length as usize - 1024])
            .await
            .unwrap();
        let answer = first_bytes(&mut stream, Duration::from_secs(4)).await;
        assert!(
            answer
                .as_deref()
                .is_some_and(|head| head.starts_with("HTTP/1.1 403")),
            "{answer:?}"
        );
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
    async fn a_body_over_the_limit_is_not_waited_for() {
        let address = refusing_server().await;
        let mut stream = start_upload(address, MAX_DRAIN_BYTES + 1, 1024).await;
        // Answered at once, well before DRAIN_TIME, with most of the body never sent.
        let answer = first_bytes(&mut stream, DRAIN_TIME / 2).await;
        assert!(
            answer
                .as_deref()
                .is_some_and(|head| head.starts_with("HTTP/1.1 403")),
            "{answer:?}"
        );
    }
}
