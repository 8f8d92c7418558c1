//! Users, teams and memberships as stored, for the server's handlers and `flipside users`.
//! Passwords are hashed with argon2id (the argon2 crate's defaults: 19 MiB, 2 passes, OWASP's
//! recommendation), on blocking threads.

use std::sync::{Arc, LazyLock};

use anyhow::{Context, Result, bail};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, password_hash::rand_core::OsRng};
use flipside_shared::portal::{Role, TeamMembership, UserInfo};
use tokio::sync::Semaphore;

use super::new_id;
use super::queue::dialect;
use crate::server::db::{Db, now, with_pool};

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// How many argon2id hashes run at once: one per core. Each takes 19 MiB and about 40 ms of a
/// core, so they run on blocking threads, never on the async workers that answer requests.
static PASSWORD_WORK: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Arc::new(Semaphore::new(cores))
});

/// Runs argon2id work on a blocking thread once one of [`PASSWORD_WORK`]'s turns is free. The
/// thread holds the turn until the work is done, even if the request that asked for it is gone.
async fn password_work<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let turn = PASSWORD_WORK.clone().acquire_owned().await?;
    Ok(tokio::task::spawn_blocking(move || {
        let _turn = turn;
        work()
    })
    .await?)
}

/// The argon2id hash of `password`, in PHC string form (salt and parameters included).
pub async fn hash_password(password: &str) -> Result<String> {
    let password = password.to_string();
    password_work(move || argon2_hash(&password)).await?
}

fn argon2_hash(password: &str) -> Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))
}

/// Whether `password` matches `hash` (false for a malformed hash). Without a hash (an unknown
/// email) it checks against a decoy, so that an unknown email takes as long to refuse as a
/// wrong password.
pub async fn verify_password(hash: Option<String>, password: &str) -> Result<bool> {
    static DECOY: LazyLock<String> =
        LazyLock::new(|| argon2_hash("not anybody's password").unwrap_or_default());
    let password = password.to_string();
    password_work(move || {
        let hash = hash.as_deref().unwrap_or(DECOY.as_str());
        PasswordHash::new(hash).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    })
    .await
}

/// A password's problem, if it is too weak to accept.
pub fn password_problem(password: &str) -> Option<String> {
    (password.chars().count() < MIN_PASSWORD_CHARS)
        .then(|| format!("a password needs at least {MIN_PASSWORD_CHARS} characters"))
}

/// An email address as stored: trimmed and lower-case.
pub fn normalise_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    match email.split_once('@') {
        Some((user, domain)) if !user.is_empty() && !domain.is_empty() && email.len() <= 254 => {
            Ok(email)
        }
        _ => bail!("{email:?} is not an email address"),
    }
}

/// A user row: who, and their password hash.
pub struct StoredUser {
    pub info: UserInfo,
    pub password_hash: String,
}

/// Makes a user; fails when the email is taken or the password too short.
pub async fn create_user(db: &Db, email: &str, name: &str, password: &str) -> Result<UserInfo> {
    let email = normalise_email(email)?;
    if let Some(problem) = password_problem(password) {
        bail!(problem);
    }
    if user_by_email(db, &email).await?.is_some() {
        bail!("a user with the email {email} exists already");
    }
    let name = match name.trim() {
        "" => email.split('@').next().unwrap_or_default().to_string(),
        name => name.to_string(),
    };
    let user = UserInfo {
        id: new_id("usr"),
        email,
        name,
    };
    let hash = hash_password(password).await?;
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO users (id, email, name, password_hash, created_at) VALUES ($1, $2, $3, $4, $5)"
    )
    .bind(&user.id)
    .bind(&user.email)
    .bind(&user.name)
    .bind(&hash)
    .bind(now())
    .execute(pool)
    .await
    .map(drop))?;
    Ok(user)
}

/// What a password change ended: live sessions and tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub sessions: u64,
    pub tokens: u64,
}

/// Sets a user's password and, in the same transaction, ends every session of theirs and
/// revokes every token: whoever held the old password, or anything made with it, is out.
pub async fn set_password(db: &Db, user: &str, password: &str) -> Result<Ended> {
    if let Some(problem) = password_problem(password) {
        bail!(problem);
    }
    let hash = hash_password(password).await?;
    let (begin, _) = dialect(db);
    let ended = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        sqlx::query("UPDATE users SET password_hash = $2 WHERE id = $1")
            .bind(user)
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
        let sessions = sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND expires_at > $2")
            .bind(user)
            .bind(now())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM sessions WHERE user_id = $1")
            .bind(user)
            .execute(&mut *tx)
            .await?;
        let tokens = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL",
        )
        .bind(user)
        .bind(now())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok::<_, sqlx::Error>(Ended { sessions, tokens })
    }
    .await)?;
    Ok(ended)
}

type UserRow = (String, String, String, String);

pub async fn user_by_email(db: &Db, email: &str) -> Result<Option<StoredUser>> {
    let row: Option<UserRow> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT id, email, name, password_hash FROM users WHERE email = $1"
    )
    .bind(email.trim().to_lowercase())
    .fetch_optional(pool)
    .await)?;
    Ok(row.map(|(id, email, name, password_hash)| StoredUser {
        info: UserInfo { id, email, name },
        password_hash,
    }))
}

/// Every user, by email.
pub async fn users(db: &Db) -> Result<Vec<UserInfo>> {
    let rows: Vec<(String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT id, email, name FROM users ORDER BY email"
    )
    .fetch_all(pool)
    .await)?;
    Ok(rows
        .into_iter()
        .map(|(id, email, name)| UserInfo { id, email, name })
        .collect())
}

/// The id of the team named `name`, made when missing.
pub async fn ensure_team(db: &Db, name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.len() > 100 {
        bail!("a team name needs 1 to 100 characters");
    }
    let id = new_id("team");
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING"
    )
    .bind(&id)
    .bind(name)
    .bind(now())
    .execute(pool)
    .await
    .map(drop))?;
    with_pool!(db, |pool| sqlx::query_scalar(
        "SELECT id FROM teams WHERE name = $1"
    )
    .bind(name)
    .fetch_one(pool)
    .await)
    .context("reading the team back")
}

/// Gives `user` the `role` in `team` (replacing their role if they are a member).
pub async fn set_membership(db: &Db, team: &str, user: &str, role: Role) -> Result<()> {
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO memberships (team_id, user_id, role) VALUES ($1, $2, $3) \
         ON CONFLICT (team_id, user_id) DO UPDATE SET role = excluded.role"
    )
    .bind(team)
    .bind(user)
    .bind(role.as_str())
    .execute(pool)
    .await
    .map(drop))?;
    Ok(())
}

/// The teams `user` belongs to, by name.
pub async fn memberships(db: &Db, user: &str) -> Result<Vec<TeamMembership>> {
    let rows: Vec<(String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT t.id, t.name, m.role FROM memberships m JOIN teams t ON t.id = m.team_id \
         WHERE m.user_id = $1 ORDER BY t.name"
    )
    .bind(user)
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|(id, name, role)| {
            Ok(TeamMembership {
                id,
                name,
                role: Role::parse(&role).with_context(|| format!("unknown role {role:?}"))?,
            })
        })
        .collect()
}

/// `user`'s role in `team`, if a member.
pub async fn role_in(db: &Db, team: &str, user: &str) -> Result<Option<Role>> {
    let role: Option<String> = with_pool!(db, |pool| sqlx::query_scalar(
        "SELECT role FROM memberships WHERE team_id = $1 AND user_id = $2"
    )
    .bind(team)
    .bind(user)
    .fetch_optional(pool)
    .await)?;
    Ok(role.as_deref().and_then(Role::parse))
}
