//! Calls to the server's JSON API (`flipside serve`, same origin, under `/api`), typed with the
//! request and response bodies of [`flipside_shared::api`]. Every call returns the server's
//! error message as `Err(String)`, ready to show in place.

use flipside_shared::api::{
    ApiError, DatasetInfo, EditRequest, EditResponse, Job, JobRequest, RecordPage, ServerInfo,
};
use gloo_net::http::{Request, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where the classifier's files are served, for scoring in the browser.
pub const CLASSIFIER_CONFIG: &str = "/api/classifier/config.json";
pub const CLASSIFIER_TOKENIZER: &str = "/api/classifier/tokenizer.json";
pub const CLASSIFIER_WEIGHTS: &str = "/api/classifier/model.int8.safetensors";
pub const DIS_AE_CONFIG: &str = "/api/dis-ae/config.json";
pub const DIS_AE_VOCABULARY: &str = "/api/dis-ae/tokenizer.json";
pub const DIS_AE_WEIGHTS: &str = "/api/dis-ae/model.int8.safetensors";

/// `GET /api/info`.
pub async fn info() -> Result<ServerInfo, String> {
    get_json("/api/info").await
}

/// `POST /api/edit`: one counterfactual (takes seconds: an LLM runs on the server).
pub async fn edit(request: &EditRequest) -> Result<EditResponse, String> {
    post_json("/api/edit", request).await
}

/// `GET /api/datasets`.
pub async fn datasets() -> Result<Vec<DatasetInfo>, String> {
    get_json("/api/datasets").await
}

/// `POST /api/datasets`: uploads a CSV/TSV/JSONL file with the form's fields (`file`, and
/// optionally `name`, `text_col`, `label_col`, `premise_col`).
pub async fn upload_dataset(form: web_sys::FormData) -> Result<DatasetInfo, String> {
    // No Content-Type header: the browser sets it, with the multipart boundary.
    let response = Request::post("/api/datasets")
        .body(form)
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(network_error)?;
    read_json(response).await
}

/// `POST /api/jobs`.
pub async fn start_job(request: &JobRequest) -> Result<Job, String> {
    post_json("/api/jobs", request).await
}

/// `GET /api/jobs`, newest first.
pub async fn jobs() -> Result<Vec<Job>, String> {
    get_json("/api/jobs").await
}

/// `GET /api/jobs/{id}`.
pub async fn job(id: &str) -> Result<Job, String> {
    get_json(&format!("/api/jobs/{id}")).await
}

/// `POST /api/jobs/{id}/cancel`.
pub async fn cancel_job(id: &str) -> Result<Job, String> {
    let response = Request::post(&format!("/api/jobs/{id}/cancel"))
        .send()
        .await
        .map_err(network_error)?;
    read_json(response).await
}

/// `GET /api/jobs/{id}/records`: one page of a job's counterfactuals, optionally only those
/// that did (or did not) flip the label.
pub async fn records(
    id: &str,
    flipped: Option<bool>,
    offset: usize,
    limit: usize,
) -> Result<RecordPage, String> {
    let mut url = format!("/api/jobs/{id}/records?offset={offset}&limit={limit}");
    if let Some(flipped) = flipped {
        url.push_str(&format!("&flipped={flipped}"));
    }
    get_json(&url).await
}

/// The URL of a job's Server-Sent Events (`progress` events carrying the [`Job`]).
pub fn job_events_url(id: &str) -> String {
    format!("/api/jobs/{id}/events")
}

/// The URL of a job's JSONL download.
pub fn records_download_url(id: &str) -> String {
    format!("/api/jobs/{id}/records.jsonl")
}

/// Downloads a file's bytes.
pub async fn get_bytes(url: &str) -> Result<Vec<u8>, String> {
    let response = Request::get(url).send().await.map_err(network_error)?;
    if !response.ok() {
        return Err(error_message(response).await);
    }
    response.binary().await.map_err(|e| e.to_string())
}

async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let response = Request::get(url).send().await.map_err(network_error)?;
    read_json(response).await
}

async fn post_json<B: Serialize, T: DeserializeOwned>(url: &str, body: &B) -> Result<T, String> {
    let response = Request::post(url)
        .json(body)
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(network_error)?;
    read_json(response).await
}

async fn read_json<T: DeserializeOwned>(response: Response) -> Result<T, String> {
    if !response.ok() {
        return Err(error_message(response).await);
    }
    let url = response.url();
    response
        .json::<T>()
        .await
        .map_err(|e| format!("unexpected answer from {url}: {e}"))
}

/// The message of an [`ApiError`] body, or the status and body when the server sent none.
async fn error_message(response: Response) -> String {
    let status = response.status();
    let status_text = response.status_text();
    let body = response.text().await.unwrap_or_default();
    match serde_json::from_str::<ApiError>(&body) {
        Ok(error) => error.message,
        Err(_) if body.trim().is_empty() || body.trim_start().starts_with('<') => {
            format!("the server answered {status} {status_text}")
        }
        Err(_) => format!(
            "the server answered {status} {status_text}: {}",
            body.trim()
        ),
    }
}

fn network_error(error: gloo_net::Error) -> String {
    format!("could not reach the server ({error})")
}
