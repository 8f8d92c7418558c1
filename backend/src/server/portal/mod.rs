//! The team portal: accounts and teams as stored ([`accounts`]), members and invitations
//! ([`invites`]), sign-in, sessions, API tokens and the caller's rights ([`auth`]), review queues with leases and verdicts ([`queue`]) and what
//! they hold ([`items`]), the dashboard ([`stats`]) and exports ([`export`]).
//!
//! Every queue belongs to a team and every route names the team: a caller outside it gets 404,
//! a member whose role is too low 403, never the data.

pub mod accounts;
pub mod auth;
pub mod export;
pub mod invites;
pub mod items;
pub mod queue;
pub mod stats;

use axum::extract::DefaultBodyLimit;
use rand::RngCore;
use sha2::{Digest, Sha256};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use super::AppState;

/// The largest file of items a queue takes in one upload.
const MAX_UPLOAD_BYTES: usize = 32 << 20;

/// The portal's routes, under `/api`, with their OpenAPI descriptions.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(auth::login))
        .routes(routes!(auth::logout))
        .routes(routes!(auth::me))
        .routes(routes!(invites::accept_invite))
        .routes(routes!(auth::create, auth::list))
        .routes(routes!(auth::revoke))
        .routes(routes!(invites::members))
        .routes(routes!(invites::invite))
        .routes(routes!(queue::create, queue::list))
        .routes(routes!(queue::get))
        .routes(routes!(items::add_items))
        .routes(routes!(items::upload).layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)))
        .routes(routes!(queue::next))
        .routes(routes!(queue::decide))
        .routes(routes!(queue::undo))
        .routes(routes!(queue::save_draft))
        .routes(routes!(queue::next_to_review))
        .routes(routes!(queue::item))
        .routes(routes!(queue::review))
        .routes(routes!(queue::history))
        .routes(routes!(stats::get))
        .routes(routes!(export::download))
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
