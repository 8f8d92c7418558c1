//! Accepting connections: HTTP/1.1 with a deadline for each request's headers (which also closes
//! a kept-alive connection left idle), a cap on the connections one client address may hold
//! open, and a graceful stop. hyper's own answers to heads it cannot parse are replaced by the
//! app's (see [`raw_answers`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::add_extension::AddExtension;

use super::raw_answers::{self, WithAppAnswers};
use super::request_size::{HYPER_MAX_BUFFER, HYPER_MAX_HEADERS};

/// How long a client may take to send a request's headers, or to start its next request on a
/// kept-alive connection.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections one client address may hold open at once by default (a browser opens about six).
pub const CONNECTIONS_PER_CLIENT: usize = 64;

/// Limits on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// See [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// Open connections allowed per client address; `None` when every connection comes from a
    /// proxy in front, which must then limit its clients itself.
    pub per_client: Option<usize>,
}

/// Serves `app` on `listener` until `stop` is cancelled, then lets each connection finish its
/// request in flight (the caller bounds how long that may take).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let open = Arc::new(OpenConnections::default());
    let connections = TaskTracker::new();
    loop {
        let (stream, address) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, most likely: wait for some to close.
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        // Small answers go out at once rather than waiting to fill a packet.
        let _ = stream.set_nodelay(true);
        let Some(slot) = open.take(address.ip(), limits.per_client) else {
            tracing::debug!("refused a connection from {}: too many open", address.ip());
            connections.spawn(refuse(stream));
            continue;
        };
        let service =
            TowerToHyperService::new(AddExtension::new(app.clone(), ConnectInfo(address)));
        let stop = stop.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_headers(HYPER_MAX_HEADERS)
                .max_buf_size(HYPER_MAX_BUFFER);
            let connection =
                builder.serve_connection(WithAppAnswers::new(TokioIo::new(stream)), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!("connection from {address}: {error}");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Answers a connection over the limit with 429 and closes it, without reading a request.
async fn refuse(mut stream: TcpStream) {
    let reply = raw_answers::json_error(
        "429 Too Many Requests",
        "too_many_connections",
        "this address has too many connections open; close some and retry",
        "retry-after: 1\r\n",
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(&reply).await?;
        stream.shutdown().await
    })
    .await;
}

/// Open connections per client address.
#[derive(Debug, Default)]
struct OpenConnections(Mutex<HashMap<IpAddr, usize>>);

/// One open connection, counted until dropped.
struct Slot {
    open: Arc<OpenConnections>,
    address: IpAddr,
}

impl OpenConnections {
    /// A slot for one more connection from `address`, unless it already holds `limit`.
    fn take(self: &Arc<Self>, address: IpAddr, limit: Option<usize>) -> Option<Slot> {
        let mut counts = self.0.lock().unwrap();
        let count = counts.entry(address).or_default();
        if limit.is_some_and(|limit| *count >= limit) {
            return None;
        }
        *count += 1;
        Some(Slot {
            open: self.clone(),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.open.0.lock().unwrap();
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_limit_and_slots_come_back_when_dropped() {
        let open = Arc::new(OpenConnections::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let slots: Vec<Slot> = (0..3).map(|_| open.take(a, Some(3)).unwrap()).collect();
        assert!(open.take(a, Some(3)).is_none());
        // Another address has its own count; no limit means no refusal.
        assert!(open.take(b, Some(3)).is_some());
        assert!(open.take(a, None).is_some());
        drop(slots);
        assert!(
            open.0.lock().unwrap().is_empty(),
            "counts of zero are forgotten"
        );
        assert!(open.take(a, Some(3)).is_some());
    }
}
