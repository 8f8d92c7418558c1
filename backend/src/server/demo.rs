//! The editing demo's endpoints: server info, retrieval, one edit with every intermediate step
//! (the pipeline's [`Pipeline::edit_in_context`], as `generate` and jobs run it),
//! classification, and the classifier's files for scoring in the browser.
//!
//! [`Pipeline::edit_in_context`]: crate::pipeline::Pipeline::edit_in_context

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use flipside_shared::api::{
    ApiError as ErrorBody, ClassifyRequest, ClassifyResponse, EditRequest, EditResponse, Health,
    MethodId, RetrieveRequest, RetrieveResponse, ServerInfo,
};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::admission::Turn;
use super::error::{ApiError, ApiResult, JsonBody, QueryParams};
use super::portal::auth::DemoAccess;
use super::priority::{blocking, finished, spawn_cancellable};
use super::resources::{Resources, check_text, demo_examples};
use crate::methods::core::RetrievalContext;
use crate::methods::{self, Method, method_infos};
use crate::pipeline::{Context, Item, WrittenText};

/// Most texts per classify request.
pub const MAX_CLASSIFY_TEXTS: usize = 64;
/// Whether the server is up, and whether its models are loaded yet.
#[utoipa::path(get, path = "/health", tag = "server", responses((status = 200, body = Health)))]
pub async fn health(State(state): State<AppState>) -> Json<Health> {
    let preparing = state.preparation.status();
    Json(Health {
        status: if preparing.is_some() {
            "preparing"
        } else {
            "ok"
        }
        .into(),
        version: env!("CARGO_PKG_VERSION").into(),
        preparing,
    })
}

/// The models the server edits with, and examples to try.
#[utoipa::path(get, path = "/info", tag = "editing", responses((status = 200, body = ServerInfo)))]
pub async fn info(State(state): State<AppState>) -> ApiResult<Json<ServerInfo>> {
    let resources = state.resources()?;
    Ok(Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        model: resources.llm_name().to_string(),
        classifier: resources.classifier_info.clone(),
        corpus: resources.corpus.clone(),
        examples: demo_examples(),
        methods: method_infos(&resources.models),
        dis_ae: resources.dis_ae.as_ref().map(|(_, info)| info.clone()),
        private: state.private,
    }))
}

/// Retrieves label-flipped helper sentences for a text and extracts their keywords.
#[utoipa::path(post, path = "/retrieve", tag = "editing", request_body = RetrieveRequest,
    responses((status = 200, body = RetrieveResponse), (status = 400, body = ErrorBody)))]
pub async fn retrieve(
    _: DemoAccess,
    State(state): State<AppState>,
    JsonBody(request): JsonBody<RetrieveRequest>,
) -> ApiResult<Json<RetrieveResponse>> {
    let (resources, _turn, item) = admit(
        &state,
        &request.text,
        &request.label,
        request.target.as_deref(),
    )
    .await?;
    if request.k.is_some_and(|k| !(1..=20).contains(&k)) {
        return Err(ApiError::bad_request("k must be between 1 and 20"));
    }
    let response = blocking(move || {
        let context = RetrievalContext::new(&resources.models, &resources.settings)
            .retrieve(&item, request.k)?;
        Ok(retrieve_response(&item, context))
    })
    .await?;
    Ok(Json(response))
}

/// Makes one counterfactual with a method (CORE by default: retrieve helpers, extract keywords
/// or use the given ones, edit with the LLM), and scores the original and the edit. Runs until
/// the server's deadline at most; when the client leaves, the edit stops.
#[utoipa::path(post, path = "/edit", tag = "editing", request_body = EditRequest,
    responses((status = 200, body = EditResponse), (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "Busy (with Retry-After), or past the deadline")))]
pub async fn edit(
    _: DemoAccess,
    State(state): State<AppState>,
    JsonBody(request): JsonBody<EditRequest>,
) -> ApiResult<Json<EditResponse>> {
    let edit = Admitted::edit(&state, request).await?;
    let work = spawn_cancellable(state.deadline, move |cancel| edit.run(cancel, None));
    let Ok(joined) = work.await else {
        return Err(past_deadline(&state));
    };
    Ok(Json(finished(joined)?))
}

/// [`edit`] as server-sent events, for a page that shows an LLM's edit as it is written:
/// `text` events (`{attempt, text}`: each new piece of the editor's reply; a new attempt starts
/// a new reply), then one `result` event (the [`EditResponse`]) or one `error` event (an API
/// error body). A client that leaves stops the edit.
#[utoipa::path(post, path = "/edit/stream", tag = "editing", request_body = EditRequest,
    responses((status = 200, content_type = "text/event-stream", description = "text events, then a result or an error event"),
        (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "Busy (with Retry-After)")))]
pub async fn edit_stream(
    _: DemoAccess,
    State(state): State<AppState>,
    JsonBody(request): JsonBody<EditRequest>,
) -> ApiResult<Response> {
    let edit = Admitted::edit(&state, request).await?;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let pieces = sender.clone();
    let written = WrittenText(Arc::new(move |attempt, piece| {
        let _ = pieces.send(event("text", &json!({"attempt": attempt, "text": piece})));
    }));
    let deadline = state.deadline;
    tokio::spawn(async move {
        let work = spawn_cancellable(deadline, move |cancel| edit.run(cancel, Some(written)));
        // Dropping the work (the client left) cancels the edit.
        let outcome = tokio::select! {
            outcome = work => outcome,
            () = sender.closed() => return,
        };
        let last = match outcome
            .map_err(|_| past_deadline(&state))
            .and_then(finished)
        {
            Ok(response) => event("result", &response),
            Err(error) => event("error", &error.body()),
        };
        let _ = sender.send(last);
    });
    let events = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver)
        .map(Ok::<_, std::convert::Infallible>);
    Ok(Sse::new(events).into_response())
}

/// A server-sent event named `name` with `data` as JSON.
fn event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
}

fn past_deadline(state: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "deadline",
        format!(
            "the edit did not finish within {} s: try a shorter text, or retry when the server \
             is less busy",
            state.deadline.as_secs()
        ),
    )
}

/// The loaded models, one of the server's turns (waited for), and the item of `text` with its
/// labels: what every request that edits or retrieves starts from.
async fn admit(
    state: &AppState,
    text: &str,
    label: &str,
    target: Option<&str>,
) -> ApiResult<(Arc<Resources>, Turn, Item)> {
    let resources = state.resources()?;
    let turn = state.admission.enter().await?;
    let item = item(&resources, text, label, target)?;
    Ok((resources, turn, item))
}

/// An edit request that passed the checks and holds one of the server's turns.
struct Admitted {
    resources: Arc<Resources>,
    method: &'static dyn Method,
    item: Item,
    request: EditRequest,
    _turn: Turn,
}

impl Admitted {
    /// Waits for a turn and checks `request`: the text, labels, method and keywords.
    async fn edit(state: &AppState, request: EditRequest) -> ApiResult<Self> {
        let (resources, turn, item) = admit(
            state,
            &request.text,
            &request.label,
            request.target.as_deref(),
        )
        .await?;
        if let Some(words) = &request.keywords
            && (words.len() > 50 || words.iter().any(|w| w.trim().is_empty() || w.len() > 100))
        {
            return Err(ApiError::bad_request(
                "keywords: at most 50, each 1 to 100 characters",
            ));
        }
        let method = match &request.method {
            Some(id) => {
                methods::method(id.as_str()).map_err(|e| ApiError::bad_request(e.to_string()))?
            }
            None => methods::METHODS[0],
        };
        methods::check_models(method, &resources.models)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if request.keywords.is_some() && !method.card().uses_keywords {
            return Err(ApiError::bad_request(format!(
                "keywords: the {} method takes none",
                method.id()
            )));
        }
        Ok(Admitted {
            resources,
            method,
            item,
            request,
            _turn: turn,
        })
    }

    fn run(
        self,
        cancel: CancellationToken,
        written: Option<WrittenText>,
    ) -> anyhow::Result<EditResponse> {
        edit_item(
            &self.resources,
            self.method,
            self.item,
            self.request,
            cancel,
            written,
        )
    }
}

/// Label probabilities of texts by the server's classifier.
#[utoipa::path(post, path = "/classify", tag = "editing", request_body = ClassifyRequest,
    responses((status = 200, body = ClassifyResponse), (status = 400, body = ErrorBody)))]
pub async fn classify(
    _: DemoAccess,
    State(state): State<AppState>,
    JsonBody(request): JsonBody<ClassifyRequest>,
) -> ApiResult<Json<ClassifyResponse>> {
    let resources = state.resources()?;
    let _turn = state.admission.enter().await?;
    if request.texts.is_empty() || request.texts.len() > MAX_CLASSIFY_TEXTS {
        return Err(ApiError::bad_request(format!(
            "texts: 1 to {MAX_CLASSIFY_TEXTS} texts"
        )));
    }
    for text in &request.texts {
        check_text(text)?;
    }
    let response = blocking(move || {
        let started = Instant::now();
        let probabilities = resources.probabilities(&request.texts)?;
        Ok(ClassifyResponse {
            labels: resources.classifier_info.labels.clone(),
            probabilities,
            millis: started.elapsed().as_secs_f64() * 1e3,
        })
    })
    .await?;
    Ok(Json(response))
}

/// The classifier's files (`config.json`, `tokenizer.json`, and the weights in their compact
/// int8 form, `model.int8.safetensors`), gzip-compressed, for scoring in the browser.
#[utoipa::path(get, path = "/classifier/{file}", tag = "editing",
    params(("file" = String, Path, description = "config.json, tokenizer.json or model.int8.safetensors"), FileVersion),
    responses((status = 200, description = "the file"), (status = 206, description = "a byte range of it"),
        (status = 304, description = "not modified (If-None-Match)"), (status = 404, body = ErrorBody),
        (status = 416, body = ErrorBody)))]
pub async fn classifier_file(
    _: DemoAccess,
    State(state): State<AppState>,
    Path(file): Path<String>,
    QueryParams(version): QueryParams<FileVersion>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let version = version.v;
    state
        .resources()?
        .classifier_downloads
        .response(&file, version.as_deref(), &headers)
}

/// The `v` of a model file's content-addressed URL (as `GET /api/info` lists them).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FileVersion {
    /// The file's content tag: when it is the current one, the answer may be cached for a year.
    v: Option<String>,
}

/// The Dis-AE's files (`config.json`, `tokenizer.json`, `model.int8.safetensors`,
/// `lass.json`), gzip-compressed, for generating in the browser.
#[utoipa::path(get, path = "/dis-ae/{file}", tag = "editing",
    params(("file" = String, Path, description = "config.json, tokenizer.json, model.int8.safetensors or lass.json"), FileVersion),
    responses((status = 200, description = "the file"), (status = 206, description = "a byte range of it"),
        (status = 304, description = "not modified (If-None-Match)"), (status = 404, body = ErrorBody),
        (status = 416, body = ErrorBody)))]
pub async fn dis_ae_file(
    _: DemoAccess,
    State(state): State<AppState>,
    Path(file): Path<String>,
    QueryParams(version): QueryParams<FileVersion>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let version = version.v;
    let resources = state.resources()?;
    let Some((downloads, _)) = &resources.dis_ae else {
        return Err(ApiError::not_found(
            "a Dis-AE: the server has none (train one with `flipside lass train`, then serve \
             with --dis-ae DIR)"
                .to_string(),
        ));
    };
    downloads.response(&file, version.as_deref(), &headers)
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

fn retrieve_response(item: &Item, context: Context) -> RetrieveResponse {
    let retrieval = context.retrieval.unwrap_or_default();
    RetrieveResponse {
        target: item.target.clone(),
        queries: retrieval.queries,
        excerpts: retrieval.excerpts,
        keywords: retrieval.keywords,
        millis: context.millis,
    }
}

/// One counterfactual of `item` by `method`, with the server's settings: the same pipeline,
/// seeds and attempts as `flipside generate` and jobs.
fn edit_item(
    resources: &Resources,
    method: &'static dyn Method,
    item: Item,
    request: EditRequest,
    cancel: CancellationToken,
    written: Option<WrittenText>,
) -> anyhow::Result<EditResponse> {
    let pipeline = methods::pipeline(method, &resources.models, &resources.settings)?;
    pipeline.check(&[&item])?;
    let found = pipeline.context_for(&item)?;
    let mut context = Context {
        cancel,
        written,
        ..found.clone()
    };
    if let (Some(words), Some(retrieval)) = (request.keywords, context.retrieval.as_mut()) {
        retrieval.keywords = words;
    }
    let keywords = context
        .retrieval
        .as_ref()
        .map(|r| r.keywords.clone())
        .unwrap_or_default();
    let seed = request.seed.unwrap_or(0);
    let outcome = pipeline.edit_in_context(&item, context, seed, 1, &mut |_| Ok(()))?;
    let original_probabilities = resources
        .probabilities(std::slice::from_ref(&item.text))?
        .remove(0);
    Ok(EditResponse {
        method: MethodId::from(method.id()),
        retrieval: found
            .retrieval
            .is_some()
            .then(|| retrieve_response(&item, found)),
        keywords,
        edited_probabilities: outcome.verdict.map(|v| v.probabilities),
        record: outcome.record,
        failures: outcome.failures,
        labels: resources.classifier_info.labels.clone(),
        original_probabilities,
        model: pipeline.editor.model().unwrap_or_default().to_string(),
        timing: outcome.timing,
        original: item.text,
        label: item.label,
        target: item.target,
    })
}
