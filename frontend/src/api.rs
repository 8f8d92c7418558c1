//! Calls to the server's JSON API (`flipside serve`, same origin, under `/api`), typed with the
//! request and response bodies of [`flipside_shared::api`]. Every call returns the server's
//! error message as `Err(String)`, ready to show in place.

use std::cell::RefCell;
use std::collections::BTreeMap;

use flipside_shared::api::{
    ApiError, DatasetInfo, EditRequest, EditResponse, Job, JobRequest, RecordPage, RetrieveRequest,
    RetrieveResponse, ServerInfo,
};
use flipside_shared::portal::{
    AcceptInvite, Draft, Invite, InviteRequest, Lease, LoginRequest, Me, Queue, QueueRequest,
    QueueStats, ReviewItem, ReviewRequest, ReviewTask, VerdictRequest,
};
use gloo_net::http::{Request, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where the classifier's files are served, for scoring in the browser.
pub const CLASSIFIER_CONFIG: &str = "/api/classifier/config.json";
pub const CLASSIFIER_TOKENIZER: &str = "/api/classifier/tokenizer.json";
pub const CLASSIFIER_WEIGHTS: &str = "/api/classifier/model.int8.safetensors";
pub const DIS_AE_CONFIG: &str = "/api/dis-ae/config.json";
pub const DIS_AE_VOCABULARY: &str = "/api/dis-ae/tokenizer.json";
pub const DIS_AE_WEIGHTS: &str = "/api/dis-ae/model.int8.safetensors";

thread_local! {
    /// The session's CSRF token, sent with every state-changing portal request.
    static CSRF: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Keeps the CSRF token of the signed-in session (from a sign-in or `me`).
pub fn remember_session(me: &Me) {
    CSRF.with(|c| *c.borrow_mut() = me.csrf.clone());
}

/// `request` with the session's CSRF header.
fn with_csrf(request: RequestBuilder) -> RequestBuilder {
    match CSRF.with(|c| c.borrow().clone()) {
        Some(token) => request.header("x-csrf-token", &token),
        None => request,
    }
}

/// `GET /api/auth/me`: who is signed in (`None` when nobody is).
pub async fn me() -> Result<Option<Me>, String> {
    let response = Request::get("/api/auth/me")
        .send()
        .await
        .map_err(network_error)?;
    if response.status() == 401 {
        return Ok(None);
    }
    let me: Me = read_json(response).await?;
    remember_session(&me);
    Ok(Some(me))
}

/// `POST /api/auth/login`.
pub async fn login(request: &LoginRequest) -> Result<Me, String> {
    let me: Me = post_json("/api/auth/login", request).await?;
    remember_session(&me);
    Ok(me)
}

/// `POST /api/auth/logout`.
pub async fn logout() -> Result<(), String> {
    with_csrf(Request::post("/api/auth/logout"))
        .send()
        .await
        .map_err(network_error)?;
    CSRF.with(|c| *c.borrow_mut() = None);
    Ok(())
}

/// `POST /api/invites/accept`: joins the team and signs in.
pub async fn accept_invite(request: &AcceptInvite) -> Result<Me, String> {
    let me: Me = post_json("/api/invites/accept", request).await?;
    remember_session(&me);
    Ok(me)
}

/// `POST /api/teams/{team}/invites`.
pub async fn invite(team: &str, request: &InviteRequest) -> Result<Invite, String> {
    post_in_session(&format!("/api/teams/{team}/invites"), Some(request)).await
}

/// `GET /api/teams/{team}/queues`.
pub async fn queues(team: &str) -> Result<Vec<Queue>, String> {
    get_json(&format!("/api/teams/{team}/queues")).await
}

/// `POST /api/teams/{team}/queues`.
pub async fn create_queue(team: &str, request: &QueueRequest) -> Result<Queue, String> {
    post_in_session(&format!("/api/teams/{team}/queues"), Some(request)).await
}

fn queue_url(team: &str, queue: &str, rest: &str) -> String {
    format!("/api/teams/{team}/queues/{queue}{rest}")
}

/// `POST …/upload`: adds the items of a JSON-lines or CSV file (the form's `file`) to a queue.
pub async fn upload_items(
    team: &str,
    queue: &str,
    form: web_sys::FormData,
) -> Result<Queue, String> {
    post_form(&queue_url(team, queue, "/upload"), form).await
}

/// POSTs a multipart form with the session's CSRF header and reads the JSON answer. No
/// Content-Type header: the browser sets it, with the multipart boundary.
async fn post_form<T: DeserializeOwned>(url: &str, form: web_sys::FormData) -> Result<T, String> {
    let response = with_csrf(Request::post(url))
        .body(form)
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(network_error)?;
    read_json(response).await
}

/// `POST …/next`: the caller's next leased item, `None` when nothing is left for them.
pub async fn next_item(team: &str, queue: &str) -> Result<Option<Lease>, String> {
    post_in_session::<(), _>(&queue_url(team, queue, "/next"), None).await
}

/// `POST …/verdicts`; the error keeps its code (`needs_override`, `conflict`).
pub async fn decide(
    team: &str,
    queue: &str,
    request: &VerdictRequest,
) -> Result<ReviewItem, ApiError> {
    send(
        with_csrf(Request::post(&queue_url(team, queue, "/verdicts"))),
        Some(request),
    )
    .await
}

/// `POST …/undo`: the caller's last verdict, taken back, as a lease.
pub async fn undo(team: &str, queue: &str) -> Result<Lease, String> {
    post_in_session::<(), _>(&queue_url(team, queue, "/undo"), None).await
}

/// `PUT …/leases/{lease}/draft`.
pub async fn save_draft(team: &str, queue: &str, lease: &str, draft: &Draft) -> Result<(), String> {
    let url = queue_url(team, queue, &format!("/leases/{lease}/draft"));
    send_for_response(with_csrf(Request::put(&url)), draft).await?;
    Ok(())
}

/// Sends `request` with the JSON `body`; the response when it succeeded, else the server's
/// error message.
async fn send_for_response<B: Serialize>(
    request: RequestBuilder,
    body: &B,
) -> Result<Response, String> {
    let response = request
        .json(body)
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(network_error)?;
    if !response.ok() {
        return Err(error_message(response).await.message);
    }
    Ok(response)
}

/// `GET …/review/next`: the next decided item after position `after`, for the second pass.
pub async fn next_to_review(
    team: &str,
    queue: &str,
    after: Option<usize>,
) -> Result<Option<ReviewTask>, String> {
    let after = after.map_or(String::new(), |a| format!("?after={a}"));
    get_json(&queue_url(team, queue, &format!("/review/next{after}"))).await
}

/// `POST …/items/{item}/review`: confirms or overturns an outcome (409 when it changed since).
pub async fn review_item(
    team: &str,
    queue: &str,
    item: &str,
    request: &ReviewRequest,
) -> Result<ReviewItem, ApiError> {
    let url = queue_url(team, queue, &format!("/items/{item}/review"));
    send(with_csrf(Request::post(&url)), Some(request)).await
}

/// `GET …/stats`.
pub async fn queue_stats(team: &str, queue: &str) -> Result<QueueStats, String> {
    get_json(&queue_url(team, queue, "/stats")).await
}

/// The URL of a queue's export (`classifier`, `pairs` or `records`, as JSON lines).
pub fn export_url(team: &str, queue: &str, format: &str) -> String {
    queue_url(team, queue, &format!("/export?format={format}"))
}

/// `POST /api/retrieve`: label-flipped excerpts for a text, and their keywords.
pub async fn retrieve(request: &RetrieveRequest) -> Result<RetrieveResponse, String> {
    post_json("/api/retrieve", request).await
}

/// POSTs with the session's CSRF header; the error's message on failure.
async fn post_in_session<B: Serialize, T: DeserializeOwned>(
    url: &str,
    body: Option<&B>,
) -> Result<T, String> {
    send(with_csrf(Request::post(url)), body)
        .await
        .map_err(|e| e.message)
}

/// Sends `request` with an optional JSON body and reads the JSON answer.
async fn send<B: Serialize, T: DeserializeOwned>(
    request: RequestBuilder,
    body: Option<&B>,
) -> Result<T, ApiError> {
    let failed = |message: String| ApiError {
        code: "client".into(),
        message,
    };
    let request = match body {
        Some(body) => request.json(body).map_err(|e| failed(e.to_string()))?,
        None => request.build().map_err(|e| failed(e.to_string()))?,
    };
    let response = request.send().await.map_err(|e| failed(network_error(e)))?;
    if !response.ok() {
        return Err(error_message(response).await);
    }
    response
        .json::<T>()
        .await
        .map_err(|e| failed(format!("unexpected answer: {e}")))
}

/// How often the page asks again while the server prepares its models.
const PREPARING_POLL_MS: i32 = 2_000;

/// `GET /api/info`, asked again every few seconds while the server prepares its models (its
/// first run): `preparing` gets the server's account of what it is doing each time.
pub async fn info_when_ready(preparing: impl Fn(String)) -> Result<ServerInfo, String> {
    loop {
        let response = Request::get("/api/info")
            .send()
            .await
            .map_err(network_error)?;
        if response.status() != 503 {
            return read_json(response).await;
        }
        let error = error_message(response).await;
        if error.code != "preparing" {
            return Err(error.message);
        }
        preparing(error.message);
        crate::scoring::sleep_ms(PREPARING_POLL_MS).await;
    }
}

/// `POST /api/edit/stream`: the edit, with `on_text` handed each piece of an LLM editor's
/// reply as it is written (and the number of its attempt: a new attempt starts a new reply).
pub async fn edit_streaming(
    request: &EditRequest,
    mut on_text: impl FnMut(usize, &str),
) -> Result<EditResponse, String> {
    use wasm_bindgen::JsCast;
    let response = send_for_response(with_csrf(Request::post("/api/edit/stream")), request).await?;
    let body = response.body().ok_or("the edit stream has no body")?;
    let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().unchecked_into();
    let field = |object: &wasm_bindgen::JsValue, name: &str| {
        js_sys::Reflect::get(object, &name.into()).map_err(|_| "the edit stream broke".to_string())
    };
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = wasm_bindgen_futures::JsFuture::from(reader.read())
            .await
            .map_err(|_| "the edit stream broke".to_string())?;
        if field(&chunk, "done")?.as_bool().unwrap_or(true) {
            return Err("the edit stream ended without a result".into());
        }
        pending.extend(js_sys::Uint8Array::new(&field(&chunk, "value")?).to_vec());
        // Server-sent events end with a blank line; the bytes up to one are whole UTF-8.
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let (name, data) = server_sent_event(&String::from_utf8_lossy(&event));
            let unexpected = |e: serde_json::Error| format!("unexpected {name} event: {e}");
            match name.as_str() {
                "text" => {
                    let piece: WrittenPiece = serde_json::from_str(&data).map_err(unexpected)?;
                    on_text(piece.attempt, &piece.text);
                }
                "result" => return serde_json::from_str(&data).map_err(unexpected),
                "error" => {
                    let error: ApiError = serde_json::from_str(&data).map_err(unexpected)?;
                    return Err(error.message);
                }
                _ => {}
            }
        }
    }
}

/// A `text` event of the edit stream.
#[derive(serde::Deserialize)]
struct WrittenPiece {
    attempt: usize,
    text: String,
}

/// An event's name and data (its `data:` lines joined by newlines).
fn server_sent_event(event: &str) -> (String, String) {
    let mut name = String::from("message");
    let mut data: Vec<&str> = Vec::new();
    for line in event.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = value.trim().to_string();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    (name, data.join("\n"))
}

/// `GET /api/teams/{team}/datasets`: the built-ins and the team's uploads.
pub async fn datasets(team: &str) -> Result<Vec<DatasetInfo>, String> {
    get_json(&format!("/api/teams/{team}/datasets")).await
}

/// `POST /api/teams/{team}/datasets`: uploads a CSV/TSV/JSONL file with the form's fields
/// (`file`, and optionally `name`, `text_col`, `label_col`, `premise_col`).
pub async fn upload_dataset(team: &str, form: web_sys::FormData) -> Result<DatasetInfo, String> {
    post_form(&format!("/api/teams/{team}/datasets"), form).await
}

/// `DELETE /api/teams/{team}/datasets/{id}`: deletes one of the team's uploads.
pub async fn delete_dataset(team: &str, id: &str) -> Result<(), String> {
    let response = with_csrf(Request::delete(&format!("/api/teams/{team}/datasets/{id}")))
        .send()
        .await
        .map_err(network_error)?;
    if response.ok() {
        Ok(())
    } else {
        Err(error_message(response).await.message)
    }
}

fn job_url(team: &str, id: &str, rest: &str) -> String {
    format!("/api/teams/{team}/jobs/{id}{rest}")
}

/// `POST /api/teams/{team}/jobs`.
pub async fn start_job(team: &str, request: &JobRequest) -> Result<Job, String> {
    post_json(&format!("/api/teams/{team}/jobs"), request).await
}

/// `GET /api/teams/{team}/jobs`, newest first.
pub async fn jobs(team: &str) -> Result<Vec<Job>, String> {
    get_json(&format!("/api/teams/{team}/jobs")).await
}

/// `GET …/jobs/{id}`.
pub async fn job(team: &str, id: &str) -> Result<Job, String> {
    get_json(&job_url(team, id, "")).await
}

/// `POST …/jobs/{id}/cancel`.
pub async fn cancel_job(team: &str, id: &str) -> Result<Job, String> {
    post_in_session::<(), _>(&job_url(team, id, "/cancel"), None).await
}

/// `POST …/jobs/{id}/resume`: runs a failed or cancelled job again from where it stopped.
pub async fn resume_job(team: &str, id: &str) -> Result<Job, String> {
    post_in_session::<(), _>(&job_url(team, id, "/resume"), None).await
}

/// `GET …/jobs/{id}/records`: one page of a job's counterfactuals, optionally only those that
/// did (or did not) flip the label.
pub async fn records(
    team: &str,
    id: &str,
    flipped: Option<bool>,
    offset: usize,
    limit: usize,
) -> Result<RecordPage, String> {
    let mut url = job_url(team, id, &format!("/records?offset={offset}&limit={limit}"));
    if let Some(flipped) = flipped {
        url.push_str(&format!("&flipped={flipped}"));
    }
    get_json(&url).await
}

/// The URL of a job's Server-Sent Events (`progress` events carrying the [`Job`]).
pub fn job_events_url(team: &str, id: &str) -> String {
    job_url(team, id, "/events")
}

/// The URL of a job's records download: `extension` `jsonl` or `parquet`.
pub fn records_download_url(team: &str, id: &str, extension: &str) -> String {
    job_url(team, id, &format!("/records.{extension}"))
}

/// Downloads a file's bytes.
/// A model file's URL: the content-addressed one in `files` (as `GET /api/info` lists them;
/// the browser keeps it for a year), else `plain` (revalidated on each visit).
fn model_file_url(files: &BTreeMap<String, String>, plain: &str) -> String {
    let name = plain.rsplit('/').next().unwrap_or(plain);
    files
        .get(name)
        .cloned()
        .unwrap_or_else(|| plain.to_string())
}

/// Downloads a model's config, tokenizer and weights, at the URLs `files` lists for them (see
/// [`model_file_url`]).
pub async fn get_model_files(
    files: &BTreeMap<String, String>,
    [config, tokenizer, weights]: [&str; 3],
) -> Result<(Vec<u8>, Vec<u8>, Vec<u8>), String> {
    let [config, tokenizer, weights] =
        [config, tokenizer, weights].map(|plain| model_file_url(files, plain));
    futures::try_join!(
        get_bytes(&config),
        get_bytes(&tokenizer),
        get_bytes(&weights)
    )
}

pub async fn get_bytes(url: &str) -> Result<Vec<u8>, String> {
    let response = Request::get(url).send().await.map_err(network_error)?;
    if !response.ok() {
        return Err(error_message(response).await.message);
    }
    response.binary().await.map_err(|e| e.to_string())
}

async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let response = Request::get(url).send().await.map_err(network_error)?;
    read_json(response).await
}

async fn post_json<B: Serialize, T: DeserializeOwned>(url: &str, body: &B) -> Result<T, String> {
    post_in_session(url, Some(body)).await
}

async fn read_json<T: DeserializeOwned>(response: Response) -> Result<T, String> {
    if !response.ok() {
        return Err(error_message(response).await.message);
    }
    let url = response.url();
    response
        .json::<T>()
        .await
        .map_err(|e| format!("unexpected answer from {url}: {e}"))
}

/// The server's [`ApiError`] body, or one made of the status and body when it sent none.
async fn error_message(response: Response) -> ApiError {
    let status = response.status();
    let status_text = response.status_text();
    let body = response.text().await.unwrap_or_default();
    serde_json::from_str::<ApiError>(&body).unwrap_or_else(|_| ApiError {
        code: "http".into(),
        message: if body.trim().is_empty() || body.trim_start().starts_with('<') {
            format!("the server answered {status} {status_text}")
        } else {
            format!(
                "the server answered {status} {status_text}: {}",
                body.trim()
            )
        },
    })
}

fn network_error(error: gloo_net::Error) -> String {
    format!("could not reach the server ({error})")
}
