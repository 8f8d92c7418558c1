//! Datasets jobs run on: the built-ins (every team's), and files a team uploads as CSV, TSV or
//! JSON lines (read by the same readers and column mapping as the command line).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use axum::Json;
use axum::extract::multipart::Field;
use axum::extract::{Multipart, Path as UrlPath, State};
use axum::http::StatusCode;
use flipside_shared::api::{ApiError as ErrorBody, DatasetInfo};
use flipside_shared::data::Dataset;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::AppState;
use super::db::{StoredDataset, now};
use super::error::{ApiError, ApiResult};
use super::portal::auth::{Caller, GENERATE, READ};
use crate::data::{BUILTIN_SPLITS, Columns, DatasetSpec, Format, ReadOptions, read_file};
use crate::home::Home;

/// The built-in datasets a job can name.
const BUILTINS: [&str; 4] = ["imdb:test", "imdb:dev", "imdb:train", "rotten-tomatoes"];

/// How an uploaded file is read (stored with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UploadReading {
    format: String,
    text_col: String,
    label_col: String,
    premise_col: Option<String>,
}

impl UploadReading {
    fn options(&self) -> Result<ReadOptions> {
        let format = Format::from_name(&self.format)
            .with_context(|| format!("unknown format {:?}", self.format))?;
        Ok(ReadOptions {
            format: Some(format),
            columns: Columns {
                text: self.text_col.clone(),
                label: self.label_col.clone(),
                pair: self
                    .premise_col
                    .clone()
                    .map(|premise| (premise, self.text_col.clone())),
                id: None,
            },
            skip_bad: true,
            ..ReadOptions::default()
        })
    }
}

/// The built-in datasets and the team's uploads (newest first).
#[utoipa::path(get, path = "/teams/{team}/datasets", tag = "datasets",
    params(("team" = String, Path)), security(("session" = []), ("token" = ["read"])),
    responses((status = 200, body = Vec<DatasetInfo>), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    UrlPath(team): UrlPath<String>,
) -> ApiResult<Json<Vec<DatasetInfo>>> {
    caller.require(&state.db, &team, READ).await?;
    let mut all: Vec<DatasetInfo> = BUILTINS
        .iter()
        .map(|name| DatasetInfo {
            id: name.to_string(),
            name: name.to_string(),
            builtin: true,
            examples: None,
            labels: vec!["negative".into(), "positive".into()],
            skipped: 0,
            created_at: None,
        })
        .collect();
    all.extend(state.db.datasets(&team).await?.into_iter().map(info));
    Ok(Json(all))
}

/// Uploads a labelled dataset (multipart form: `file`, and optionally `name`, `text_col`
/// (default `text`), `label_col` (default `label`) and `premise_col` for text pairs).
/// Unreadable rows are skipped and counted; a file with no readable row is refused with the
/// reason.
#[utoipa::path(post, path = "/teams/{team}/datasets", tag = "datasets",
    params(("team" = String, Path)), security(("session" = []), ("token" = ["generate"])),
    request_body(content_type = "multipart/form-data", description = "file, name, text_col, label_col, premise_col"),
    responses((status = 201, body = DatasetInfo), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    UrlPath(team): UrlPath<String>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<(StatusCode, Json<DatasetInfo>)> {
    caller.require(&state.db, &team, GENERATE).await?;
    // Its labels are checked against the classifier's: not before it is loaded.
    let resources = state.resources()?;
    let mut multipart = multipart?;
    let id = format!("ds-{:012x}", rand::random::<u64>() >> 16);
    let dir = state.data_dir.join("datasets");
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| ApiError::internal(e.into()))?;
    let mut name = None;
    let mut reading = UploadReading {
        format: String::new(),
        text_col: "text".into(),
        label_col: "label".into(),
        premise_col: None,
    };
    let mut file: Option<PathBuf> = None;
    let result = async {
        while let Some(field) = multipart.next_field().await? {
            match field.name().unwrap_or_default() {
                "file" if file.is_some() => {
                    return Err(ApiError::bad_request("one file per upload"));
                }
                "file" => {
                    let original = field.file_name().unwrap_or_default().to_string();
                    reading.format = format_of(&original)?;
                    let path = dir.join(format!("{id}.{}", reading.format));
                    file = Some(path.clone());
                    if name.is_none() {
                        name = Some(original);
                    }
                    save_field(field, &path).await?;
                }
                "name" => name = Some(text_field(field).await?),
                "text_col" => reading.text_col = text_field(field).await?,
                "label_col" => reading.label_col = text_field(field).await?,
                "premise_col" => {
                    reading.premise_col = Some(text_field(field).await?).filter(|c| !c.is_empty())
                }
                other => {
                    return Err(ApiError::bad_request(format!(
                        "unknown form field {other:?} (use file, name, text_col, label_col, premise_col)"
                    )));
                }
            }
        }
        let Some(path) = file.clone() else {
            return Err(ApiError::bad_request("no file: send it in the form field `file`"));
        };
        let size = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ApiError::internal(e.into()))?
            .len();
        let used = team_bytes(&state, &team).await?;
        if used + size > state.team_quota_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                format!(
                    "the team's uploads would take {} MB, more than its {} MB: delete some \
                     (DELETE /api/teams/{team}/datasets/ID)",
                    (used + size) >> 20,
                    state.team_quota_bytes >> 20
                ),
            ));
        }
        let options = reading.options()?;
        // Messages name the file as the client sent it, not where the server keeps it.
        let saved = path.display().to_string();
        let sent = name.clone().unwrap_or_else(|| "the file".into());
        tokio::task::spawn_blocking(move || read_file(&path, &options))
            .await
            .map_err(|e| ApiError::internal(e.into()))?
            .map_err(|e| ApiError::bad_request(format!("{e:#}").replace(&saved, &sent)))
    }
    .await;
    // Nothing half-read is kept; nor a dataset the server's classifier cannot score.
    let classifier = &resources.classifier_info;
    let result = result.and_then(|report| {
        let unknown: Vec<&String> = report
            .dataset
            .labels
            .names()
            .iter()
            .filter(|label| !classifier.labels.contains(label))
            .collect();
        if unknown.is_empty() {
            Ok(report)
        } else {
            Err(ApiError::bad_request(format!(
                "the labels {unknown:?} are not the classifier's ({}): jobs could not tell \
                 whether an edit flips them",
                classifier.labels.join(", ")
            )))
        }
    });
    let report = match result {
        Ok(report) if !report.dataset.examples.is_empty() => report,
        outcome => {
            if let Some(path) = &file {
                let _ = tokio::fs::remove_file(path).await;
            }
            // The rest of the body is read (within the body limit) before answering, or the
            // client, still sending, could miss the answer.
            while let Ok(Some(_field)) = multipart.next_field().await {}
            return Err(match outcome {
                Ok(report) => ApiError::bad_request(match report.skipped.first() {
                    Some(bad) => format!(
                        "no readable row ({} skipped); the first: {}",
                        report.skipped.len(),
                        bad.reason
                    ),
                    None => "the file has no rows".to_string(),
                }),
                Err(error) => error,
            });
        }
    };
    let stored = StoredDataset {
        id: id.clone(),
        team: Some(team),
        name: name.filter(|n| !n.is_empty()).unwrap_or_else(|| id.clone()),
        file: format!("datasets/{id}.{}", reading.format),
        read_options: serde_json::to_string(&reading).map_err(|e| ApiError::internal(e.into()))?,
        examples: report.dataset.len() as i64,
        labels: report.dataset.labels.names().to_vec(),
        skipped: report.skipped.len() as i64,
        created_at: now(),
    };
    state.db.insert_dataset(&stored).await?;
    Ok((StatusCode::CREATED, Json(info(stored))))
}

/// Deletes one of the team's uploads and its file (not while a queued or running job reads it:
/// 409).
#[utoipa::path(delete, path = "/teams/{team}/datasets/{id}", tag = "datasets",
    params(("team" = String, Path), ("id" = String, Path)),
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    UrlPath((team, id)): UrlPath<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.require(&state.db, &team, GENERATE).await?;
    if BUILTINS.contains(&id.as_str()) {
        return Err(ApiError::bad_request("built-in datasets cannot be deleted"));
    }
    let stored = state
        .db
        .dataset(&id)
        .await?
        .filter(|d| d.team.as_deref() == Some(team.as_str()))
        .ok_or_else(|| ApiError::not_found(format_args!("dataset {id}")))?;
    if let Some(job) = remove_unused(&state, &team, &stored).await? {
        return Err(ApiError::conflict(format!(
            "job {job} is using it: cancel it or wait for it to finish"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes `stored` (one of `team`'s uploads) and its file unless a queued or running job reads
/// it; that job's id when one does.
pub async fn remove_unused(
    state: &AppState,
    team: &str,
    stored: &StoredDataset,
) -> anyhow::Result<Option<String>> {
    let in_use = state
        .db
        .jobs(team)
        .await?
        .into_iter()
        .find(|job| !job.status.is_finished() && job.request.dataset == stored.id);
    if let Some(job) = in_use {
        return Ok(Some(job.id));
    }
    state.db.delete_dataset(&stored.id).await?;
    if let Err(error) = tokio::fs::remove_file(state.data_dir.join(&stored.file)).await {
        tracing::warn!("cannot remove dataset {}'s file: {error}", stored.id);
    }
    Ok(None)
}

/// Bytes of the team's uploads on disk.
async fn team_bytes(state: &AppState, team: &str) -> Result<u64> {
    let mut total = 0;
    for stored in state.db.datasets(team).await? {
        if let Ok(meta) = tokio::fs::metadata(state.data_dir.join(&stored.file)).await {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Loads a dataset by its id: a built-in spec or an upload.
pub async fn load(state: &AppState, id: &str) -> Result<Dataset> {
    if BUILTINS.contains(&id) {
        let spec: DatasetSpec = id.parse()?;
        let home: Home = state.home.clone();
        // Built-ins are always split with BUILTIN_SPLITS.
        let mut dataset = tokio::task::spawn_blocking(move || {
            spec.load(&home, &ReadOptions::default(), BUILTIN_SPLITS)
        })
        .await??
        .dataset;
        dataset.name = id.to_string();
        return Ok(dataset);
    }
    let stored = state
        .db
        .dataset(id)
        .await?
        .with_context(|| format!("no dataset {id}"))?;
    let reading: UploadReading = serde_json::from_str(&stored.read_options)?;
    let options = reading.options()?;
    let path = state.data_dir.join(&stored.file);
    let mut dataset = tokio::task::spawn_blocking(move || read_file(&path, &options))
        .await??
        .dataset;
    dataset.name = stored.name;
    Ok(dataset)
}

/// Whether a job of `team` can name `id`: a built-in or the team's upload.
pub async fn exists(state: &AppState, team: &str, id: &str) -> Result<bool> {
    Ok(BUILTINS.contains(&id)
        || state
            .db
            .dataset(id)
            .await?
            .is_some_and(|d| d.team.as_deref() == Some(team)))
}

fn info(stored: StoredDataset) -> DatasetInfo {
    DatasetInfo {
        id: stored.id,
        name: stored.name,
        builtin: false,
        examples: Some(stored.examples as usize),
        labels: stored.labels,
        skipped: stored.skipped as usize,
        created_at: Some(stored.created_at),
    }
}

/// The format of an uploaded file, from its name.
fn format_of(file_name: &str) -> ApiResult<String> {
    match Format::from_path(Path::new(file_name)) {
        Some(format) => Ok(format.name().into()),
        None => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_file_type",
            format!("{file_name:?} is not a .csv, .tsv, .jsonl, .parquet or .arrow file"),
        )),
    }
}

/// Streams an uploaded file to `path` (the body limit applies while it is read).
async fn save_field(mut field: Field<'_>, path: &Path) -> ApiResult<()> {
    let mut out = tokio::fs::File::create(path)
        .await
        .map_err(ApiError::storage)?;
    while let Some(chunk) = field.chunk().await? {
        out.write_all(&chunk).await.map_err(ApiError::storage)?;
    }
    out.flush().await.map_err(ApiError::storage)?;
    out.sync_all().await.map_err(ApiError::storage)
}

async fn text_field(field: Field<'_>) -> ApiResult<String> {
    let name = field.name().unwrap_or_default().to_string();
    let text = field.text().await?;
    if text.len() > 200 {
        return Err(ApiError::bad_request(format!("{name} is too long")));
    }
    Ok(text.trim().to_string())
}
