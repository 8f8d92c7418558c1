//! Generation jobs over HTTP: start, list, follow (Server-Sent Events), cancel, and read the
//! results (paged JSON, or every record as JSON lines).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flipside_shared::api::{ApiError as ErrorBody, Job, JobRequest, JobStatus, RecordPage};
use flipside_shared::records::Counterfactual;
use futures_util::{Stream, StreamExt, stream};
use serde::Deserialize;
use tokio_stream::wrappers::BroadcastStream;

use super::AppState;
use super::datasets;
use super::db::{RecordFilter, now};
use super::error::{ApiError, ApiResult, JsonBody};
use super::runner::job_method;
use crate::methods;

/// The largest `limit` a job may have.
const MAX_JOB_ITEMS: usize = 10_000;
/// Records per page, at most.
const MAX_PAGE: usize = 500;

/// Queues a generation job; it starts when the jobs before it are finished.
#[utoipa::path(post, path = "/jobs", tag = "jobs", request_body = JobRequest,
    responses((status = 202, body = Job), (status = 400, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    JsonBody(mut request): JsonBody<JobRequest>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    let method = job_method(&request.method);
    methods::method(method.as_str())
        .and_then(|m| methods::check_models(m, &state.resources.models))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    request.method = Some(method);
    if !(1..=MAX_JOB_ITEMS).contains(&request.limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_JOB_ITEMS}"
        )));
    }
    if !(1..=10).contains(&request.max_attempts) {
        return Err(ApiError::bad_request(
            "max_attempts must be between 1 and 10",
        ));
    }
    if !datasets::exists(&state, &request.dataset).await? {
        return Err(ApiError::bad_request(format!(
            "no dataset {:?}: GET /api/datasets lists them",
            request.dataset
        )));
    }
    let id = format!("job-{:012x}", rand::random::<u64>() >> 16);
    let job = state.db.insert_job(&id, &request, &now()).await?;
    state.jobs.wake();
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Every job, newest first.
#[utoipa::path(get, path = "/jobs", tag = "jobs", responses((status = 200, body = Vec<Job>)))]
pub async fn list(State(state): State<AppState>) -> ApiResult<Json<Vec<Job>>> {
    Ok(Json(state.db.jobs().await?))
}

/// One job and its progress.
#[utoipa::path(get, path = "/jobs/{id}", tag = "jobs", params(("id" = String, Path)),
    responses((status = 200, body = Job), (status = 404, body = ErrorBody)))]
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    Ok(Json(find(&state, &id).await?))
}

/// Cancels a queued job, or stops a running one after the item in progress (its records are
/// kept).
#[utoipa::path(post, path = "/jobs/{id}/cancel", tag = "jobs", params(("id" = String, Path)),
    responses((status = 200, body = Job), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Job>> {
    let mut job = find(&state, &id).await?;
    if job.status.is_finished() {
        return Err(ApiError::conflict(format!(
            "job {id} is already {}",
            job.status.as_str()
        )));
    }
    if !state.jobs.cancel(&id) {
        job.status = JobStatus::Cancelled;
        job.updated_at = now();
        state.db.update_job(&job).await?;
        let _ = state.jobs.updates.send(job.clone());
    }
    Ok(Json(job))
}

/// The job's progress as Server-Sent Events: a `progress` event with the whole job on connect
/// and on every change; the stream ends after the job finishes.
#[utoipa::path(get, path = "/jobs/{id}/events", tag = "jobs", params(("id" = String, Path)),
    responses((status = 200, content_type = "text/event-stream", body = Job,
        description = "`progress` events, each a Job"), (status = 404, body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    // Subscribe before reading, so that no change falls in between.
    let updates = BroadcastStream::new(state.jobs.updates.subscribe());
    let job = find(&state, &id).await?;
    let live = updates.filter_map(move |update| {
        // A lagging client skips updates: each carries the whole state.
        let job = update.ok().filter(|job| job.id == id);
        std::future::ready(job)
    });
    let jobs = stream::once(std::future::ready(job))
        .chain(live)
        .scan(false, |ended, job| {
            let next = (!*ended).then(|| {
                *ended = job.status.is_finished();
                job
            });
            std::future::ready(next)
        })
        .map(|job| {
            let event = Event::default()
                .event("progress")
                .id(job.done.to_string())
                .json_data(&job)
                .unwrap_or_else(|_| Event::default().event("error"));
            Ok(event)
        })
        .take_until(state.shutdown.clone().cancelled_owned());
    Ok(Sse::new(jobs).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Which records to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct RecordQuery {
    /// Only the flipped (true) or not flipped (false) ones.
    flipped: Option<bool>,
    #[serde(default)]
    offset: usize,
    /// At most 500 [default: 50].
    limit: Option<usize>,
}

/// A page of a job's counterfactuals, in the order they were made.
#[utoipa::path(get, path = "/jobs/{id}/records", tag = "jobs",
    params(("id" = String, Path), RecordQuery),
    responses((status = 200, body = RecordPage), (status = 404, body = ErrorBody)))]
pub async fn records(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<RecordQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<RecordPage>> {
    let Query(query) = query?;
    find(&state, &id).await?;
    let filter = match query.flipped {
        None => RecordFilter::All,
        Some(flipped) => RecordFilter::Flipped(flipped),
    };
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let (rows, total) = state.db.records(&id, filter, query.offset, limit).await?;
    let records = rows
        .iter()
        .map(|json| serde_json::from_str::<Counterfactual>(json))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::internal(e.into()))?;
    Ok(Json(RecordPage { records, total }))
}

/// Every counterfactual of a job as JSON lines, with full provenance (as `flipside generate`
/// writes them).
#[utoipa::path(get, path = "/jobs/{id}/records.jsonl", tag = "jobs", params(("id" = String, Path)),
    responses((status = 200, content_type = "application/x-ndjson", description = "one record per line"),
        (status = 404, body = ErrorBody)))]
pub async fn download(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&state, &id).await?;
    let mut body = String::new();
    let mut offset = 0;
    loop {
        let (rows, _) = state
            .db
            .records(&id, RecordFilter::All, offset, 1000)
            .await?;
        if rows.is_empty() {
            break;
        }
        offset += rows.len();
        for row in rows {
            body.push_str(&row);
            body.push('\n');
        }
    }
    let disposition = format!("attachment; filename=\"{id}.jsonl\"");
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from(body),
    )
        .into_response())
}

async fn find(state: &AppState, id: &str) -> ApiResult<Job> {
    state
        .db
        .job(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {id}")))
}
