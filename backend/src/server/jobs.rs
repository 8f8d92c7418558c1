//! Generation jobs over HTTP: start, list, follow (Server-Sent Events), cancel, and read the
//! results (paged JSON, or every record as JSON lines). Jobs belong to teams: members read
//! them, reviewers and admins start and cancel them; a job of another team is not found.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
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
use super::error::{ApiError, ApiResult, JsonBody, QueryParams};
use super::portal::auth::{Access, Caller, GENERATE, READ};
use super::runner::{checkpoint, job_method};
use crate::data::tables::{PARQUET_MEDIA_TYPE, write_parquet};
use crate::methods;
use crate::pipeline::store::failures_path;

/// The largest `limit` a job may have.
const MAX_JOB_ITEMS: usize = 10_000;
/// Records per page, at most.
const MAX_PAGE: usize = 500;
/// The largest `offset` a page may start at (far beyond any job; keeps it a valid SQL number).
const MAX_OFFSET: usize = 1 << 40;

/// How often a progress stream reads the database, for jobs run by another server process.
const POLL: Duration = Duration::from_secs(2);

/// Queues a generation job; it starts when the jobs before it are finished.
#[utoipa::path(post, path = "/teams/{team}/jobs", tag = "jobs", request_body = JobRequest,
    params(("team" = String, Path)), security(("session" = []), ("token" = ["generate"])),
    responses((status = 202, body = Job), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
    JsonBody(mut request): JsonBody<JobRequest>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    caller.require(&state.db, &team, GENERATE).await?;
    let method = job_method(&request.method);
    let resources = state.resources()?;
    methods::method(method.as_str())
        .and_then(|m| methods::check_models(m, &resources.models))
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
    if !datasets::exists(&state, &team, &request.dataset).await? {
        return Err(ApiError::bad_request(format!(
            "no dataset {:?}: GET /api/teams/{team}/datasets lists them",
            request.dataset
        )));
    }
    let id = format!("job-{:012x}", rand::random::<u64>() >> 16);
    let job = state.db.insert_job(&id, &team, &request, &now()).await?;
    state.jobs.wake();
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// The team's jobs, newest first.
#[utoipa::path(get, path = "/teams/{team}/jobs", tag = "jobs", params(("team" = String, Path)),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, body = Vec<Job>), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(team): Path<String>,
) -> ApiResult<Json<Vec<Job>>> {
    caller.require(&state.db, &team, READ).await?;
    Ok(Json(state.db.jobs(&team).await?))
}

/// One job and its progress.
#[utoipa::path(get, path = "/teams/{team}/jobs/{id}", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, body = Job), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    Ok(Json(find(&state, &caller, &team, &id, READ).await?))
}

/// Cancels a queued job, or stops a running one after the item in progress (its records are
/// kept), in whichever server process runs it.
#[utoipa::path(post, path = "/teams/{team}/jobs/{id}/cancel", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 200, body = Job), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    let job = find(&state, &caller, &team, &id, GENERATE).await?;
    if job.status.is_finished() {
        return Err(ApiError::conflict(format!(
            "job {id} is already {}",
            job.status.as_str()
        )));
    }
    if state.jobs.cancel(&id) {
        // Running here: the runner saves the cancellation after the item in progress.
        return Ok(Json(job));
    }
    // Queued, or running in another process (which reads the cancellation within seconds).
    state.db.cancel_job(&id).await?;
    Ok(Json(publish_current(&state, &team, &id).await?))
}

/// Job `id` as the database has it now, also sent to the progress streams.
async fn publish_current(state: &AppState, team: &str, id: &str) -> ApiResult<Job> {
    let job = state
        .db
        .team_job(team, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {id}")))?;
    let _ = state.jobs.updates.send(job.clone());
    Ok(job)
}

/// Runs a failed or cancelled job again from where it stopped: the records it made are kept
/// and its remaining items are edited (409 for a job that is queued, running or done).
#[utoipa::path(post, path = "/teams/{team}/jobs/{id}/resume", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 200, body = Job), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    let job = find(&state, &caller, &team, &id, GENERATE).await?;
    let requeued = match job.status {
        JobStatus::Failed | JobStatus::Cancelled => state.db.requeue_job(&id).await?,
        _ => None,
    };
    let Some(requeued) = requeued else {
        return Err(ApiError::conflict(format!(
            "job {id} is {}: only a failed or cancelled job can be resumed",
            job.status.as_str()
        )));
    };
    state.jobs.forget_cancel(&id);
    let _ = state.jobs.updates.send(requeued.clone());
    state.jobs.wake();
    Ok(Json(requeued))
}

/// Deletes a finished job, its records and its checkpoint (a queued or running one must be
/// cancelled first: 409). Review queues made of it keep their items.
#[utoipa::path(delete, path = "/teams/{team}/jobs/{id}", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    find(&state, &caller, &team, &id, GENERATE).await?;
    if !remove_finished(&state, &id).await? {
        return Err(ApiError::conflict(format!(
            "job {id} has not finished: cancel it first"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes job `id`, its records and its checkpoint if it has finished; whether it did.
pub async fn remove_finished(state: &AppState, id: &str) -> anyhow::Result<bool> {
    if !state.db.delete_finished_job(id).await? {
        return Ok(false);
    }
    let checkpoint = checkpoint(state, id);
    for file in [failures_path(&checkpoint), checkpoint] {
        if let Err(error) = tokio::fs::remove_file(&file).await
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove {}: {error}", file.display());
        }
    }
    Ok(true)
}

/// The job's progress as Server-Sent Events: a `progress` event with the whole job on connect
/// and on every change; the stream ends after the job finishes. Changes made by this process
/// arrive at once, those of a job another process runs within two seconds.
#[utoipa::path(get, path = "/teams/{team}/jobs/{id}/events", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, content_type = "text/event-stream", body = Job,
        description = "`progress` events, each a Job"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    // Subscribe before reading, so that no change falls in between.
    let updates = BroadcastStream::new(state.jobs.updates.subscribe());
    let job = find(&state, &caller, &team, &id, READ).await?;
    let live_id = id.clone();
    let live = updates.filter_map(move |update| {
        // A lagging client skips updates: each carries the whole state.
        let job = update.ok().filter(|job| job.id == live_id);
        std::future::ready(job)
    });
    let db = state.db.clone();
    let polled = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(POLL))
        .filter_map(move |_| {
            let (db, id) = (db.clone(), id.clone());
            async move { db.job(&id).await.ok().flatten() }
        });
    let jobs = stream::once(std::future::ready(job))
        .chain(stream::select(live, polled))
        .scan((false, None::<Job>), |(ended, last), job| {
            if *ended {
                return std::future::ready(None);
            }
            // Each change once (the poll finds what the broadcast already sent).
            let fresh = last.as_ref() != Some(&job);
            *ended = job.status.is_finished();
            *last = Some(job.clone());
            std::future::ready(Some(fresh.then_some(job)))
        })
        .filter_map(std::future::ready)
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
#[into_params(parameter_in = Query)]
pub struct RecordQuery {
    /// Only the flipped (true) or not flipped (false) ones.
    flipped: Option<bool>,
    #[serde(default)]
    offset: usize,
    /// At most 500 [default: 50].
    limit: Option<usize>,
}

/// A page of a job's counterfactuals, in the order they were made.
#[utoipa::path(get, path = "/teams/{team}/jobs/{id}/records", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path), RecordQuery),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, body = RecordPage), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn records(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
    QueryParams(query): QueryParams<RecordQuery>,
) -> ApiResult<Json<RecordPage>> {
    find(&state, &caller, &team, &id, READ).await?;
    if query.offset > MAX_OFFSET {
        return Err(ApiError::bad_request(format!(
            "offset: at most {MAX_OFFSET}"
        )));
    }
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
#[utoipa::path(get, path = "/teams/{team}/jobs/{id}/records.jsonl", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, content_type = "application/x-ndjson", description = "one record per line"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn download(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    find(&state, &caller, &team, &id, READ).await?;
    let mut body = String::new();
    for row in all_records(&state, &id).await? {
        body.push_str(&row);
        body.push('\n');
    }
    Ok(attachment(
        &id,
        "jsonl",
        "application/x-ndjson",
        Body::from(body),
    ))
}

/// Every counterfactual of a job as a Parquet table: one column per record field (as
/// `flipside generate --out FILE.parquet` writes them).
#[utoipa::path(get, path = "/teams/{team}/jobs/{id}/records.parquet", tag = "jobs",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["read"])),
    responses((status = 200, content_type = "application/vnd.apache.parquet", description = "one record per row"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn download_parquet(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    find(&state, &caller, &team, &id, READ).await?;
    let rows = all_records(&state, &id).await?;
    let body = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        write_parquet(rows.iter().map(String::as_str), &mut out).map(|()| out)
    })
    .await
    .map_err(|e| ApiError::internal(e.into()))?
    .map_err(ApiError::internal)?;
    Ok(attachment(
        &id,
        "parquet",
        PARQUET_MEDIA_TYPE,
        Body::from(body),
    ))
}

/// Every record of job `id` (its JSON), in order.
async fn all_records(state: &AppState, id: &str) -> ApiResult<Vec<String>> {
    let mut all = Vec::new();
    loop {
        let (rows, _) = state
            .db
            .records(id, RecordFilter::All, all.len(), 1000)
            .await?;
        if rows.is_empty() {
            return Ok(all);
        }
        all.extend(rows);
    }
}

/// A download of `body` named `ID.EXTENSION`.
fn attachment(id: &str, extension: &str, content_type: &str, body: Body) -> Response {
    let disposition = format!("attachment; filename=\"{id}.{extension}\"");
    (
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        body,
    )
        .into_response()
}

/// Job `id` of `team`, for a caller with `access` to the team's jobs; another team's job is
/// not found.
async fn find(
    state: &AppState,
    caller: &Caller,
    team: &str,
    id: &str,
    access: Access,
) -> ApiResult<Job> {
    caller.require(&state.db, team, access).await?;
    state
        .db
        .team_job(team, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {id}")))
}
