//! Team members and invitations: listing a team's members, inviting someone by email, and
//! accepting an invitation. Invitations are random secrets stored as hashes and used once;
//! one for an email that has an account never takes a password (the person signs in first).

use anyhow::Context;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flipside_shared::api::ApiError as ErrorBody;
use flipside_shared::portal::{AcceptInvite, Invite, InviteRequest, Me, Member, Role, UserInfo};

use super::accounts::{create_user, memberships, normalise_email, set_membership, user_by_email};
use super::auth::{Caller, Client, MANAGE, READ, start_session};
use super::{hash_secret, new_secret};
use crate::server::AppState;
use crate::server::db::{Db, now, now_plus, with_pool};
use crate::server::error::{ApiError, ApiResult, JsonBody};

/// How long an invitation can be accepted.
const INVITE_SECONDS: i64 = 7 * 24 * 3600;

/// `GET /api/teams/{team}/members`.
#[utoipa::path(get, path = "/teams/{team}/members", tag = "accounts", params(("team" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Vec<Member>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn members(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
) -> ApiResult<Json<Vec<Member>>> {
    caller.require(&state.db, &team, READ).await?;
    let rows: Vec<(String, String, String, String)> = with_pool!(&state.db, |pool| {
        sqlx::query_as(
            "SELECT u.id, u.email, u.name, m.role FROM memberships m \
             JOIN users u ON u.id = m.user_id WHERE m.team_id = $1 ORDER BY u.name",
        )
        .bind(&team)
        .fetch_all(pool)
        .await
    })?;
    Ok(Json(
        rows.into_iter()
            .filter_map(|(id, email, name, role)| {
                Some(Member {
                    user: UserInfo { id, email, name },
                    role: Role::parse(&role)?,
                })
            })
            .collect(),
    ))
}

/// `POST /api/teams/{team}/invites` (admins): an invitation to join with a role, valid for a
/// week. The token is in this answer only.
#[utoipa::path(post, path = "/teams/{team}/invites", tag = "accounts", params(("team" = String, Path)), request_body = InviteRequest, security(("session" = []), ("token" = ["manage"])), responses((status = 201, body = Invite), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn invite(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
    JsonBody(request): JsonBody<InviteRequest>,
) -> ApiResult<(StatusCode, Json<Invite>)> {
    caller.require(&state.db, &team, MANAGE).await?;
    let email =
        normalise_email(&request.email).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let token = new_secret();
    let expires_at = now_plus(INVITE_SECONDS);
    with_pool!(&state.db, |pool| sqlx::query(
        "INSERT INTO invites (secret_hash, team_id, email, role, created_by, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)"
    )
    .bind(hash_secret(&token))
    .bind(&team)
    .bind(&email)
    .bind(request.role.as_str())
    .bind(&caller.user.id)
    .bind(&expires_at)
    .execute(pool)
    .await
    .map(drop))?;
    super::queue::audit(
        &state.db,
        &team,
        None,
        Some(&caller.user.id),
        "invite",
        serde_json::json!({"email": email, "role": request.role}),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Invite {
            path: format!("/#/invite/{token}"),
            token,
            email,
            role: request.role,
            expires_at,
        }),
    ))
}

/// `POST /api/invites/accept`: joins the invitation's team. Signed in (a browser session), as
/// the person invited; signed out, only an email without an account, which the acceptance makes
/// (with `name` and `password`) and signs in. An existing account never gives its password
/// here: it signs in first, where the sign-in limits apply, and the answer to a signed-out
/// acceptance for it names no email.
#[utoipa::path(post, path = "/invites/accept", tag = "accounts", request_body = AcceptInvite, security((), ("session" = [])), responses((status = 200, body = Me, description = "Joined (and, for a new account, signed in)"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody, description = "Sign in first: the invitation is for an existing account"), (status = 403, body = ErrorBody, description = "Signed in as someone else"), (status = 404, body = ErrorBody)))]
pub async fn accept_invite(
    State(state): State<AppState>,
    client: Client,
    caller: Result<Caller, ApiError>,
    JsonBody(request): JsonBody<AcceptInvite>,
) -> ApiResult<Response> {
    let db = &state.db;
    // A browser session only: a token cannot join teams. No session (or one that has ended) is
    // signed out; a session without its CSRF token, or a failure, is answered as it is.
    let signed_in = match caller {
        Ok(caller) => Some(caller).filter(|caller| caller.scopes.is_none()),
        Err(error) if error.status == StatusCode::UNAUTHORIZED => None,
        Err(error) => return Err(error),
    };
    let hash = hash_secret(request.token.trim());
    // Marking it used first makes a second, concurrent acceptance find nothing.
    let invite: Option<(String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "UPDATE invites SET used_at = $2 WHERE secret_hash = $1 AND used_at IS NULL \
         AND expires_at > $2 RETURNING team_id, email, role"
    )
    .bind(&hash)
    .bind(now())
    .fetch_optional(pool)
    .await)?;
    let Some((team, email, role)) = invite else {
        return Err(ApiError::not_found(
            "open invitation with this token (it may have been used or have expired)",
        ));
    };
    let role = Role::parse(&role).context("an invitation's role")?;
    // The user, and the CSRF token of the session they are signed in with (none for a new
    // account, which gets a session below).
    let (user, csrf) = match signed_in {
        Some(caller) if caller.user.email == email => (caller.user, caller.csrf),
        Some(_) => {
            let message = "this invitation is for someone else: sign out, or sign in as the \
                           person invited";
            return refuse(
                db,
                &hash,
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            )
            .await;
        }
        None if user_by_email(db, &email).await?.is_some() => {
            let message = "sign in as the person invited, then open the invitation again";
            let error = ApiError::new(StatusCode::UNAUTHORIZED, "sign_in_required", message);
            return refuse(db, &hash, error).await;
        }
        None => match create_user(db, &email, &request.name, &request.password).await {
            Ok(user) => (user, None),
            Err(e) => return refuse(db, &hash, ApiError::bad_request(e.to_string())).await,
        },
    };
    set_membership(db, &team, &user.id, role).await?;
    super::queue::audit(
        db,
        &team,
        None,
        Some(&user.id),
        "join",
        serde_json::json!({"role": role}),
    )
    .await?;
    if csrf.is_some() {
        let teams = memberships(db, &user.id).await?;
        return Ok(Json(Me { user, teams, csrf }).into_response());
    }
    Ok(start_session(db, user, client.https).await?.into_response())
}

/// Opens the invitation `hash` again after an acceptance that failed with `error`.
async fn refuse(db: &Db, hash: &str, error: ApiError) -> ApiResult<Response> {
    with_pool!(db, |pool| sqlx::query(
        "UPDATE invites SET used_at = NULL WHERE secret_hash = $1"
    )
    .bind(hash)
    .execute(pool)
    .await
    .map(drop))?;
    Err(error)
}
