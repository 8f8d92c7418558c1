//! Answers written straight onto a connection, outside the app: the 429 for a client over its
//! connection limit, and in place of the bodiless answers hyper writes itself for a request
//! head it cannot parse (a NUL in a header, a bad Content-Length, a head over its buffer). Both
//! are the app's JSON errors and carry the security headers every other answer does.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::rt::{Read, ReadBufCursor, Write};

use super::security;

/// A complete HTTP/1.1 answer that closes the connection: a JSON error with the security
/// headers, plus `extra_headers` (each line ending in CRLF).
pub fn json_error(status: &str, code: &str, message: &str, extra_headers: &str) -> Vec<u8> {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{extra_headers}",
        body.len()
    );
    for (name, value) in security::headers_without_app().iter() {
        let value = value.to_str().expect("the security headers are ASCII");
        head += &format!("{name}: {value}\r\n");
    }
    head += "\r\n";
    [head.into_bytes(), body.into_bytes()].concat()
}

/// What replaces hyper's own answer if `bytes` are one: the head alone of a parse error's status,
/// with a zero `content-length` and none of the security headers (which every answer from the
/// app has).
fn replacement_for(bytes: &[u8]) -> Option<Vec<u8>> {
    let (status, code, message) = [
        (
            "400 Bad Request",
            "bad_request",
            "the request's head could not be parsed (its method, URI, a header or its \
             Content-Length is malformed)",
        ),
        (
            "414 URI Too Long",
            "uri_too_long",
            "the URI is longer than the server reads",
        ),
        (
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request's head is larger than the server reads",
        ),
    ]
    .into_iter()
    .find(|(status, ..)| {
        bytes.starts_with(b"HTTP/1.1 4")
            && bytes.starts_with(format!("HTTP/1.1 {status}\r\n").as_bytes())
    })?;
    // hyper writes its answer's head alone; a write that holds more is not one.
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != bytes.len() {
        return None;
    }
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let mut lines = head.lines().skip(1);
    let bodiless = lines.clone().any(|line| line == "content-length: 0");
    let from_app = lines.any(|line| line.starts_with("x-content-type-options:"));
    (bodiless && !from_app).then(|| json_error(status, code, message, ""))
}

/// A connection whose automatic answers from hyper are replaced by `replacement_for`'s.
pub struct WithAppAnswers<T> {
    inner: T,
    /// A replacement still to write, and how much of it is written.
    pending: Vec<u8>,
    written: usize,
}

impl<T> WithAppAnswers<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<T: Write + Unpin> WithAppAnswers<T> {
    /// Writes what is left of a replacement before anything else.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `bytes` in full if they are an answer to replace, queuing the replacement.
    fn replace(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Option<Poll<io::Result<usize>>> {
        self.pending = replacement_for(bytes)?;
        // Written now if it can be, else by the flush or shutdown hyper calls next.
        if let Poll::Ready(Err(error)) = self.poll_pending(cx) {
            return Some(Poll::Ready(Err(error)));
        }
        Some(Poll::Ready(Ok(bytes.len())))
    }
}

impl<T: Read + Unpin> Read for WithAppAnswers<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for WithAppAnswers<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(taken) = this.replace(cx, buf) {
            return taken;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|buf| !buf.is_empty())
            && let Some(taken) = this.replace(cx, first)
        {
            return taken;
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_parse_errors_are_replaced() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\
                          date: Sun, 29 Nov 2026 09:00:00 GMT\r\n\r\n";
        let replaced = String::from_utf8(replacement_for(hyper_400).unwrap()).unwrap();
        assert!(
            replaced.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{replaced}"
        );
        assert!(
            replaced.contains("x-content-type-options: nosniff\r\n"),
            "{replaced}"
        );
        assert!(replaced.contains("x-frame-options: DENY\r\n"), "{replaced}");
        assert!(replaced.contains("content-security-policy: default-src 'self'"));
        let body: serde_json::Value =
            serde_json::from_str(replaced.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["code"], "bad_request");
        let head_len = replaced.find("\r\n\r\n").unwrap() + 4;
        assert!(replaced.contains(&format!(
            "content-length: {}\r\n",
            replaced.len() - head_len
        )));

        let hyper_431 =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement_for(hyper_431).is_some());
        // The app's own answers (which carry the security headers), bodies, and heads cut short
        // pass as they are.
        let from_app = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\
                         x-content-type-options: nosniff\r\n\r\n";
        assert!(replacement_for(from_app).is_none());
        assert!(replacement_for(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(
            replacement_for(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n").is_none()
        );
        assert!(replacement_for(b"HTTP/1.1 400 Bad Request\r\ncontent-len").is_none());
        // A body that holds such a head among other bytes is left alone.
        let mut in_a_body = hyper_431.to_vec();
        in_a_body.extend_from_slice(b"more of the body");
        assert!(replacement_for(&in_a_body).is_none());
        assert!(replacement_for(b"{\"text\": \"HTTP/1.1 400 Bad Request\"}").is_none());
    }
}
