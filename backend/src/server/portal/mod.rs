//! The team portal: accounts and teams ([`accounts`]), sign-in, sessions, API tokens and the
//! caller's rights ([`auth`]), review queues with leases and verdicts ([`queue`]) and what
//! they hold ([`items`]), the dashboard ([`stats`]) and exports ([`export`]).
//!
//! Every queue belongs to a team and every route names the team: a caller outside it gets 404,
//! a member whose role is too low 403, never the data.

pub mod accounts;
pub mod auth;
pub mod export;
pub mod items;
pub mod queue;
pub mod stats;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::AppState;

/// The largest file of items a queue takes in one upload.
const MAX_UPLOAD_BYTES: usize = 32 << 20;

/// The portal's routes, under `/api`.
pub fn router() -> Router<AppState> {
    let queue = "/teams/{team}/queues/{queue}";
    Router::new()
        .route("/auth/login", post(auth::login))
        .route("/auth/logout", post(auth::logout))
        .route("/auth/me", get(auth::me))
        .route("/invites/accept", post(accounts::accept_invite))
        .route("/tokens", post(auth::create).get(auth::list))
        .route("/tokens/{id}", delete(auth::revoke))
        .route("/teams/{team}/members", get(accounts::members))
        .route("/teams/{team}/invites", post(accounts::invite))
        .route("/teams/{team}/queues", post(queue::create).get(queue::list))
        .route(queue, get(queue::get))
        .route(&format!("{queue}/items"), post(items::add_items))
        .route(
            &format!("{queue}/upload"),
            post(items::upload).layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)),
        )
        .route(&format!("{queue}/next"), post(queue::next))
        .route(&format!("{queue}/verdicts"), post(queue::decide))
        .route(&format!("{queue}/undo"), post(queue::undo))
        .route(
            &format!("{queue}/leases/{{lease}}/draft"),
            put(queue::save_draft),
        )
        .route(&format!("{queue}/review/next"), get(queue::next_to_review))
        .route(&format!("{queue}/items/{{item}}"), get(queue::item))
        .route(
            &format!("{queue}/items/{{item}}/review"),
            post(queue::review),
        )
        .route(
            &format!("{queue}/items/{{item}}/history"),
            get(queue::history),
        )
        .route(&format!("{queue}/stats"), get(stats::get))
        .route(&format!("{queue}/export"), get(export::download))
}

/// A new random secret: 32 bytes from the thread's CSPRNG (ChaCha, seeded by the system), as hex.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A new row id with a readable prefix (`usr-…`, `team-…`).
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}-{}", hex::encode(bytes))
}

/// What the database keeps of a secret: its SHA-256, hex.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}
