//! The request log: one line per request on the server's log (target `flipside::access`, at info
//! level; `--quiet` or `RUST_LOG=info,flipside::access=off` turns it off): client, method, path
//! (never the query), status and the time to the response's headers.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use super::portal::auth::Client;

/// Middleware: logs each request when its response starts.
pub async fn log_request(client: Client, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    tracing::info!(
        target: "flipside::access",
        "{} \"{method} {}\" {} {:.1} ms",
        client.address,
        path.escape_debug(),
        response.status().as_u16(),
        started.elapsed().as_secs_f64() * 1e3
    );
    response
}
