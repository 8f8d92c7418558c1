//! The editing demo's endpoints: server info, retrieval, one CORE edit with every intermediate
//! step, classification, and the classifier's files for scoring in the browser.

use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use flipside_shared::api::{
    ApiError as ErrorBody, ClassifyRequest, ClassifyResponse, EditRequest, EditResponse,
    EditTiming, Health, RetrieveRequest, RetrieveResponse, ServerInfo,
};
use flipside_shared::data::Input;

use super::AppState;
use super::error::{ApiError, ApiResult, JsonBody};
use super::resources::{Resources, demo_examples};
use crate::editing::generate::edit_once;
use crate::editing::keywords::keywords;
use crate::editing::prompts::Task;
use crate::editing::retrieve::{Item, Retrieval};
use crate::llm::Sampling;

/// Most characters of a text to edit or classify.
pub const MAX_TEXT_CHARS: usize = 5_000;
/// Most texts per classify request.
pub const MAX_CLASSIFY_TEXTS: usize = 64;
/// LLM calls per edit request before the failure is reported.
const EDIT_ATTEMPTS: u64 = 3;
/// Keywords per prompt, as `flipside generate` uses by default.
const MAX_KEYWORDS: usize = 12;
/// The files of the classifier the browser downloads.
const CLASSIFIER_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Whether the server is up.
#[utoipa::path(get, path = "/health", tag = "server", responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// The models the server edits with, and examples to try.
#[utoipa::path(get, path = "/info", tag = "editing", responses((status = 200, body = ServerInfo)))]
pub async fn info(State(state): State<AppState>) -> Json<ServerInfo> {
    let resources = &state.resources;
    Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        model: resources.editor.model().to_string(),
        classifier: resources.classifier_info.clone(),
        corpus: resources.corpus.clone(),
        examples: demo_examples(),
    })
}

/// Retrieves label-flipped helper sentences for a text and extracts their keywords.
#[utoipa::path(post, path = "/retrieve", tag = "editing", request_body = RetrieveRequest,
    responses((status = 200, body = RetrieveResponse), (status = 400, body = ErrorBody)))]
pub async fn retrieve(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<RetrieveRequest>,
) -> ApiResult<Json<RetrieveResponse>> {
    let item = item(
        &state.resources,
        &request.text,
        &request.label,
        request.target.as_deref(),
    )?;
    let k = request.k.unwrap_or(state.resources.retrieval.per_query);
    if !(1..=20).contains(&k) {
        return Err(ApiError::bad_request("k must be between 1 and 20"));
    }
    let resources = state.resources.clone();
    let response = blocking(move || retrieve_for(&resources, &item, Some(k))).await?;
    Ok(Json(response))
}

/// Makes one CORE edit: retrieve helpers, extract keywords (or use the given ones), edit with
/// the LLM, score the original and the edit with the classifier.
#[utoipa::path(post, path = "/edit", tag = "editing", request_body = EditRequest,
    responses((status = 200, body = EditResponse), (status = 400, body = ErrorBody)))]
pub async fn edit(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<EditRequest>,
) -> ApiResult<Json<EditResponse>> {
    let item = item(
        &state.resources,
        &request.text,
        &request.label,
        request.target.as_deref(),
    )?;
    if let Some(words) = &request.keywords
        && (words.len() > 50 || words.iter().any(|w| w.trim().is_empty() || w.len() > 100))
    {
        return Err(ApiError::bad_request(
            "keywords: at most 50, each 1 to 100 characters",
        ));
    }
    let resources = state.resources.clone();
    let response = blocking(move || edit_item(&resources, item, request)).await?;
    Ok(Json(response))
}

/// Label probabilities of texts by the server's classifier.
#[utoipa::path(post, path = "/classify", tag = "editing", request_body = ClassifyRequest,
    responses((status = 200, body = ClassifyResponse), (status = 400, body = ErrorBody)))]
pub async fn classify(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<ClassifyRequest>,
) -> ApiResult<Json<ClassifyResponse>> {
    if request.texts.is_empty() || request.texts.len() > MAX_CLASSIFY_TEXTS {
        return Err(ApiError::bad_request(format!(
            "texts: 1 to {MAX_CLASSIFY_TEXTS} texts"
        )));
    }
    for text in &request.texts {
        check_text(text)?;
    }
    let resources = state.resources.clone();
    let response = blocking(move || {
        let started = Instant::now();
        let probabilities = probabilities(&resources, &request.texts)?;
        Ok(ClassifyResponse {
            labels: resources.classifier_info.labels.clone(),
            probabilities,
            millis: started.elapsed().as_secs_f64() * 1e3,
        })
    })
    .await?;
    Ok(Json(response))
}

/// The classifier's files (`config.json`, `tokenizer.json`, `model.safetensors`), for scoring
/// in the browser.
#[utoipa::path(get, path = "/classifier/{file}", tag = "editing",
    params(("file" = String, Path, description = "config.json, tokenizer.json or model.safetensors")),
    responses((status = 200, description = "the file"), (status = 404, body = ErrorBody)))]
pub async fn classifier_file(
    State(state): State<AppState>,
    Path(file): Path<String>,
) -> ApiResult<impl IntoResponse> {
    if !CLASSIFIER_FILES.contains(&file.as_str()) {
        return Err(ApiError::not_found(format!(
            "classifier file {file:?} (there are {})",
            CLASSIFIER_FILES.join(", ")
        )));
    }
    let bytes = tokio::fs::read(state.resources.classifier_dir.join(&file))
        .await
        .map_err(|e| ApiError::internal(e.into()))?;
    let content_type = if file.ends_with(".json") {
        "application/json"
    } else {
        "application/octet-stream"
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    ))
}

/// Runs model code on a blocking thread; its errors and panics become 500s.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(ApiError::internal),
        Err(panic) => Err(ApiError::internal(anyhow::anyhow!(
            "a worker panicked: {panic}"
        ))),
    }
}

fn check_text(text: &str) -> ApiResult<()> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("text is empty"));
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(ApiError::bad_request(format!(
            "text is longer than {MAX_TEXT_CHARS} characters"
        )));
    }
    Ok(())
}

/// The item to edit, or a 400 saying what is wrong with the request.
fn item(resources: &Resources, text: &str, label: &str, target: Option<&str>) -> ApiResult<Item> {
    check_text(text)?;
    let target = resources
        .target(label, target)
        .map_err(ApiError::bad_request)?;
    Ok(Item {
        id: "demo".into(),
        text: text.trim().to_string(),
        premise: None,
        label: label.to_string(),
        target,
    })
}

fn retrieve_for(
    resources: &Resources,
    item: &Item,
    k: Option<usize>,
) -> anyhow::Result<RetrieveResponse> {
    let k = k.unwrap_or(resources.retrieval.per_query);
    let retrieval = resources
        .retriever
        .lock()
        .unwrap()
        .retrieve_top(std::slice::from_ref(item), &resources.lexicons, k)?
        .remove(0);
    Ok(response_of(resources, item, retrieval))
}

fn response_of(resources: &Resources, item: &Item, retrieval: Retrieval) -> RetrieveResponse {
    let excerpts: Vec<&str> = retrieval.excerpts.iter().map(|e| e.text.as_str()).collect();
    let keywords = keywords(
        &excerpts,
        &resources.lexicons,
        Task::Sentiment,
        MAX_KEYWORDS,
    );
    RetrieveResponse {
        target: item.target.clone(),
        queries: retrieval.queries,
        excerpts: retrieval.excerpts,
        keywords,
        millis: retrieval.millis,
    }
}

fn probabilities(resources: &Resources, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
    let classifier = resources.classifier.lock().unwrap();
    let inputs: Vec<Input> = texts.iter().map(|t| Input::with_premise(None, t)).collect();
    let width = classifier.config.labels.len();
    let flat = classifier.predict_batch(&inputs.iter().collect::<Vec<_>>())?;
    Ok(flat.chunks(width).map(<[f32]>::to_vec).collect())
}

fn edit_item(
    resources: &Resources,
    item: Item,
    request: EditRequest,
) -> anyhow::Result<EditResponse> {
    let retrieval = retrieve_for(resources, &item, None)?;
    let keywords = request
        .keywords
        .clone()
        .unwrap_or_else(|| retrieval.keywords.clone());
    let seed = request.seed.unwrap_or(0);
    let (mut edited, mut failure, mut reply, mut llm_ms) = (None, None, String::new(), 0.0);
    if keywords.is_empty() {
        failure = Some("retrieval found no keywords: add some and re-run".to_string());
    }
    // Up to three tries with successive seeds, as `generate` retries unusable replies.
    for attempt in 0..EDIT_ATTEMPTS {
        if keywords.is_empty() {
            break;
        }
        let sampling = Sampling {
            seed: seed + attempt,
            ..Sampling::default()
        };
        let started = Instant::now();
        let outcome = edit_once(
            &*resources.editor,
            &resources.template,
            &item,
            Some(&keywords),
            sampling,
        )?;
        llm_ms += started.elapsed().as_secs_f64() * 1e3;
        match outcome {
            Ok(edit) => {
                (edited, failure, reply) = (Some(edit.text), None, edit.reply);
                break;
            }
            Err((reason, raw)) => (failure, reply) = (Some(reason), raw.unwrap_or_default()),
        }
    }
    let started = Instant::now();
    let mut texts = vec![item.text.clone()];
    texts.extend(edited.clone());
    let mut scores = probabilities(resources, &texts)?;
    let classify_ms = started.elapsed().as_secs_f64() * 1e3;
    let labels = resources.classifier_info.labels.clone();
    let edited_probabilities = (scores.len() == 2).then(|| scores.remove(1));
    let target = labels.iter().position(|l| *l == item.target).unwrap_or(0);
    let flipped = edited_probabilities
        .as_ref()
        .is_some_and(|p| flipside_shared::metrics::argmax_rows(p, labels.len())[0] == target);
    Ok(EditResponse {
        original: item.text,
        label: item.label,
        target: item.target,
        timing: EditTiming {
            retrieve_ms: retrieval.millis,
            llm_ms,
            classify_ms,
        },
        retrieval,
        keywords,
        reply,
        edited,
        failure,
        labels,
        original_probabilities: scores.remove(0),
        edited_probabilities,
        flipped,
        model: resources.editor.model().to_string(),
    })
}
