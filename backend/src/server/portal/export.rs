//! `GET …/queues/{queue}/export`: a queue's kept items (accepted, fixed or relabelled, by their
//! outcome) in a file [`crate::review::export`] writes.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use flipside_shared::api::ApiError as ErrorBody;
use flipside_shared::portal::Outcome;

use super::auth::{Caller, EXPORT};
use super::queue::queue_for;
use crate::data::tables::PARQUET_MEDIA_TYPE;
use crate::review::export::{ExportKind, ExportOptions, FileFormat, Kept, render};
use crate::server::AppState;
use crate::server::db::with_pool;
use crate::server::error::{ApiError, ApiResult, QueryParams};

/// id, original, label, counterfactual, record, outcome.
type KeptRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
);

/// `GET …/queues/{queue}/export` (reviewers and admins; tokens need the `export` scope).
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}/export", tag = "review", params(("team" = String, Path), ("queue" = String, Path), ("format" = Option<String>, Query, description = "classifier (default), pairs or records"), ("as" = Option<String>, Query, description = "jsonl (default), csv or parquet"), ("originals" = Option<bool>, Query, description = "classifier format: the originals too")), security(("session" = []), ("token" = ["export"])), responses((status = 200, content_type = "application/x-ndjson", description = "One accepted item (or pair) per line"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn download(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
    QueryParams(query): QueryParams<ExportOptions>,
) -> ApiResult<Response> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, EXPORT).await?;
    query.check().map_err(ApiError::bad_request)?;
    let rows: Vec<KeptRow> = with_pool!(&state.db, |pool| sqlx::query_as(
        "SELECT id, original, label, counterfactual, record, outcome FROM items \
             WHERE queue_id = $1 AND outcome IS NOT NULL ORDER BY seq"
    )
    .bind(&queue.id)
    .fetch_all(pool)
    .await)?;
    let mut kept = Vec::new();
    for (id, original, label, counterfactual, record, outcome) in rows {
        let outcome: Outcome = serde_json::from_str(&outcome).map_err(anyhow::Error::from)?;
        if !outcome.verdict.keeps() {
            continue;
        }
        let Some(counterfactual) = outcome.text.clone().or(counterfactual) else {
            continue;
        };
        let record = record.as_deref().and_then(|r| serde_json::from_str(r).ok());
        kept.push(Kept {
            id,
            original,
            label,
            counterfactual,
            record,
            outcome,
        });
    }
    let body = render(&kept, &query).map_err(ApiError::internal)?;
    let (extension, content_type) = match query.file {
        FileFormat::Jsonl => ("jsonl", "application/x-ndjson"),
        FileFormat::Csv => ("csv", "text/csv; charset=utf-8"),
        FileFormat::Parquet => ("parquet", PARQUET_MEDIA_TYPE),
    };
    let kind = match query.format {
        ExportKind::Classifier => "classifier",
        ExportKind::Pairs => "pairs",
        ExportKind::Records => "records",
    };
    let name = format!("{}-{kind}.{extension}", queue.id);
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}
