//! The OpenAI-compatible HTTP API of an embedded model: `POST /v1/chat/completions`,
//! `POST /v1/completions` and `GET /v1/models`. Requests are answered one at a time by the
//! engine (on a blocking thread); with `stream: true` the reply comes as server-sent events in
//! OpenAI's chunk format as it is written. `n > 1` is refused with a clear error.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::preparation::Preparation;
use super::priority::spawn_cancellable;
use crate::llm::{Completion, LlmClient, Message, Prompt, Request, Sampling};

/// The body of a chat or text completion request: the fields Flipside honours (any `model`
/// name is accepted, since one model is served).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct CompletionBody {
    /// Chat completions: the conversation (roles system, user and assistant). Message text is
    /// never read as the model's control tokens.
    #[serde(default)]
    messages: Option<Vec<Message>>,
    /// Text completions: a string, or an array of one string.
    #[serde(default)]
    #[schema(value_type = Value)]
    prompt: Option<Value>,
    /// In [0, 2] [default: 1].
    #[serde(default)]
    temperature: Option<f32>,
    /// In [0, 1] [default: 1].
    #[serde(default)]
    top_p: Option<f32>,
    /// Also read as `max_completion_tokens`; prompt plus completion must fit the context.
    #[serde(default, alias = "max_completion_tokens")]
    max_tokens: Option<usize>,
    #[serde(default)]
    seed: Option<u64>,
    /// A string or an array of strings.
    #[serde(default)]
    #[schema(value_type = Value)]
    stop: Option<Value>,
    /// Answer with server-sent events, OpenAI's `chat.completion.chunk` or `text_completion`
    /// chunks as the reply is written, then `[DONE]`.
    #[serde(default)]
    stream: Option<bool>,
    /// With `stream`: `include_usage` adds a last chunk with the token counts.
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Must be 1.
    #[serde(default)]
    n: Option<usize>,
}

/// What a streamed reply carries besides its text.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The `/v1` routes for the OpenAPI document (served from the root, beside `/api`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(chat, text, models),
    components(schemas(CompletionBody, StreamOptions, Message))
)]
struct V1Doc;

/// Adds the `/v1` routes to `openapi`, each with the server's root as its base.
pub fn describe(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    let v1 = V1Doc::openapi();
    for (path, mut item) in v1.paths.paths {
        item.servers = Some(vec![utoipa::openapi::Server::new("/")]);
        openapi.paths.paths.insert(path, item);
    }
    if let Some(components) = v1.components {
        openapi
            .components
            .get_or_insert_with(Default::default)
            .schemas
            .extend(components.schemas);
    }
}

/// An OpenAI-style error reply.
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = if self.status.is_client_error() {
            "invalid_request_error"
        } else {
            "server_error"
        };
        let body = json!({"error": {"message": self.message, "type": kind, "code": null}});
        (self.status, Json(body)).into_response()
    }
}

/// The served engine (the server's LLM, once prepared), and the longest one completion may
/// run (the engine then stops and the client gets 503).
#[derive(Clone)]
struct Served {
    preparation: Preparation,
    deadline: Duration,
}

impl Served {
    /// The engine, or 503 while the server prepares its models.
    fn engine(&self) -> Result<Arc<dyn LlmClient>, ApiError> {
        let resources = self.preparation.resources().map_err(|e| ApiError {
            status: e.status,
            message: e.message,
        })?;
        resources.models.llm.clone().ok_or_else(|| ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the server has no LLM".into(),
        })
    }
}

/// The router serving the server's LLM under `/v1` (`flipside serve` puts its sign-in in
/// front).
pub fn router(preparation: Preparation, deadline: Duration) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(text))
        .route("/v1/models", get(models))
        .layer(DefaultBodyLimit::max(4 << 20))
        .with_state(Served {
            preparation,
            deadline,
        })
}

/// The one model served.
#[utoipa::path(get, path = "/v1/models", tag = "llm",
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 200, description = "An OpenAI model list of one model"),
        (status = 401, description = "No session or token with the generate scope"),
        (status = 503, description = "The models are still being prepared")))]
async fn models(State(served): State<Served>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({
        "object": "list",
        "data": [{"id": served.engine()?.model(), "object": "model", "owned_by": "flipside"}]
    })))
}

/// An OpenAI chat completion (n = 1), whole or streamed. Runs until the server's deadline at most (five
/// minutes unless `serve --deadline` says otherwise); when the client leaves, generation stops.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "llm", request_body = CompletionBody,
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 200, description = "An OpenAI chat.completion, or with stream: server-sent chat.completion.chunk events"),
        (status = 400, description = "An OpenAI error: the request is invalid or too long"),
        (status = 401, description = "No session or token with the generate scope"),
        (status = 503, description = "Busy (with Retry-After), past the deadline, or the models still being prepared")))]
async fn chat(State(served): State<Served>, body: Body) -> Result<Response, ApiError> {
    let body = parse(body)?;
    let messages = body
        .messages
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("'messages' must be a non-empty array"))?;
    if let Some(odd) = messages
        .iter()
        .find(|m| !["system", "user", "assistant"].contains(&m.role.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "unknown role {:?}: use system, user or assistant",
            odd.role.chars().take(40).collect::<String>()
        )));
    }
    let engine = served.engine()?;
    let request = request(&body, Prompt::Chat(messages))?;
    if body.stream == Some(true) {
        return Ok(streamed(&served, engine, request, Endpoint::Chat, &body));
    }
    let completion = run(&served, &engine, request).await?;
    Ok(Json(json!({
        "id": format!("chatcmpl-{}", now_nanos()),
        "object": "chat.completion",
        "created": now_nanos() / 1_000_000_000,
        "model": engine.model(),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": completion.text},
            "finish_reason": completion.finish_reason,
        }],
        "usage": usage(&completion),
    }))
    .into_response())
}

/// An OpenAI text completion of `prompt` (n = 1), whole or streamed; control tokens in the prompt
/// are read as such.
#[utoipa::path(post, path = "/v1/completions", tag = "llm", request_body = CompletionBody,
    security(("session" = []), ("token" = ["generate"])),
    responses((status = 200, description = "An OpenAI text_completion, or with stream: server-sent text_completion chunk events"),
        (status = 400, description = "An OpenAI error: the request is invalid or too long"),
        (status = 401, description = "No session or token with the generate scope"),
        (status = 503, description = "Busy (with Retry-After), past the deadline, or the models still being prepared")))]
async fn text(State(served): State<Served>, body: Body) -> Result<Response, ApiError> {
    let body = parse(body)?;
    let prompt = match &body.prompt {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            items[0].as_str().unwrap_or_default().to_string()
        }
        _ => return Err(ApiError::bad_request("'prompt' must be a string")),
    };
    let engine = served.engine()?;
    let request = request(&body, Prompt::Text(prompt))?;
    if body.stream == Some(true) {
        return Ok(streamed(&served, engine, request, Endpoint::Text, &body));
    }
    let completion = run(&served, &engine, request).await?;
    Ok(Json(json!({
        "id": format!("cmpl-{}", now_nanos()),
        "object": "text_completion",
        "created": now_nanos() / 1_000_000_000,
        "model": engine.model(),
        "choices": [{
            "index": 0,
            "text": completion.text,
            "logprobs": null,
            "finish_reason": completion.finish_reason,
        }],
        "usage": usage(&completion),
    }))
    .into_response())
}

/// A request body as read: its bytes, or why it could not be read (too large: 413).
type Body = Result<Bytes, BytesRejection>;

fn parse(body: Body) -> Result<CompletionBody, ApiError> {
    let body = body.map_err(|rejection| ApiError {
        status: rejection.status(),
        message: rejection.body_text(),
    })?;
    let body: CompletionBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
    if body.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("only n=1 is supported"));
    }
    Ok(body)
}

fn request(body: &CompletionBody, prompt: Prompt) -> Result<Request, ApiError> {
    let defaults = Sampling::default();
    let sampling = Sampling {
        temperature: body.temperature.unwrap_or(1.0),
        top_p: body.top_p.unwrap_or(1.0),
        max_tokens: body.max_tokens.unwrap_or(defaults.max_tokens),
        seed: body.seed.unwrap_or(defaults.seed),
    };
    if !(0.0..=2.0).contains(&sampling.temperature) || !(0.0..=1.0).contains(&sampling.top_p) {
        return Err(ApiError::bad_request(
            "temperature must be in [0, 2] and top_p in [0, 1]",
        ));
    }
    let stop = match &body.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("'stop' must be a string or strings"))?,
        Some(_) => return Err(ApiError::bad_request("'stop' must be a string or strings")),
    };
    Ok(Request {
        prompt,
        sampling,
        stop,
        cancel: Default::default(),
    })
}

/// Runs a completion on a blocking thread. The engine stops at the next token when this future
/// is dropped (the client left) or the deadline passes.
async fn run(
    served: &Served,
    engine: &Arc<dyn LlmClient>,
    request: Request,
) -> Result<Completion, ApiError> {
    let engine = engine.clone();
    let work = spawn_cancellable(served.deadline, move |cancel| {
        engine.complete(&Request { cancel, ..request })
    });
    let Ok(joined) = work.await else {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "the model did not finish within {} s: ask for fewer max_tokens, or retry when \
                 the server is less busy",
                served.deadline.as_secs()
            ),
        });
    };
    joined
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("the model failed: {e}"),
        })?
        .map_err(|e| ApiError::bad_request(format!("{e:#}")))
}

/// Which endpoint a stream answers for.
#[derive(Debug, Clone, Copy)]
enum Endpoint {
    Chat,
    Text,
}

/// What the engine's thread hands a stream.
enum Piece {
    Text(String),
    Done(Completion),
    Failed(String),
}

/// Ends a stream's work when the stream is dropped (its client left, or it was sent): the
/// engine stops at its next token, and the deadline's timer goes.
struct StreamGuard {
    _cancel: tokio_util::sync::DropGuard,
    timer: tokio::task::AbortHandle,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// Runs `request` on a blocking thread and answers with server-sent events in OpenAI's chunk
/// format for `endpoint`, each piece of the reply as the engine writes it, then the finish
/// reason (and with `include_usage` the token counts), then `[DONE]`. Past the deadline the
/// engine stops and the stream ends with an OpenAI error event.
fn streamed(
    served: &Served,
    engine: Arc<dyn LlmClient>,
    request: Request,
    endpoint: Endpoint,
    body: &CompletionBody,
) -> Response {
    use futures_util::StreamExt;
    let include_usage = body
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let deadline = served.deadline;
    let cancel = tokio_util::sync::CancellationToken::new();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Piece>(256);
    let (object, prefix) = match endpoint {
        Endpoint::Chat => ("chat.completion.chunk", "chatcmpl"),
        Endpoint::Text => ("text_completion", "cmpl"),
    };
    let (id, created, model) = (
        format!("{prefix}-{}", now_nanos()),
        now_nanos() / 1_000_000_000,
        engine.model().to_string(),
    );
    let work = {
        let cancel = cancel.clone();
        move || {
            let request = Request { cancel, ..request };
            let mut send = |text: &str| {
                let _ = sender.blocking_send(Piece::Text(text.to_string()));
            };
            let last = match engine.complete_streaming(&request, &mut send) {
                Ok(completion) => Piece::Done(completion),
                Err(error) if error.is::<crate::llm::Abandoned>() => Piece::Failed(format!(
                    "the model did not finish within {} s: ask for fewer max_tokens, or retry \
                     when the server is less busy",
                    deadline.as_secs()
                )),
                Err(error) => Piece::Failed(format!("the model failed: {error:#}")),
            };
            let _ = sender.blocking_send(last);
        }
    };
    tokio::spawn(super::priority::spawn_compute(work));
    let timer = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            cancel.cancel();
        })
    };
    let guard = StreamGuard {
        _cancel: cancel.drop_guard(),
        timer: timer.abort_handle(),
    };
    let chunk = move |choice: Option<Value>, usage: Option<Value>| {
        let mut chunk = json!({
            "id": id, "object": object, "created": created, "model": model,
            "choices": choice.into_iter().collect::<Vec<_>>(),
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk.to_string()
    };
    let choice = move |text: &str, finish: Value| match endpoint {
        Endpoint::Chat => {
            let delta = if text.is_empty() {
                json!({})
            } else {
                json!({"content": text})
            };
            json!({"index": 0, "delta": delta, "finish_reason": finish})
        }
        Endpoint::Text => {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
        }
    };
    let opening = match endpoint {
        Endpoint::Chat => vec![chunk(
            Some(
                json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                "finish_reason": null}),
            ),
            None,
        )],
        Endpoint::Text => Vec::new(),
    };
    let events = tokio_stream::wrappers::ReceiverStream::new(receiver).flat_map(move |piece| {
        let _held = &guard;
        let data = match piece {
            Piece::Text(text) => vec![chunk(Some(choice(&text, Value::Null)), None)],
            Piece::Done(completion) => {
                let finish = json!(completion.finish_reason);
                let mut data = vec![chunk(Some(choice("", finish)), None)];
                if include_usage {
                    data.push(chunk(None, Some(usage(&completion))));
                }
                data.push("[DONE]".to_string());
                data
            }
            Piece::Failed(message) => {
                vec![
                    json!({"error": {"message": message, "type": "server_error", "code": null}})
                        .to_string(),
                ]
            }
        };
        futures_util::stream::iter(data)
    });
    let events = futures_util::stream::iter(opening)
        .chain(events)
        .map(|data| Ok::<_, std::convert::Infallible>(Event::default().data(data)));
    Sse::new(events).into_response()
}

fn usage(completion: &Completion) -> Value {
    json!({
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    })
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
