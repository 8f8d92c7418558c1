//! `flipside serve`: the HTTP API (editing demo, datasets, generation jobs, the embedded LLM's
//! OpenAI-compatible endpoints and an OpenAPI document), the browser app's files, and the
//! database behind them.

pub mod admission;
pub mod app_files;
pub mod body_pace;
pub mod connections;
pub mod datasets;
pub mod db;
pub mod demo;
pub mod downloads;
pub mod error;
pub mod holding_page;
pub mod jobs;
pub mod openai_api;
pub mod portal;
pub mod preparation;
pub mod priority;
pub mod raw_answers;
pub mod request_log;
pub mod request_size;
pub mod resources;
pub mod retention;
pub mod runner;
pub mod security;
pub mod unread_body;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{any, get};
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use self::db::Db;
use self::error::ApiError;
use self::error::ApiResult;
use self::preparation::Preparation;
use self::resources::Resources;
use self::runner::JobQueue;
use crate::home::Home;

/// Everything the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    /// The models, once `serve` has prepared them.
    pub preparation: Preparation,
    pub jobs: Arc<JobQueue>,
    pub home: Home,
    /// Uploads and job checkpoints.
    pub data_dir: PathBuf,
    /// Cancelled when the server shuts down (ends the event streams).
    pub shutdown: CancellationToken,
    /// Whether the edit demo needs an account too.
    pub private: bool,
    /// Whether a proxy in front sets `X-Forwarded-For` and `X-Forwarded-Proto`.
    pub behind_proxy: bool,
    /// Turns for the expensive endpoints.
    pub admission: Arc<admission::Admission>,
    /// The most bytes of uploaded datasets a team may keep.
    pub team_quota_bytes: u64,
    /// The longest one demo edit or `/v1` completion may run.
    pub deadline: Duration,
}

impl AppState {
    /// The loaded models, or 503 `preparing` while `serve` prepares them.
    pub fn resources(&self) -> ApiResult<Arc<Resources>> {
        self.preparation.resources()
    }
}

/// How to serve.
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// `postgres://…`, or a SQLite file.
    pub database_url: String,
    pub data_dir: PathBuf,
    /// The browser app (Trunk's `dist/`); without it only the API is served.
    pub static_dir: Option<PathBuf>,
    pub max_upload_bytes: usize,
    /// The most bytes of uploaded datasets a team may keep.
    pub team_quota_bytes: u64,
    /// Whether the LLM is embedded: it is then served under `/v1` (OpenAI-compatible, for
    /// signed-in callers).
    pub embedded_llm: bool,
    /// The edit demo needs an account too (datasets, jobs and the portal always do).
    pub private: bool,
    /// Trust `X-Forwarded-For` and `X-Forwarded-Proto` from a proxy in front.
    pub behind_proxy: bool,
    /// Open connections one client address may hold (not counted behind a proxy).
    pub connections_per_client: usize,
    /// Delete uploads and finished jobs older than this; keep them when `None`.
    pub retention: Option<Duration>,
    /// The longest one demo edit or `/v1` completion may run: it then stops, and its client
    /// gets 503.
    pub deadline: Duration,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Flipside",
        description = "Counterfactual training data: retrieve, edit with an LLM, check with a \
                       classifier; a team's datasets and generation jobs; the team portal's \
                       review queues. The edit demo is open unless the server is private; \
                       everything else needs a session (cookie `flipside_session`, plus the \
                       `X-CSRF-Token` header on state-changing requests) or an API token \
                       (`Authorization: Bearer fst_…`) with the scope named. Errors are JSON \
                       `{code, message}`. While the server prepares its models on first run, \
                       what needs them answers 503 `preparing` with Retry-After (see \
                       `/health`)."
    ),
    servers((url = "/api")),
    modifiers(&SecuritySchemes),
    tags(
        (name = "editing", description = "One edit at a time: the demo"),
        (name = "datasets", description = "Built-in datasets and a team's uploads"),
        (name = "jobs", description = "A team's generation jobs: progress, cancel, results"),
        (name = "accounts", description = "Sign-in, API tokens, members and invitations"),
        (name = "review", description = "Review queues: leases, verdicts, the second pass, \
                                         the dashboard and exports"),
        (name = "server", description = "Health"),
        (name = "llm", description = "The embedded model's OpenAI-compatible API, served at \
                                      /v1 beside /api when the server embeds its LLM")
    )
)]
struct ApiDoc;

/// The document's two ways to sign in: the browser session and API tokens.
struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "session",
            utoipa::openapi::security::SecurityScheme::ApiKey(ApiKey::Cookie(
                ApiKeyValue::with_description(
                    portal::auth::SESSION_COOKIE,
                    "From POST /api/auth/login; state-changing requests also send X-CSRF-Token",
                ),
            )),
        );
        components.add_security_scheme(
            "token",
            utoipa::openapi::security::SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (fst_…) from `flipside users token` or POST /api/tokens",
                    ))
                    .build(),
            ),
        );
    }
}

/// The `/api` router and its OpenAPI document, both from the handlers.
pub fn api(max_upload_bytes: usize) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(demo::health))
        .routes(routes!(demo::info))
        .routes(routes!(demo::retrieve))
        .routes(routes!(demo::edit))
        .routes(routes!(demo::edit_stream))
        .routes(routes!(demo::classify))
        .routes(routes!(demo::classifier_file))
        .routes(routes!(demo::dis_ae_file))
        .routes(routes!(datasets::list))
        .routes(routes!(datasets::delete))
        .routes(
            routes!(datasets::upload).layer(DefaultBodyLimit::max(max_upload_bytes + (64 << 10))),
        )
        .routes(routes!(jobs::create, jobs::list))
        .routes(routes!(jobs::get, jobs::delete))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::resume))
        .routes(routes!(jobs::events))
        .routes(routes!(jobs::records))
        .routes(routes!(jobs::download))
        .routes(routes!(jobs::download_parquet))
        .merge(portal::router())
        .split_for_parts();
    enumerate_methods(&mut openapi);
    (router, openapi)
}

/// How long requests in flight may take to finish after the stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Waits for Ctrl-C or, on Unix, SIGTERM (what `kill`, systemd and Kubernetes send).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
                return;
            }
            Err(error) => tracing::warn!("cannot listen for SIGTERM: {error}"),
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Makes the document's `MethodId` schema the enum of the registered methods.
fn enumerate_methods(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    let ids: Vec<&str> = crate::methods::METHODS.iter().map(|m| m.id()).collect();
    let descriptions: Vec<String> = crate::methods::METHODS
        .iter()
        .map(|m| format!("`{}`: {}", m.id(), m.card().description))
        .collect();
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ids))
        .description(Some(format!("A method: {}.", descriptions.join("; "))))
        .build();
    if let Some(components) = openapi.components.as_mut() {
        components
            .schemas
            .insert("MethodId".to_string(), Schema::Object(schema).into());
    }
}

/// The answer to a method an endpoint does not take.
async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method (see /api/openapi.json)",
    )
}

/// Opens the database and serves until Ctrl-C, resuming unfinished jobs once `preparation` has
/// the models; `on_listening` gets the bound address. A failed preparation stops the server
/// with its error.
pub async fn serve(
    home: Home,
    config: ServerConfig,
    preparation: Preparation,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<()> {
    let db = Db::connect(&config.database_url).await?;
    tracing::info!(
        "database: {} ({})",
        db.kind(),
        db::redact(&config.database_url)
    );
    let state = AppState {
        db,
        preparation: preparation.clone(),
        jobs: Arc::new(JobQueue::default()),
        home,
        data_dir: config.data_dir.clone(),
        shutdown: CancellationToken::new(),
        private: config.private,
        behind_proxy: config.behind_proxy,
        admission: Arc::new(admission::Admission::for_this_machine()),
        team_quota_bytes: config.team_quota_bytes,
        deadline: config.deadline,
    };
    let (api, mut openapi) = api(config.max_upload_bytes);
    if config.embedded_llm {
        crate::server::openai_api::describe(&mut openapi);
    }
    let openapi = Arc::new(openapi);
    let api = api
        .route(
            "/openapi.json",
            get(move || {
                let doc = openapi.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .layer(DefaultBodyLimit::max(1 << 20));
    let mut app = Router::new().nest(
        "/api",
        api.method_not_allowed_fallback(method_not_allowed)
            .with_state(state.clone()),
    );
    if config.embedded_llm {
        let sign_in =
            axum::middleware::from_fn_with_state(state.clone(), portal::auth::require_generate);
        let admit = axum::middleware::from_fn_with_state(state.admission.clone(), admission::admit);
        app = app
            .merge(
                crate::server::openai_api::router(preparation.clone(), config.deadline)
                    .route_layer(admit)
                    .route_layer(sign_in)
                    .method_not_allowed_fallback(method_not_allowed),
            )
            .route("/health", get(|| async { "ok" }));
    }
    // The app's files, `/` its page (it routes by the URL's hash); anything else is a JSON 404,
    // and a method other than GET or HEAD a JSON 405. While the app is being built (`/` finds
    // no `index.html`), `/` is a page saying so.
    let no_file = {
        let preparation = preparation.clone();
        let has_app = config.static_dir.is_some();
        any(
            move |method: axum::http::Method, uri: axum::http::Uri| async move {
                if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
                    let error = ApiError::new(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "method_not_allowed",
                        "files are only read (GET or HEAD)",
                    );
                    return ([(header::ALLOW, "GET, HEAD")], error).into_response();
                }
                if has_app && uri.path() == "/" {
                    return holding_page::response(preparation.status()).into_response();
                }
                ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response()
            },
        )
    };
    app = match &config.static_dir {
        Some(dir) => app.fallback_service(app_files::router(dir, no_file)),
        None => app.fallback_service(no_file),
    };
    let headers = security::SecurityHeaders::for_app(config.static_dir.as_deref());
    let app = app
        // Inside the pacing: the rest of a body is read at the same pace or not at all.
        .layer(axum::middleware::from_fn(unread_body::read_unread_rest))
        .layer(axum::middleware::from_fn(body_pace::require_pace))
        .layer(axum::middleware::from_fn(request_size::check_size))
        // Inside the security headers, so that a panic's 500 carries them too.
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the server failed; see its log",
            )
            .into_response()
        }))
        .layer(axum::middleware::from_fn_with_state(
            headers,
            security::add_headers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            request_log::log_request,
        ));

    let runner = tokio::spawn(runner::run_jobs(state.clone()));
    if let Some(period) = config.retention {
        tokio::spawn(retention::keep_for(state.clone(), period));
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    on_listening(listener.local_addr()?);
    tokio::spawn({
        let (preparation, shutdown) = (preparation.clone(), state.shutdown.clone());
        async move {
            if preparation.wait().await.is_err() {
                shutdown.cancel();
            }
        }
    });
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!("shutting down; running jobs resume on the next start");
        shutdown.cancel();
    });
    let limits = connections::ConnectionLimits {
        header_timeout: connections::HEADER_TIMEOUT,
        per_client: (!config.behind_proxy).then_some(config.connections_per_client),
    };
    let server = connections::serve(listener, app, limits, state.shutdown.clone());
    // Requests in flight get a few seconds to finish; a client that stalls does not hold the
    // server up for longer.
    let stalled = async {
        state.shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = server => {}
        _ = stalled => tracing::warn!(
            "connections still open {} s after the signal; stopping anyway",
            SHUTDOWN_GRACE.as_secs()
        ),
    }
    runner.abort();
    match preparation.failure() {
        Some(error) => Err(anyhow::anyhow!(error)),
        None => Ok(()),
    }
}
