//! Review queues. Items are handed out by leases: an item is offered to at most `overlap`
//! different people at once (live leases plus verdicts), nobody gets an item twice, and a lease
//! that runs out returns the item. The hand-out is one conditional update in a transaction
//! (`FOR UPDATE SKIP LOCKED` on Postgres, an immediate transaction on SQLite), so several
//! server processes can share one queue.
//!
//! A verdict is recorded once per lease (a retried request with the same `request_id` gets the
//! same answer); a save through a lease that has run out or was decided gets 409. When an item
//! has `overlap` verdicts, their majority becomes its outcome, which a reviewer can confirm or
//! overturn (the second pass, guarded by the item's version). An accept of an edit that the
//! classifier says does not flip needs a reviewer's override, which is recorded.

use anyhow::Context;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use flipside_shared::api::ApiError as ErrorBody;
use flipside_shared::portal::{
    Decision, Draft, HistoryEntry, Lease, Outcome, PastVerdict, Queue, QueueRequest, ReviewItem,
    ReviewRequest, ReviewTask, Role, Sibling, Verdict, VerdictRequest,
};
use flipside_shared::records::{CoreProvenance, Counterfactual, Provenance};
use serde::Deserialize;

use super::auth::{Access, Caller, DECIDE, MANAGE, READ, REVIEW, REVIEW_READ};
use super::items::{StoredItem, insert_items, job_records};
use super::{hash_secret, new_id};
use crate::review::majority;
use crate::server::AppState;
use crate::server::db::{Db, now, now_plus, with_pool};
use crate::server::error::{ApiError, ApiResult, JsonBody, QueryParams};
use crate::server::priority::blocking;
use crate::server::resources::check_text;

/// The most people one item may need.
const MAX_OVERLAP: usize = 10;
/// Other counterfactuals of the same original shown with an item, at most.
const MAX_SIBLINGS: i64 = 20;

const ITEM_COLUMNS: &str = "id, seq, version, original, label, counterfactual, target, method, \
                            flipped, target_probability, record, outcome";
type ItemRow = (
    String,
    i64,
    i64,
    String,
    String,
    Option<String>,
    String,
    String,
    Option<i64>,
    Option<f64>,
    Option<String>,
    Option<String>,
);

const AUDIT_INSERT: &str = "INSERT INTO audit_log (id, team_id, queue_id, item_id, user_id, \
                            action, detail, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Appends to the audit log (outside a transaction: team events such as invitations).
pub async fn audit(
    db: &Db,
    team: &str,
    queue: Option<&str>,
    user: Option<&str>,
    action: &str,
    detail: serde_json::Value,
) -> anyhow::Result<()> {
    with_pool!(db, |pool| sqlx::query(AUDIT_INSERT)
        .bind(new_id("aud"))
        .bind(team)
        .bind(queue)
        .bind(None::<String>)
        .bind(user)
        .bind(action)
        .bind(detail.to_string())
        .bind(now())
        .execute(pool)
        .await
        .map(drop))?;
    Ok(())
}

/// A queue's settings, as stored.
#[derive(Debug, Clone)]
pub struct QueueRow {
    pub id: String,
    pub team: String,
    pub name: String,
    pub overlap: usize,
    pub lease_seconds: u64,
    pub created_at: String,
}

/// The queue `queue` of `team`, after checking the caller's role there: 404 for another
/// team's queue.
pub async fn queue_for(
    db: &Db,
    caller: &Caller,
    team: &str,
    queue: &str,
    access: Access,
) -> ApiResult<(QueueRow, Role)> {
    let caller_role = caller.require(db, team, access).await?;
    let row: Option<(String, String, i64, i64, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT id, name, overlap, lease_seconds, created_at FROM queues \
         WHERE id = $1 AND team_id = $2"
    )
    .bind(queue)
    .bind(team)
    .fetch_optional(pool)
    .await)?;
    let (id, name, overlap, lease_seconds, created_at) =
        row.ok_or_else(|| ApiError::not_found(format_args!("queue {queue}")))?;
    Ok((
        QueueRow {
            id,
            team: team.to_string(),
            name,
            overlap: overlap.max(1) as usize,
            lease_seconds: lease_seconds.max(1) as u64,
            created_at,
        },
        caller_role,
    ))
}

/// Begins a write transaction: immediate on SQLite (so that concurrent writers wait for the
/// lock instead of failing to upgrade), and what rows to lock for a hand-out on Postgres.
pub(super) fn dialect(db: &Db) -> (&'static str, &'static str) {
    match db {
        Db::Sqlite(_) => ("BEGIN IMMEDIATE", ""),
        Db::Postgres(_) => ("BEGIN", " FOR UPDATE SKIP LOCKED"),
    }
}

fn item_from_row(row: ItemRow) -> anyhow::Result<ReviewItem> {
    let (id, seq, version, original, label, counterfactual, target, method) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7);
    let record: Option<Counterfactual> = row
        .10
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context("an item's record")?;
    Ok(ReviewItem {
        id,
        seq: seq.max(0) as usize,
        version,
        original,
        label,
        counterfactual,
        target,
        method,
        flipped: row.8.map(|f| f == 1),
        target_probability: row.9.map(|p| p as f32),
        provenance: record.map(|r| r.provenance),
        siblings: Vec::new(),
        outcome: row
            .11
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .context("an item's outcome")?,
    })
}

/// An item of `queue` with its siblings (the other counterfactuals of its original).
async fn load_item(db: &Db, queue: &str, item: &str) -> ApiResult<ReviewItem> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {ITEM_COLUMNS} FROM items WHERE id = $1 AND queue_id = $2"
    ));
    let row: Option<ItemRow> = with_pool!(db, |pool| sqlx::query_as(sql)
        .bind(item)
        .bind(queue)
        .fetch_optional(pool)
        .await)?;
    let mut item = item_from_row(row.ok_or_else(|| ApiError::not_found("such item"))?)?;
    let siblings: Vec<(String, Option<String>, String, Option<String>)> =
        with_pool!(db, |pool| sqlx::query_as(
            "SELECT id, counterfactual, target, outcome FROM items WHERE queue_id = $1 \
             AND original_hash = $2 AND id <> $3 ORDER BY seq LIMIT $4"
        )
        .bind(queue)
        .bind(hash_secret(&item.original))
        .bind(&item.id)
        .bind(MAX_SIBLINGS)
        .fetch_all(pool)
        .await)?;
    item.siblings = siblings
        .into_iter()
        .map(|(id, counterfactual, target, outcome)| Sibling {
            id,
            counterfactual,
            target,
            outcome: outcome
                .as_deref()
                .and_then(|o| serde_json::from_str::<Outcome>(o).ok())
                .map(|o| o.verdict),
        })
        .collect();
    Ok(item)
}

/// `POST /api/teams/{team}/queues` (admins): a queue, filled with a job's counterfactuals when
/// `job` is given.
#[utoipa::path(post, path = "/teams/{team}/queues", tag = "review", params(("team" = String, Path)), request_body = QueueRequest, security(("session" = []), ("token" = ["manage"])), responses((status = 201, body = Queue), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
    JsonBody(request): JsonBody<QueueRequest>,
) -> ApiResult<(StatusCode, Json<Queue>)> {
    caller.require(&state.db, &team, MANAGE).await?;
    let name = request.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::bad_request("name: 1 to 200 characters"));
    }
    if !(1..=MAX_OVERLAP).contains(&request.overlap) {
        return Err(ApiError::bad_request(format!(
            "overlap: 1 to {MAX_OVERLAP} people per item"
        )));
    }
    if !(5..=7 * 24 * 3600).contains(&request.lease_seconds) {
        return Err(ApiError::bad_request("lease_seconds: 5 s to a week"));
    }
    let records = match &request.job {
        Some(job) => {
            if state.db.team_job(&team, job).await?.is_none() {
                return Err(ApiError::not_found(format_args!("job {job}")));
            }
            job_records(&state.db, job).await?
        }
        None => Vec::new(),
    };
    let queue = insert_queue(&state.db, &team, &request, name).await?;
    let items = records.into_iter().map(StoredItem::from_record).collect();
    let added = insert_items(&state.db, &queue.id, items).await?;
    audit(
        &state.db,
        &team,
        Some(&queue.id),
        Some(&caller.user.id),
        "create queue",
        serde_json::json!({"name": queue.name, "overlap": queue.overlap, "job": request.job,
                           "items": added}),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(queue_info(queue, added))))
}

/// Stores a new, empty queue of `team` (settings already checked).
pub async fn insert_queue(
    db: &Db,
    team: &str,
    request: &QueueRequest,
    name: &str,
) -> anyhow::Result<QueueRow> {
    let queue = QueueRow {
        id: new_id("q"),
        team: team.to_string(),
        name: name.to_string(),
        overlap: request.overlap,
        lease_seconds: request.lease_seconds,
        created_at: now(),
    };
    with_pool!(db, |pool| sqlx::query(
        "INSERT INTO queues (id, team_id, name, overlap, lease_seconds, job_id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(&queue.id)
    .bind(team)
    .bind(&queue.name)
    .bind(queue.overlap as i64)
    .bind(queue.lease_seconds as i64)
    .bind(&request.job)
    .bind(&queue.created_at)
    .execute(pool)
    .await
    .map(drop))?;
    Ok(queue)
}

pub(super) fn queue_info(queue: QueueRow, items: usize) -> Queue {
    Queue {
        id: queue.id,
        team: queue.team,
        name: queue.name,
        overlap: queue.overlap,
        lease_seconds: queue.lease_seconds,
        items,
        created_at: queue.created_at,
    }
}

/// `GET /api/teams/{team}/queues`.
#[utoipa::path(get, path = "/teams/{team}/queues", tag = "review", params(("team" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Vec<Queue>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
) -> ApiResult<Json<Vec<Queue>>> {
    caller.require(&state.db, &team, READ).await?;
    let rows: Vec<(String, String, i64, i64, String, i64)> =
        with_pool!(&state.db, |pool| sqlx::query_as(
            "SELECT q.id, q.name, q.overlap, q.lease_seconds, q.created_at, \
             (SELECT COUNT(*) FROM items i WHERE i.queue_id = q.id) FROM queues q \
             WHERE q.team_id = $1 ORDER BY q.created_at DESC"
        )
        .bind(&team)
        .fetch_all(pool)
        .await)?;
    Ok(Json(
        rows.into_iter()
            .map(|(id, name, overlap, lease, created_at, items)| Queue {
                id,
                team: team.clone(),
                name,
                overlap: overlap as usize,
                lease_seconds: lease as u64,
                items: items as usize,
                created_at,
            })
            .collect(),
    ))
}

/// `GET /api/teams/{team}/queues/{queue}`.
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Queue), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
) -> ApiResult<Json<Queue>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, READ).await?;
    let items: i64 = with_pool!(&state.db, |pool| sqlx::query_scalar(
        "SELECT COUNT(*) FROM items WHERE queue_id = $1"
    )
    .bind(&queue.id)
    .fetch_one(pool)
    .await)?;
    Ok(Json(queue_info(queue, items as usize)))
}

/// `POST …/next`: the caller's next item, leased to them. Their live lease when they hold one
/// (a reload gets the same item); `null` when nothing is left for them.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/next", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), security(("session" = []), ("token" = ["review"])), responses((status = 200, body = Option<Lease>, description = "null when nothing is left for the caller"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn next(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
) -> ApiResult<Json<Option<Lease>>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, DECIDE).await?;
    let lease = lease_next(&state.db, &queue, &caller.user.id).await?;
    Ok(Json(match lease {
        Some(held) => Some(
            held.view(&state.db, &queue.id, &caller.user.id, None)
                .await?,
        ),
        None => None,
    }))
}

/// A lease as handed out: its id, item and end.
pub struct Held {
    pub lease: String,
    pub item: String,
    pub expires_at: String,
}

impl Held {
    /// The lease as the client sees it: the item with its siblings, and the person's draft.
    pub async fn view(
        &self,
        db: &Db,
        queue: &str,
        user: &str,
        previous: Option<Verdict>,
    ) -> ApiResult<Lease> {
        lease_view(
            db,
            queue,
            &self.lease,
            &self.item,
            user,
            &self.expires_at,
            previous,
        )
        .await
    }
}

/// Leases `user`'s next item of `queue` in one transaction, first returning the items of leases
/// that ran out: the lease they hold, or the first item with room for another person that they
/// have not had. `None` when nothing is left for them.
pub async fn lease_next(db: &Db, queue: &QueueRow, user: &str) -> ApiResult<Option<Held>> {
    let (begin, lock) = dialect(db);
    let now = now();
    let expires = now_plus(queue.lease_seconds as i64);
    let claim = sqlx::AssertSqlSafe(format!(
        "UPDATE items SET claims = claims + 1, \
         is_full = CASE WHEN claims + 1 >= $3 THEN 1 ELSE 0 END \
         WHERE id = (SELECT i.id FROM items i WHERE i.queue_id = $1 AND i.is_full = 0 \
         AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.item_id = i.id AND a.user_id = $2) \
         ORDER BY i.seq LIMIT 1{lock}) RETURNING id"
    ));
    let lease: Option<(String, String)> = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        // Leases that ran out give their items back.
        let expired: Vec<String> = sqlx::query_scalar(
            "DELETE FROM assignments WHERE queue_id = $1 AND state = 'leased' \
             AND expires_at <= $2 RETURNING item_id",
        )
        .bind(&queue.id)
        .bind(&now)
        .fetch_all(&mut *tx)
        .await?;
        for item in &expired {
            sqlx::query("UPDATE items SET claims = claims - 1, is_full = 0 WHERE id = $1")
                .bind(item)
                .execute(&mut *tx)
                .await?;
        }
        let held: Option<(String, String)> = sqlx::query_as(
            "SELECT id, item_id FROM assignments WHERE queue_id = $1 AND user_id = $2 \
             AND state = 'leased' ORDER BY created_at LIMIT 1",
        )
        .bind(&queue.id)
        .bind(user)
        .fetch_optional(&mut *tx)
        .await?;
        let lease = match held {
            Some((lease, item)) => {
                sqlx::query("UPDATE assignments SET expires_at = $2 WHERE id = $1")
                    .bind(&lease)
                    .bind(&expires)
                    .execute(&mut *tx)
                    .await?;
                Some((lease, item))
            }
            None => {
                let claimed: Option<String> = sqlx::query_scalar(claim)
                    .bind(&queue.id)
                    .bind(user)
                    .bind(queue.overlap as i64)
                    .fetch_optional(&mut *tx)
                    .await?;
                match claimed {
                    Some(item) => {
                        let lease = new_id("lease");
                        sqlx::query(
                            "INSERT INTO assignments (id, queue_id, item_id, user_id, state, \
                             expires_at, created_at) VALUES ($1, $2, $3, $4, 'leased', $5, $6)",
                        )
                        .bind(&lease)
                        .bind(&queue.id)
                        .bind(&item)
                        .bind(user)
                        .bind(&expires)
                        .bind(&now)
                        .execute(&mut *tx)
                        .await?;
                        Some((lease, item))
                    }
                    None => None,
                }
            }
        };
        tx.commit().await?;
        Ok::<_, sqlx::Error>(lease)
    }
    .await)?;
    Ok(lease.map(|(lease, item)| Held {
        lease,
        item,
        expires_at: expires,
    }))
}

async fn lease_view(
    db: &Db,
    queue: &str,
    lease: &str,
    item: &str,
    user: &str,
    expires_at: &str,
    previous: Option<Verdict>,
) -> ApiResult<Lease> {
    let draft: Option<String> = with_pool!(db, |pool| sqlx::query_scalar(
        "SELECT text FROM drafts WHERE item_id = $1 AND user_id = $2"
    )
    .bind(item)
    .bind(user)
    .fetch_optional(pool)
    .await)?;
    Ok(Lease {
        id: lease.to_string(),
        expires_at: expires_at.to_string(),
        item: load_item(db, queue, item).await?,
        draft,
        previous,
    })
}

/// The classifier's probability of `target` for `text`, and whether it is the top label; `None`
/// when the classifier does not know the label.
async fn judge(state: &AppState, text: &str, target: &str) -> ApiResult<Option<(f32, bool)>> {
    let resources = state.resources()?;
    let Some(index) = resources
        .classifier_info
        .labels
        .iter()
        .position(|l| l == target)
    else {
        return Ok(None);
    };
    let texts = vec![text.to_string()];
    let probabilities = blocking(move || resources.probabilities(&texts)).await?;
    let row = &probabilities[0];
    let top = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i);
    Ok(Some((row[index], top == Some(index))))
}

/// What a verdict keeps of the item (the text and label it goes into training data with), after
/// checking the verdict is complete and, for an accept, that the classifier agrees or the
/// caller may override it.
pub struct Checked {
    text: Option<String>,
    label: Option<String>,
    /// The classifier's probability of the target for a new text, and whether it flips.
    score: Option<(f32, bool)>,
}

impl Checked {
    /// A verdict that keeps the item's own text and label (accept, reject, flag, skip) of an
    /// item the classifier flips or did not score.
    pub fn as_is() -> Checked {
        Checked {
            text: None,
            label: None,
            score: None,
        }
    }
}

async fn check_verdict(
    state: &AppState,
    item: &ReviewItem,
    decision: &Decision,
    role: Role,
) -> ApiResult<Checked> {
    let verdict = decision.verdict;
    let override_classifier = decision.override_classifier;
    let label = decision.label.as_deref();
    let text = decision.text.as_deref();
    if override_classifier && role < Role::Reviewer {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only reviewers and admins can override the classifier",
        ));
    }
    let text = text.map(str::trim).filter(|t| !t.is_empty());
    let written = match verdict {
        Verdict::Fix => Some(text.ok_or_else(|| ApiError::bad_request("fix: give the text"))?),
        Verdict::Accept if item.counterfactual.is_none() => {
            Some(text.ok_or_else(|| ApiError::bad_request("write the counterfactual first"))?)
        }
        _ => None,
    };
    let label = match verdict {
        Verdict::Relabel => Some(
            label
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| ApiError::bad_request("relabel: give the label"))?
                .to_string(),
        ),
        _ => None,
    };
    if let Some(label) = &label {
        state
            .resources()?
            .check_label("label", label)
            .map_err(ApiError::bad_request)?;
    }
    if let Some(text) = written {
        check_text(text)?;
    }
    let score = match written {
        Some(text) => judge(state, text, &item.target).await?,
        None => None,
    };
    if matches!(verdict, Verdict::Accept | Verdict::Fix) && !override_classifier {
        let flips = match written {
            Some(_) => score.map(|(_, top)| top),
            None => item.flipped,
        };
        if flips == Some(false) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "needs_override",
                "the classifier says this edit does not flip the label: a reviewer can accept \
                 it with an override, or flag it",
            ));
        }
    }
    Ok(Checked {
        text: written.map(str::to_string),
        label,
        score,
    })
}

/// Recomputes an item's outcome from its live first-pass verdicts, inside a transaction, and
/// bumps its version. The item's row is locked first: on Postgres two verdicts on one item
/// committing at once would otherwise each miss the other's and leave the item undecided.
macro_rules! settle_item {
    ($tx:expr, $item:expr, $overlap:expr, $target:expr) => {{
        sqlx::query("UPDATE items SET version = version + 1 WHERE id = $1")
            .bind($item)
            .execute(&mut *$tx)
            .await?;
        let verdicts: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT verdict, text, label FROM verdicts WHERE item_id = $1 AND pass = 1 \
             AND undone_at IS NULL ORDER BY created_at, id",
        )
        .bind($item)
        .fetch_all(&mut *$tx)
        .await?;
        let outcome = majority(&verdicts, $overlap, $target);
        sqlx::query("UPDATE items SET outcome = $2, stage = $3 WHERE id = $1")
            .bind($item)
            .bind(outcome.as_ref().map(|o| serde_json::json!(o).to_string()))
            .bind(i64::from(outcome.is_some()))
            .execute(&mut *$tx)
            .await?;
    }};
}

/// Records a verdict (pass 1, through a lease) or a review (pass 2) inside a transaction.
macro_rules! insert_verdict {
    ($tx:expr, $lease:expr, $queue:expr, $item:expr, $user:expr, $pass:expr, $request_id:expr,
     $decision:expr, $checked:expr) => {
        sqlx::query(
            "INSERT INTO verdicts (id, assignment_id, queue_id, item_id, user_id, pass, \
             request_id, verdict, text, label, override_classifier, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(new_id("v"))
        .bind($lease)
        .bind($queue)
        .bind($item)
        .bind($user)
        .bind($pass as i64)
        .bind($request_id)
        .bind($decision.verdict.as_str())
        .bind(&$checked.text)
        .bind(&$checked.label)
        .bind(i64::from($decision.override_classifier))
        .bind(now())
        .execute(&mut *$tx)
        .await?
    };
}

/// Appends to the audit log inside a transaction.
macro_rules! audit_in {
    ($tx:expr, $team:expr, $queue:expr, $item:expr, $user:expr, $action:expr, $detail:expr) => {
        sqlx::query(AUDIT_INSERT)
            .bind(new_id("aud"))
            .bind($team)
            .bind($queue)
            .bind($item)
            .bind($user)
            .bind($action)
            .bind($detail.to_string())
            .bind(now())
            .execute(&mut *$tx)
            .await?
    };
}

/// Why a verdict was not recorded.
enum Refusal {
    /// The lease ran out and the item went back, or it is not the caller's.
    LeaseGone,
    AlreadyDecided,
    Database(sqlx::Error),
}

impl From<sqlx::Error> for Refusal {
    fn from(e: sqlx::Error) -> Self {
        Refusal::Database(e)
    }
}

/// `POST …/verdicts`: decides the item of one of the caller's leases. The same `request_id`
/// again answers as the first time and records nothing more.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/verdicts", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), request_body = VerdictRequest, security(("session" = []), ("token" = ["review"])), responses((status = 200, body = ReviewItem), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "The lease was lost")))]
pub async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
    JsonBody(request): JsonBody<VerdictRequest>,
) -> ApiResult<Json<ReviewItem>> {
    let (queue, role) = queue_for(&state.db, &caller, &team, &queue, DECIDE).await?;
    let db = &state.db;
    let user = caller.user.id.as_str();
    if request.request_id.is_empty() || request.request_id.len() > 100 {
        return Err(ApiError::bad_request("request_id: 1 to 100 characters"));
    }
    let lease: Option<(String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT item_id, user_id FROM assignments WHERE id = $1 AND queue_id = $2"
    )
    .bind(&request.lease)
    .bind(&queue.id)
    .fetch_optional(pool)
    .await)?;
    let replayed: Option<String> = with_pool!(db, |pool| sqlx::query_scalar(
        "SELECT item_id FROM verdicts WHERE user_id = $1 AND request_id = $2 AND queue_id = $3"
    )
    .bind(user)
    .bind(&request.request_id)
    .bind(&queue.id)
    .fetch_optional(pool)
    .await)?;
    if let Some(item) = replayed {
        return Ok(Json(load_item(db, &queue.id, &item).await?));
    }
    let item_id = match lease {
        Some((item, owner)) if owner == user => item,
        _ => return Err(lease_gone()),
    };
    let item = load_item(db, &queue.id, &item_id).await?;
    let checked = check_verdict(&state, &item, &request.decision, role).await?;
    record_verdict(db, &queue, user, &item, &request, &checked).await?;
    Ok(Json(load_item(db, &queue.id, &item.id).await?))
}

/// Records a first-pass verdict through `request.lease` in one transaction (the lease is
/// marked decided, the item's outcome settled, the draft dropped, the audit log appended):
/// 409 when the lease ran out or was decided already.
pub async fn record_verdict(
    db: &Db,
    queue: &QueueRow,
    user: &str,
    item: &ReviewItem,
    request: &VerdictRequest,
    checked: &Checked,
) -> ApiResult<()> {
    let team = &queue.team;
    let item_id = &item.id;
    let (begin, _) = dialect(db);
    let state_after = if request.decision.verdict == Verdict::Skip {
        "skipped"
    } else {
        "done"
    };
    let detail = serde_json::json!({
        "verdict": request.decision.verdict, "text": checked.text, "label": checked.label,
        "override_classifier": request.decision.override_classifier,
        "excerpts": request.excerpts,
    });
    let outcome: Result<(), Refusal> = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        let taken = sqlx::query(
            "UPDATE assignments SET state = $2 WHERE id = $1 AND user_id = $3 AND state = 'leased'",
        )
        .bind(&request.lease)
        .bind(state_after)
        .bind(user)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if taken == 0 {
            let exists: Option<String> =
                sqlx::query_scalar("SELECT state FROM assignments WHERE id = $1")
                    .bind(&request.lease)
                    .fetch_optional(&mut *tx)
                    .await?;
            return Err(match exists {
                Some(_) => Refusal::AlreadyDecided,
                None => Refusal::LeaseGone,
            });
        }
        insert_verdict!(
            tx,
            Some(&request.lease),
            &queue.id,
            item_id,
            user,
            1,
            &request.request_id,
            &request.decision,
            checked
        );
        if request.decision.verdict == Verdict::Skip {
            sqlx::query("UPDATE items SET claims = claims - 1, is_full = 0 WHERE id = $1")
                .bind(item_id)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(record) = written_record(item, request, checked) {
            // A counterfactual written for an original: the item now has it.
            sqlx::query(
                "UPDATE items SET counterfactual = $2, method = 'human', record = $3, \
                 flipped = $4, target_probability = $5 WHERE id = $1",
            )
            .bind(item_id)
            .bind(&record.edited)
            .bind(serde_json::json!(record).to_string())
            .bind(checked.score.map(|(_, flips)| i64::from(flips)))
            .bind(checked.score.map(|(p, _)| f64::from(p)))
            .execute(&mut *tx)
            .await?;
        }
        settle_item!(tx, item_id, queue.overlap, &item.target);
        sqlx::query("DELETE FROM drafts WHERE item_id = $1 AND user_id = $2")
            .bind(item_id)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        audit_in!(tx, &team, &queue.id, item_id, user, "verdict", detail);
        tx.commit().await?;
        Ok(())
    }
    .await);
    match outcome {
        Ok(()) => {}
        Err(Refusal::LeaseGone) => return Err(lease_gone()),
        Err(Refusal::AlreadyDecided) => {
            return Err(ApiError::conflict(
                "you have decided this item already: undo it to change your verdict",
            ));
        }
        // The same request_id racing itself: the other one recorded the verdict.
        Err(Refusal::Database(sqlx::Error::Database(e))) if e.is_unique_violation() => {}
        Err(Refusal::Database(e)) => return Err(e.into()),
    }
    Ok(())
}

/// The record of a counterfactual written for an original (an item that had none), with the
/// retrieved excerpts the author drew on as its provenance.
fn written_record(
    item: &ReviewItem,
    request: &VerdictRequest,
    checked: &Checked,
) -> Option<Counterfactual> {
    let text = checked.text.as_ref()?;
    if item.counterfactual.is_some() || request.decision.verdict != Verdict::Accept {
        return None;
    }
    let (probability, flipped) = checked.score.unwrap_or((0.0, false));
    Some(Counterfactual {
        key: format!("{}→{}", item.id, item.target),
        item: item.id.clone(),
        method: "human".into(),
        premise: None,
        original: item.original.clone(),
        edited: text.clone(),
        label: item.label.clone(),
        target: item.target.clone(),
        model: None,
        seed: 0,
        attempt: 1,
        timing: Default::default(),
        prediction: if flipped {
            item.target.clone()
        } else {
            item.label.clone()
        },
        target_probability: probability,
        flipped,
        provenance: Provenance::Core(CoreProvenance {
            retrieved: request.excerpts.clone(),
            ..Default::default()
        }),
        chosen: None,
    })
}

fn lease_gone() -> ApiError {
    ApiError::conflict(
        "your lease on this item ran out and it went back to the queue: nothing was saved",
    )
}

/// `POST …/undo`: takes back the caller's latest verdict in the queue (while no reviewer has
/// confirmed the item) and leases the item to them again.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/undo", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), security(("session" = []), ("token" = ["review"])), responses((status = 200, body = Lease), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn undo(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
) -> ApiResult<Json<Lease>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, DECIDE).await?;
    let db = &state.db;
    let user = caller.user.id.as_str();
    let (begin, _) = dialect(db);
    let expires = now_plus(queue.lease_seconds as i64);
    let undone: Result<Option<(String, String, String)>, Refusal> = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        let last: Option<(String, String, String, String, String, i64)> = sqlx::query_as(
            "SELECT v.id, v.assignment_id, v.item_id, v.verdict, i.target, i.stage \
             FROM verdicts v JOIN items i ON i.id = v.item_id WHERE v.queue_id = $1 \
             AND v.user_id = $2 AND v.pass = 1 AND v.undone_at IS NULL \
             ORDER BY v.created_at DESC, v.id DESC LIMIT 1",
        )
        .bind(&queue.id)
        .bind(user)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((verdict_id, lease, item, verdict, target, stage)) = last else {
            return Ok(None);
        };
        if stage >= 2 {
            return Err(Refusal::AlreadyDecided);
        }
        if verdict == Verdict::Skip.as_str() {
            // The slot was given back: take it again, if nobody else has.
            let retaken = sqlx::query(
                "UPDATE items SET claims = claims + 1, \
                 is_full = CASE WHEN claims + 1 >= $2 THEN 1 ELSE 0 END \
                 WHERE id = $1 AND claims < $2",
            )
            .bind(&item)
            .bind(queue.overlap as i64)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if retaken == 0 {
                return Err(Refusal::LeaseGone);
            }
        }
        sqlx::query("UPDATE verdicts SET undone_at = $2 WHERE id = $1")
            .bind(&verdict_id)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE assignments SET state = 'leased', expires_at = $2 WHERE id = $1")
            .bind(&lease)
            .bind(&expires)
            .execute(&mut *tx)
            .await?;
        settle_item!(tx, &item, queue.overlap, &target);
        audit_in!(
            tx,
            &team,
            &queue.id,
            &item,
            user,
            "undo",
            serde_json::json!({"verdict": verdict})
        );
        tx.commit().await?;
        Ok(Some((lease, item, verdict)))
    }
    .await);
    match undone {
        Ok(Some((lease, item, verdict))) => Ok(Json(
            lease_view(
                db,
                &queue.id,
                &lease,
                &item,
                user,
                &expires,
                Verdict::parse(&verdict),
            )
            .await?,
        )),
        Ok(None) => Err(ApiError::not_found(
            "verdict of yours to undo in this queue",
        )),
        Err(Refusal::AlreadyDecided) => Err(ApiError::conflict(
            "a reviewer has already confirmed or overturned that item",
        )),
        Err(Refusal::LeaseGone) => Err(ApiError::conflict(
            "someone else has taken the item you skipped",
        )),
        Err(Refusal::Database(e)) => Err(e.into()),
    }
}

/// `PUT …/leases/{lease}/draft`: keeps what the caller is writing for a leased item, so that a
/// closed tab loses nothing.
#[utoipa::path(put, path = "/teams/{team}/queues/{queue}/leases/{lease}/draft", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("lease" = String, Path)), request_body = Draft, security(("session" = []), ("token" = ["review"])), responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn save_draft(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue, lease)): Path<(String, String, String)>,
    JsonBody(draft): JsonBody<Draft>,
) -> ApiResult<StatusCode> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, DECIDE).await?;
    if draft.text.chars().count() > 20_000 {
        return Err(ApiError::bad_request(
            "a draft holds at most 20,000 characters",
        ));
    }
    let item: Option<String> = with_pool!(&state.db, |pool| sqlx::query_scalar(
        "SELECT item_id FROM assignments WHERE id = $1 AND queue_id = $2 AND user_id = $3 \
         AND state = 'leased'"
    )
    .bind(&lease)
    .bind(&queue.id)
    .bind(&caller.user.id)
    .fetch_optional(pool)
    .await)?;
    let item = item.ok_or_else(lease_gone)?;
    with_pool!(&state.db, |pool| sqlx::query(
        "INSERT INTO drafts (item_id, user_id, text, updated_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (item_id, user_id) DO UPDATE SET text = excluded.text, \
         updated_at = excluded.updated_at"
    )
    .bind(&item)
    .bind(&caller.user.id)
    .bind(&draft.text)
    .bind(now())
    .execute(pool)
    .await
    .map(drop))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Where the second pass goes on from.
#[derive(Debug, Deserialize)]
pub struct ReviewCursor {
    /// The first item after this position.
    #[serde(default)]
    pub after: Option<i64>,
}

/// `GET …/review/next` (reviewers): the next decided item no reviewer has confirmed yet, with
/// the verdicts behind it; `null` when none is left.
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}/review/next", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("after" = Option<i64>, Query, description = "The first item after this position")), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Option<ReviewTask>, description = "null when none is left"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn next_to_review(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
    QueryParams(cursor): QueryParams<ReviewCursor>,
) -> ApiResult<Json<Option<ReviewTask>>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, REVIEW_READ).await?;
    let item: Option<String> = with_pool!(&state.db, |pool| {
        sqlx::query_scalar(
        "SELECT id FROM items WHERE queue_id = $1 AND stage = 1 AND seq > $2 ORDER BY seq LIMIT 1"
    )
    .bind(&queue.id)
    .bind(cursor.after.unwrap_or(-1))
    .fetch_optional(pool)
    .await
    })?;
    let Some(item) = item else {
        return Ok(Json(None));
    };
    Ok(Json(Some(ReviewTask {
        item: load_item(&state.db, &queue.id, &item).await?,
        verdicts: past_verdicts(&state.db, &item).await?,
    })))
}

/// user name, verdict, text, label, override.
type VerdictRow = (String, String, Option<String>, Option<String>, i64);

async fn past_verdicts(db: &Db, item: &str) -> ApiResult<Vec<PastVerdict>> {
    let rows: Vec<VerdictRow> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT u.name, v.verdict, v.text, v.label, v.override_classifier FROM verdicts v \
             JOIN users u ON u.id = v.user_id WHERE v.item_id = $1 AND v.undone_at IS NULL \
             ORDER BY v.created_at, v.id"
    )
    .bind(item)
    .fetch_all(pool)
    .await)?;
    Ok(rows
        .into_iter()
        .filter_map(|(user, verdict, text, label, overridden)| {
            Some(PastVerdict {
                user,
                verdict: Verdict::parse(&verdict)?,
                text,
                label,
                override_classifier: overridden == 1,
            })
        })
        .collect())
}

/// `POST …/items/{item}/review` (reviewers): confirms (same verdict) or overturns an item's
/// outcome. `version` must be the item's current one: a save from a stale copy gets 409 and
/// changes nothing.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/items/{item}/review", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("item" = String, Path)), request_body = ReviewRequest, security(("session" = []), ("token" = ["review"])), responses((status = 200, body = ReviewItem), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "Stale: the item changed")))]
pub async fn review(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue, item_id)): Path<(String, String, String)>,
    JsonBody(request): JsonBody<ReviewRequest>,
) -> ApiResult<Json<ReviewItem>> {
    let (queue, role) = queue_for(&state.db, &caller, &team, &queue, REVIEW).await?;
    let db = &state.db;
    if request.decision.verdict == Verdict::Skip {
        return Err(ApiError::bad_request(
            "a review confirms or overturns: skip is not one",
        ));
    }
    let item = load_item(db, &queue.id, &item_id).await?;
    let checked = check_verdict(&state, &item, &request.decision, role).await?;
    let previous = item.outcome.as_ref().map(|o| o.verdict);
    let outcome = Outcome {
        verdict: request.decision.verdict,
        text: checked.text.clone().or_else(|| {
            (request.decision.verdict == previous.unwrap_or(Verdict::Flag))
                .then(|| item.outcome.as_ref().and_then(|o| o.text.clone()))
                .flatten()
        }),
        label: checked.label.clone().unwrap_or_else(|| item.target.clone()),
        reviewed: true,
    };
    let action = if previous == Some(request.decision.verdict) {
        "confirm"
    } else {
        "overturn"
    };
    let user = caller.user.id.as_str();
    let (begin, _) = dialect(db);
    let detail = serde_json::json!({"verdict": request.decision.verdict, "previous": previous,
        "text": checked.text, "label": checked.label,
        "override_classifier": request.decision.override_classifier});
    let saved: bool = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        let changed = sqlx::query(
            "UPDATE items SET outcome = $4, stage = 2, version = version + 1 \
             WHERE id = $1 AND queue_id = $2 AND version = $3 AND stage >= 1",
        )
        .bind(&item_id)
        .bind(&queue.id)
        .bind(request.version)
        .bind(serde_json::json!(outcome).to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok::<_, sqlx::Error>(false);
        }
        insert_verdict!(
            tx,
            None::<&str>,
            &queue.id,
            &item_id,
            user,
            2,
            &new_id("review"),
            &request.decision,
            &checked
        );
        audit_in!(tx, &team, &queue.id, &item_id, user, action, detail);
        tx.commit().await?;
        Ok(true)
    }
    .await)?;
    if !saved {
        return Err(ApiError::conflict(
            "the item changed since you loaded it (or is not decided yet): reload it; nothing \
             was saved",
        ));
    }
    Ok(Json(load_item(db, &queue.id, &item_id).await?))
}

/// `GET …/items/{item}`: one item with its siblings.
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}/items/{item}", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("item" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = ReviewItem), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn item(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue, item)): Path<(String, String, String)>,
) -> ApiResult<Json<ReviewItem>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, READ).await?;
    Ok(Json(load_item(&state.db, &queue.id, &item).await?))
}

/// `GET …/items/{item}/history`: the item's audit log, oldest first.
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}/items/{item}/history", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("item" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = Vec<HistoryEntry>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue, item)): Path<(String, String, String)>,
) -> ApiResult<Json<Vec<HistoryEntry>>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, READ).await?;
    // An unknown item is a 404, as for its siblings.
    load_item(&state.db, &queue.id, &item).await?;
    let rows: Vec<(String, Option<String>, String, String)> =
        with_pool!(&state.db, |pool| sqlx::query_as(
            "SELECT a.at, u.name, a.action, a.detail FROM audit_log a \
             LEFT JOIN users u ON u.id = a.user_id WHERE a.item_id = $1 AND a.queue_id = $2 \
             ORDER BY a.at, a.id"
        )
        .bind(&item)
        .bind(&queue.id)
        .fetch_all(pool)
        .await)?;
    Ok(Json(
        rows.into_iter()
            .map(|(at, user, action, detail)| HistoryEntry {
                at,
                user: user.unwrap_or_default(),
                action,
                detail: serde_json::from_str(&detail).unwrap_or_default(),
            })
            .collect(),
    ))
}
