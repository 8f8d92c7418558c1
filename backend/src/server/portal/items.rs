//! What a queue reviews: a job's counterfactuals, items sent as JSON, or an uploaded file —
//! JSON lines of `flipside generate` records or of `{original, label, target, counterfactual?}`,
//! or a CSV with those columns. An original without a counterfactual is one to write for.

use anyhow::Context;
use axum::Json;
use axum::extract::{Multipart, Path, State};
use flipside_shared::api::ApiError as ErrorBody;
use flipside_shared::portal::{NewItem, Queue};
use flipside_shared::records::Counterfactual;

use super::auth::{Caller, MANAGE};
use super::queue::{QueueRow, audit, dialect, queue_for, queue_info};
use super::{hash_secret, new_id};
use crate::server::AppState;
use crate::server::db::{Db, RecordFilter, with_pool};
use crate::server::error::{ApiError, ApiResult, JsonBody};
use crate::server::resources::check_text;

/// The most items one request may add.
pub const MAX_NEW_ITEMS: usize = 10_000;

/// Every record of a job, in the order they were made.
pub async fn job_records(db: &Db, job: &str) -> anyhow::Result<Vec<Counterfactual>> {
    let mut records = Vec::new();
    loop {
        let (page, total) = db
            .records(job, RecordFilter::All, records.len(), 1000)
            .await?;
        for json in &page {
            records.push(serde_json::from_str(json).context("a job record")?);
        }
        if page.is_empty() || records.len() >= total {
            return Ok(records);
        }
    }
}

/// An item to add to a queue.
#[derive(Debug, Clone)]
pub struct StoredItem {
    pub original: String,
    pub label: String,
    pub counterfactual: Option<String>,
    pub target: String,
    pub method: String,
    pub flipped: Option<bool>,
    pub target_probability: Option<f32>,
    pub record: Option<String>,
}

impl StoredItem {
    pub fn from_record(record: Counterfactual) -> StoredItem {
        StoredItem {
            original: record.original.clone(),
            label: record.label.clone(),
            counterfactual: Some(record.edited.clone()),
            target: record.target.clone(),
            method: record.method.clone(),
            flipped: Some(record.flipped),
            target_probability: Some(record.target_probability),
            record: serde_json::to_string(&record).ok(),
        }
    }
}

/// Appends `items` to `queue` in one transaction; returns how many the queue has now.
pub async fn insert_items(db: &Db, queue: &str, items: Vec<StoredItem>) -> ApiResult<usize> {
    let (begin, _) = dialect(db);
    let total = with_pool!(db, |pool| async {
        let mut tx = pool.begin_with(begin).await?;
        let start: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM items WHERE queue_id = $1")
            .bind(queue)
            .fetch_one(&mut *tx)
            .await?;
        for (i, item) in items.iter().enumerate() {
            sqlx::query(
                "INSERT INTO items (id, queue_id, seq, original, label, counterfactual, target, \
                 method, flipped, target_probability, record, original_hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            )
            .bind(new_id("it"))
            .bind(queue)
            .bind(start + i as i64)
            .bind(&item.original)
            .bind(&item.label)
            .bind(&item.counterfactual)
            .bind(&item.target)
            .bind(&item.method)
            .bind(item.flipped.map(i64::from))
            .bind(item.target_probability.map(f64::from))
            .bind(&item.record)
            .bind(hash_secret(&item.original))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(start as usize + items.len())
    }
    .await)?;
    Ok(total)
}

/// `POST …/items` (admins): originals to write counterfactuals for, or counterfactuals made
/// elsewhere.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/items", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), request_body = Vec<NewItem>, security(("session" = []), ("token" = ["manage"])), responses((status = 200, body = Queue), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn add_items(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
    JsonBody(items): JsonBody<Vec<NewItem>>,
) -> ApiResult<Json<Queue>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, MANAGE).await?;
    let items = checked_items(items)?;
    append(&state, &caller, queue, items).await
}

/// `POST …/upload` (admins; multipart, one `file`): the items of a JSON-lines or CSV file, all
/// or none — a bad line is a 400 naming it.
#[utoipa::path(post, path = "/teams/{team}/queues/{queue}/upload", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), request_body(content_type = "multipart/form-data", description = "file: JSON lines or CSV"), security(("session" = []), ("token" = ["manage"])), responses((status = 200, body = Queue), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<Json<Queue>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, MANAGE).await?;
    let mut multipart = multipart?;
    let mut file = None;
    while let Some(field) = multipart.next_field().await? {
        if field.name() == Some("file") {
            if file.is_some() {
                return Err(ApiError::bad_request("send one file"));
            }
            let name = field.file_name().unwrap_or_default().to_lowercase();
            file = Some((name, field.bytes().await?));
        }
    }
    let (name, bytes) = file.ok_or_else(|| ApiError::bad_request("no `file` field"))?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::bad_request("the file is not UTF-8 text"))?;
    let items = if name.ends_with(".csv") {
        csv_items(text)
    } else {
        jsonl_items(text)
    }
    .map_err(|e| ApiError::bad_request(format!("{name}: {e:#}")))?;
    append(&state, &caller, queue, items).await
}

/// Adds checked items to `queue` and logs it.
async fn append(
    state: &AppState,
    caller: &Caller,
    queue: QueueRow,
    items: Vec<StoredItem>,
) -> ApiResult<Json<Queue>> {
    let resources = state.resources()?;
    for (i, item) in items.iter().enumerate() {
        resources
            .target(&item.label, Some(&item.target))
            .map_err(|e| ApiError::bad_request(format!("item {}: {e}", i + 1)))?;
    }
    let added = items.len();
    let total = insert_items(&state.db, &queue.id, items).await?;
    audit(
        &state.db,
        &queue.team,
        Some(&queue.id),
        Some(&caller.user.id),
        "add items",
        serde_json::json!({"items": added}),
    )
    .await?;
    Ok(Json(queue_info(queue, total)))
}

/// Items given by people, checked: 1 to [`MAX_NEW_ITEMS`], texts within the limits, labels.
fn checked_items(items: Vec<NewItem>) -> ApiResult<Vec<StoredItem>> {
    if items.is_empty() || items.len() > MAX_NEW_ITEMS {
        return Err(ApiError::bad_request(format!(
            "1 to {MAX_NEW_ITEMS} items per request"
        )));
    }
    let mut stored = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |e: ApiError| ApiError::bad_request(format!("item {}: {}", i + 1, e.message));
        check_text(&item.original).map_err(at)?;
        if let Some(text) = &item.counterfactual {
            check_text(text).map_err(at)?;
        }
        if item.label.trim().is_empty() || item.target.trim().is_empty() {
            return Err(at(ApiError::bad_request("label and target are required")));
        }
        let method = if item.counterfactual.is_some() {
            "upload"
        } else {
            "human"
        };
        stored.push(StoredItem {
            method: method.into(),
            original: item.original,
            label: item.label,
            counterfactual: item.counterfactual,
            target: item.target,
            flipped: None,
            target_probability: None,
            record: None,
        });
    }
    Ok(stored)
}

/// JSON lines: `generate` records (kept whole, with their classifier verdicts), or new items.
fn jsonl_items(text: &str) -> anyhow::Result<Vec<StoredItem>> {
    let mut items = Vec::new();
    let mut new = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        if let Ok(record) = serde_json::from_str::<Counterfactual>(line) {
            items.push(StoredItem::from_record(record));
            continue;
        }
        let item: NewItem = serde_json::from_str(line).with_context(|| {
            format!(
                "line {}: expected a `generate` record or {{original, label, target, \
                 counterfactual?}}",
                i + 1
            )
        })?;
        new.push(item);
    }
    if !new.is_empty() {
        items.extend(checked_items(new).map_err(|e| anyhow::anyhow!(e.message))?);
    }
    Ok(items)
}

/// CSV with a header: `original`, `label`, `target` and optionally `counterfactual`.
fn csv_items(text: &str) -> anyhow::Result<Vec<StoredItem>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut new = Vec::new();
    for (i, row) in reader.deserialize::<NewItem>().enumerate() {
        let mut item = row.with_context(|| {
            format!(
                "row {}: expected the columns original, label, target (and counterfactual)",
                i + 1
            )
        })?;
        item.counterfactual = item.counterfactual.filter(|c| !c.trim().is_empty());
        new.push(item);
    }
    checked_items(new).map_err(|e| anyhow::anyhow!(e.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_records_new_items_and_csv_rows_are_read() {
        let csv = "original,label,target,counterfactual\n\
                   Good film.,positive,negative,Bad film.\n\
                   Dull plot.,negative,positive,\n";
        let items = csv_items(csv).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].counterfactual.as_deref(), Some("Bad film."));
        assert_eq!(items[1].counterfactual, None);
        assert_eq!(items[1].method, "human");
        let line = r#"{"original": "Good film.", "label": "positive", "target": "negative"}"#;
        assert_eq!(jsonl_items(line).unwrap()[0].method, "human");
        let error = jsonl_items(r#"{"original": 1}"#).unwrap_err();
        assert!(format!("{error:#}").contains("line 1"), "{error:#}");
        assert!(csv_items("original,label\nx,y\n").is_err());
    }
}
