//! Who is calling, and what they may do: browser sessions (an HttpOnly, SameSite=Strict cookie,
//! plus a CSRF token that state-changing requests send back as a header), API tokens for
//! scripts and the CLI (`Authorization: Bearer …`: hashed, scoped, revocable), and sign-in with
//! throttling.

use flipside_shared::api::ApiError as ErrorBody;

use anyhow::{Context, Result};
use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flipside_shared::portal::{ApiToken, LoginRequest, Me, Role, Scope, TokenRequest, UserInfo};

use super::accounts::{memberships, role_in, user_by_email, verify_password};
use super::{hash_secret, new_id, new_secret};
use crate::server::AppState;
use crate::server::db::{Db, now, now_plus, with_pool};
use crate::server::error::{ApiError, ApiResult, JsonBody};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "flipside_session";
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a browser session lasts.
const SESSION_SECONDS: i64 = 7 * 24 * 3600;
/// Failed sign-ins of one email within `THROTTLE_SECONDS` before it is refused for a while.
pub const MAX_FAILED_LOGINS: i64 = 5;
/// Failed sign-ins from one client address (of any emails) within `THROTTLE_SECONDS` before
/// that address is refused for a while.
pub const MAX_FAILED_LOGINS_PER_ADDRESS: i64 = 30;
const THROTTLE_SECONDS: i64 = 15 * 60;
/// The longest email a sign-in reads (RFC 5321's limit on a path is 256 bytes).
const MAX_EMAIL_BYTES: usize = 254;
/// API tokens start with this, so that they are easy to spot (and to scan for in leaks).
const TOKEN_PREFIX: &str = "fst_";

/// What a route needs: the least role in the team, and the scope an API token must have.
pub type Access = (Role, Scope);
/// Reading queues, items and the dashboard.
pub const READ: Access = (Role::Viewer, Scope::Read);
/// Deciding items and writing counterfactuals.
pub const DECIDE: Access = (Role::Annotator, Scope::Review);
/// The second pass.
pub const REVIEW: Access = (Role::Reviewer, Scope::Review);
/// Reading what the second pass needs.
pub const REVIEW_READ: Access = (Role::Reviewer, Scope::Read);
/// Downloading exports.
pub const EXPORT: Access = (Role::Reviewer, Scope::Export);
/// Invitations and queues.
pub const MANAGE: Access = (Role::Admin, Scope::Manage);
/// Uploading datasets, starting and cancelling generation jobs.
pub const GENERATE: Access = (Role::Reviewer, Scope::Generate);

/// The signed-in caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: UserInfo,
    /// An API token's scopes; `None` for a browser session (which may do what the role allows).
    pub scopes: Option<Vec<Scope>>,
    /// The session's CSRF token.
    pub csrf: Option<String>,
}

impl Caller {
    /// The caller's role in `team` if it is at least `access`'s and the token (if any) has its
    /// scope: 404 when they are not a member (the team's existence is not revealed), 403
    /// otherwise.
    pub async fn require(&self, db: &Db, team: &str, access: Access) -> ApiResult<Role> {
        let (role, scope) = access;
        let Some(actual) = role_in(db, team, &self.user.id).await? else {
            return Err(ApiError::not_found(format_args!("team {team}")));
        };
        if actual < role {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this needs the {} role; you are {}",
                    role.as_str(),
                    actual.as_str()
                ),
            ));
        }
        self.require_scope(scope)?;
        Ok(actual)
    }

    /// 403 unless the caller is a session or a token with `scope`.
    pub fn require_scope(&self, scope: Scope) -> ApiResult<()> {
        match &self.scopes {
            Some(scopes) if !scopes.contains(&scope) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this token lacks the {} scope", scope.as_str()),
            )),
            _ => Ok(()),
        }
    }
}

/// Lets a request to the edit demo through: anyone's, unless the server is private
/// (`flipside serve --private`), then only a signed-in caller's.
pub struct DemoAccess;

impl FromRequestParts<AppState> for DemoAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        if state.private {
            Caller::from_request_parts(parts, state).await?;
        }
        Ok(DemoAccess)
    }
}

/// Guards the embedded LLM's OpenAI-compatible API: a session, or an API token with the
/// `generate` scope (sent as the OpenAI API key), of someone who may generate ([`GENERATE`]'s
/// role) in at least one team, as datasets and jobs need.
pub async fn require_generate(
    State(state): State<AppState>,
    caller: Caller,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> ApiResult<Response> {
    caller.require_scope(Scope::Generate)?;
    let teams = memberships(&state.db, &caller.user.id).await?;
    if !teams.iter().any(|team| team.role >= GENERATE.0) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "the LLM API needs the {} role in a team",
                GENERATE.0.as_str()
            ),
        ));
    }
    Ok(next.run(request).await)
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        if let Some(token) = bearer(&parts.headers) {
            return token_caller(&state.db, &token)
                .await?
                .ok_or_else(|| unauthorized("the API token is unknown or revoked"));
        }
        let Some(secret) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(unauthorized("sign in first (or send an API token)"));
        };
        let caller = session_caller(&state.db, &secret)
            .await?
            .ok_or_else(|| unauthorized("the session has ended: sign in again"))?;
        let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        let sent = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !safe && sent.map(hash_secret) != caller.csrf.as_deref().map(hash_secret) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf",
                format!("a request made with the session cookie needs the {CSRF_HEADER} header"),
            ));
        }
        Ok(caller)
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name && !value.is_empty()).then(|| value.to_string())
        })
}

async fn session_caller(db: &Db, secret: &str) -> Result<Option<Caller>> {
    let row: Option<(String, String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT u.id, u.email, u.name, s.csrf FROM sessions s JOIN users u ON u.id = s.user_id \
         WHERE s.secret_hash = $1 AND s.expires_at > $2"
    )
    .bind(hash_secret(secret))
    .bind(now())
    .fetch_optional(pool)
    .await)?;
    Ok(row.map(|(id, email, name, csrf)| Caller {
        user: UserInfo { id, email, name },
        scopes: None,
        csrf: Some(csrf),
    }))
}

async fn token_caller(db: &Db, token: &str) -> Result<Option<Caller>> {
    let row: Option<(String, String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT u.id, u.email, u.name, t.scopes FROM api_tokens t \
         JOIN users u ON u.id = t.user_id WHERE t.secret_hash = $1 AND t.revoked_at IS NULL"
    )
    .bind(hash_secret(token))
    .fetch_optional(pool)
    .await)?;
    row.map(|(id, email, name, scopes)| {
        Ok(Caller {
            user: UserInfo { id, email, name },
            scopes: Some(serde_json::from_str(&scopes).context("a token's scopes")?),
            csrf: None,
        })
    })
    .transpose()
}

/// Opens a session for `user`: the answer sets the cookie and carries [`Me`] with the CSRF
/// token.
pub async fn start_session(db: &Db, user: UserInfo, secure: bool) -> Result<Response> {
    let secret = new_secret();
    let csrf = new_secret();
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO sessions (secret_hash, user_id, csrf, expires_at, created_at) \
         VALUES ($1, $2, $3, $4, $5)"
    )
    .bind(hash_secret(&secret))
    .bind(&user.id)
    .bind(&csrf)
    .bind(now_plus(SESSION_SECONDS))
    .bind(now())
    .execute(pool)
    .await
    .map(drop))?;
    let teams = memberships(db, &user.id).await?;
    let cookie = format!(
        "{SESSION_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_SECONDS}{}",
        if secure { "; Secure" } else { "" }
    );
    let me = Me {
        user,
        teams,
        csrf: Some(csrf),
    };
    Ok(([(header::SET_COOKIE, cookie)], Json(me)).into_response())
}

/// The client of a request: its address, and whether it reached the server over HTTPS. Behind
/// a proxy (`flipside serve --behind-proxy`) both come from the proxy's `X-Forwarded-For` (its
/// last entry: the address the proxy saw) and `X-Forwarded-Proto`; otherwise from the
/// connection.
#[derive(Debug, Clone)]
pub struct Client {
    pub address: String,
    pub https: bool,
}

impl FromRequestParts<AppState> for Client {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip().to_string())
            .unwrap_or_default();
        if !state.behind_proxy {
            return Ok(Client {
                address: peer,
                https: false,
            });
        }
        let header = |name: &str| {
            parts
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .rfind(|v| !v.is_empty())
                .map(str::to_string)
        };
        Ok(Client {
            address: header("x-forwarded-for").unwrap_or(peer),
            https: header("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https")),
        })
    }
}

/// Why sign-in is refused for now, and for how many seconds: too many recent failures for
/// `email`, or from `address`, besides the attempt being made (`attempt`, recorded already).
pub async fn throttled(
    db: &Db,
    email: &str,
    address: &str,
    attempt: &str,
) -> Result<Option<(String, i64)>> {
    let since = now_plus(-THROTTLE_SECONDS);
    let (of_email, email_oldest, of_address, address_oldest): (
        i64,
        Option<String>,
        i64,
        Option<String>,
    ) = with_pool!(db, |pool| sqlx::query_as(
        "SELECT COUNT(CASE WHEN email = $1 THEN 1 END), MIN(CASE WHEN email = $1 THEN at END), \
         COUNT(CASE WHEN address = $2 THEN 1 END), MIN(CASE WHEN address = $2 THEN at END) \
         FROM login_failures WHERE (email = $1 OR address = $2) AND at > $3 \
         AND (attempt IS NULL OR attempt <> $4)"
    )
    .bind(email)
    .bind(address)
    .bind(&since)
    .bind(attempt)
    .fetch_one(pool)
    .await)?;
    let wait = |oldest: Option<String>| {
        oldest
            .as_deref()
            .and_then(seconds_until_window_ends)
            .unwrap_or(THROTTLE_SECONDS)
    };
    Ok(if of_email >= MAX_FAILED_LOGINS {
        Some((
            format!("too many failed sign-ins for {email}"),
            wait(email_oldest),
        ))
    } else if of_address >= MAX_FAILED_LOGINS_PER_ADDRESS {
        Some((
            "too many failed sign-ins from your address".to_string(),
            wait(address_oldest),
        ))
    } else {
        None
    })
}

/// `POST /api/auth/login`: signs in with email and password. After
/// [`MAX_FAILED_LOGINS`] failures for one email, or [`MAX_FAILED_LOGINS_PER_ADDRESS`] from one
/// client address, within 15 minutes, further attempts get 429 until the oldest of them is 15
/// minutes old. The session cookie is `Secure` when the client came over HTTPS.
#[utoipa::path(post, path = "/auth/login", tag = "accounts", request_body = LoginRequest, responses((status = 200, body = Me, description = "Signed in: sets the session cookie"), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody, description = "Too many failures: see Retry-After")))]
pub async fn login(
    State(state): State<AppState>,
    client: Client,
    JsonBody(request): JsonBody<LoginRequest>,
) -> ApiResult<Response> {
    let db = &state.db;
    let email = request.email.trim().to_lowercase();
    if email.len() > MAX_EMAIL_BYTES {
        return Err(ApiError::bad_request(format!(
            "an email has at most {MAX_EMAIL_BYTES} bytes"
        )));
    }
    // The attempt counts as a failure from before its password is checked, so that guesses
    // sent at once cannot all pass the limits; it is taken back if it is over them (a refused
    // attempt does not prolong the wait) or the password is right.
    let attempt = new_id("try");
    let since = now_plus(-THROTTLE_SECONDS);
    forget_failures(db, "DELETE FROM login_failures WHERE at <= $1", &since).await?;
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO login_failures (email, at, address, attempt) VALUES ($1, $2, $3, $4)"
    )
    .bind(&email)
    .bind(now())
    .bind(&client.address)
    .bind(&attempt)
    .execute(pool)
    .await
    .map(drop))?;
    if let Some((why, wait)) = throttled(db, &email, &client.address, &attempt).await? {
        forget_failures(
            db,
            "DELETE FROM login_failures WHERE attempt = $1",
            &attempt,
        )
        .await?;
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "throttled",
            format!("{why}: try again in {wait} s"),
        )
        .retry_after(wait.max(1) as u64));
    }
    let user = user_by_email(db, &email).await?;
    // Checked whether or not the email has an account (against a decoy when it has none), so
    // that an unknown email takes as long to refuse as a wrong password.
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let matches = verify_password(hash, &request.password).await?;
    match user {
        Some(user) if matches => {
            forget_failures(db, "DELETE FROM login_failures WHERE email = $1", &email).await?;
            Ok(start_session(db, user.info, client.https).await?)
        }
        _ => Err(unauthorized("wrong email or password")),
    }
}

/// Deletes the failed sign-ins `statement` picks by `value`.
async fn forget_failures(db: &Db, statement: &'static str, value: &str) -> Result<()> {
    with_pool!(db, |pool| sqlx::query(statement)
        .bind(value)
        .execute(pool)
        .await
        .map(drop))?;
    Ok(())
}

/// Seconds until a failure at `oldest` leaves the throttling window.
fn seconds_until_window_ends(oldest: &str) -> Option<i64> {
    let at =
        time::OffsetDateTime::parse(oldest, &time::format_description::well_known::Rfc3339).ok()?;
    let ends = at + time::Duration::seconds(THROTTLE_SECONDS);
    Some(
        (ends - time::OffsetDateTime::now_utc())
            .whole_seconds()
            .max(1),
    )
}

/// `POST /api/auth/logout`: ends the session.
#[utoipa::path(post, path = "/auth/logout", tag = "accounts", responses((status = 204, description = "The session has ended")))]
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(secret) = cookie(&headers, SESSION_COOKIE) {
        with_pool!(&state.db, |pool| sqlx::query(
            "DELETE FROM sessions WHERE secret_hash = $1"
        )
        .bind(hash_secret(&secret))
        .execute(pool)
        .await
        .map(drop))?;
    }
    let clear = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    Ok(([(header::SET_COOKIE, clear)], StatusCode::NO_CONTENT).into_response())
}

/// `GET /api/auth/me`: the caller, their teams and (for a session) the CSRF token.
#[utoipa::path(get, path = "/auth/me", tag = "accounts", security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Me), (status = 401, body = ErrorBody)))]
pub async fn me(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Me>> {
    Ok(Json(Me {
        teams: memberships(&state.db, &caller.user.id).await?,
        user: caller.user,
        csrf: caller.csrf,
    }))
}

/// Makes an API token for `user`; the answer is the only place its secret appears.
pub async fn create_token(db: &Db, user: &str, name: &str, scopes: &[Scope]) -> Result<ApiToken> {
    let token = format!("{TOKEN_PREFIX}{}", new_secret());
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    let id = new_id("tok");
    let created_at = now();
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO api_tokens (id, user_id, name, secret_hash, scopes, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)"
    )
    .bind(&id)
    .bind(user)
    .bind(name)
    .bind(hash_secret(&token))
    .bind(serde_json::to_string(&scopes)?)
    .bind(&created_at)
    .execute(pool)
    .await
    .map(drop))?;
    Ok(ApiToken {
        id,
        name: name.to_string(),
        scopes,
        token: Some(token),
        created_at,
        revoked_at: None,
    })
}

/// `POST /api/tokens`: a token for scripts and the CLI, acting as the caller within `scopes`.
/// Made from a browser session, or with a token that has the `manage` scope.
#[utoipa::path(post, path = "/tokens", tag = "accounts", request_body = TokenRequest, security(("session" = []), ("token" = ["manage"])), responses((status = 201, body = ApiToken, description = "The only answer holding the secret"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<TokenRequest>,
) -> ApiResult<(StatusCode, Json<ApiToken>)> {
    caller.require_scope(Scope::Manage)?;
    if request.scopes.is_empty() || request.name.trim().is_empty() {
        return Err(ApiError::bad_request(
            "a token needs a name and at least one scope",
        ));
    }
    if let Some(scopes) = &caller.scopes
        && request.scopes.iter().any(|s| !scopes.contains(s))
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a token cannot make a token with scopes it lacks",
        ));
    }
    let token = create_token(
        &state.db,
        &caller.user.id,
        request.name.trim(),
        &request.scopes,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// `GET /api/tokens`: the caller's tokens (without their secrets). With a token, one that has
/// the `manage` scope: the others do not see their siblings.
#[utoipa::path(get, path = "/tokens", tag = "accounts", security(("session" = []), ("token" = ["manage"])), responses((status = 200, body = Vec<ApiToken>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<ApiToken>>> {
    caller.require_scope(Scope::Manage)?;
    let rows: Vec<(String, String, String, String, Option<String>)> =
        with_pool!(&state.db, |pool| sqlx::query_as(
            "SELECT id, name, scopes, created_at, revoked_at FROM api_tokens WHERE user_id = $1 \
             ORDER BY created_at"
        )
        .bind(&caller.user.id)
        .fetch_all(pool)
        .await)?;
    rows.into_iter()
        .map(|(id, name, scopes, created_at, revoked_at)| {
            Ok(ApiToken {
                id,
                name,
                scopes: serde_json::from_str(&scopes).context("a token's scopes")?,
                token: None,
                created_at,
                revoked_at,
            })
        })
        .collect::<Result<_>>()
        .map(Json)
        .map_err(ApiError::internal)
}

/// `DELETE /api/tokens/{id}`: revokes one of the caller's tokens; it fails from the next
/// request on. With a token, one that has the `manage` scope.
#[utoipa::path(delete, path = "/tokens/{id}", tag = "accounts", params(("id" = String, Path)), security(("session" = []), ("token" = ["manage"])), responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    caller.require_scope(Scope::Manage)?;
    let changed = with_pool!(&state.db, |pool| sqlx::query(
        "UPDATE api_tokens SET revoked_at = $3 WHERE id = $1 AND user_id = $2 \
         AND revoked_at IS NULL"
    )
    .bind(&id)
    .bind(&caller.user.id)
    .bind(now())
    .execute(pool)
    .await
    .map(|r| r.rows_affected()))?;
    if changed == 0 {
        return Err(ApiError::not_found(format_args!(
            "live token {id} of yours"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fail(db: &Db, email: &str, address: &str) {
        with_pool!(db, |pool| sqlx::query(
            "INSERT INTO login_failures (email, at, address) VALUES ($1, $2, $3)"
        )
        .bind(email)
        .bind(now())
        .bind(address)
        .execute(pool)
        .await
        .map(drop))
        .unwrap();
    }

    #[tokio::test]
    async fn sign_in_is_throttled_per_email_and_per_address() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::connect(dir.path().join("db.sqlite").to_str().unwrap())
            .await
            .unwrap();
        for _ in 0..MAX_FAILED_LOGINS - 1 {
            fail(&db, "ada@lab.org", "10.0.0.1").await;
        }
        assert_eq!(
            throttled(&db, "ada@lab.org", "10.0.0.9", "").await.unwrap(),
            None
        );
        fail(&db, "ada@lab.org", "10.0.0.2").await;
        let (why, wait) = throttled(&db, "ada@lab.org", "10.0.0.9", "")
            .await
            .unwrap()
            .unwrap();
        assert!(why.contains("ada@lab.org") && (1..=THROTTLE_SECONDS).contains(&wait));

        // Spraying: one address trying many emails, each only once.
        for i in 0..MAX_FAILED_LOGINS_PER_ADDRESS - MAX_FAILED_LOGINS {
            fail(&db, &format!("user{i}@lab.org"), "10.0.0.1").await;
        }
        assert_eq!(
            throttled(&db, "bob@lab.org", "10.0.0.1", "").await.unwrap(),
            None
        );
        fail(&db, "cleo@lab.org", "10.0.0.1").await;
        let (why, _) = throttled(&db, "bob@lab.org", "10.0.0.1", "")
            .await
            .unwrap()
            .unwrap();
        assert!(why.contains("your address"), "{why}");
        // Other addresses are not affected.
        assert_eq!(
            throttled(&db, "bob@lab.org", "10.0.0.3", "").await.unwrap(),
            None
        );
    }
}
