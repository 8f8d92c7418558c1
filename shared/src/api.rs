//! The HTTP API's request and response bodies, shared by `flipside serve` and the browser app so
//! that both sides agree on every field. With the `openapi` feature each type also describes
//! itself for the server's OpenAPI document.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::records::{Counterfactual, Excerpt, FailedAttempt, Timing};

/// Every error response: a stable machine-readable code and a message for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    /// Stable, snake_case (e.g. `bad_request`, `not_found`, `payload_too_large`).
    pub code: String,
    pub message: String,
}

/// `GET /api/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` once the models are loaded; `preparing` while `serve` prepares them on first run.
    pub status: String,
    pub version: String,
    /// What is being prepared, while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preparing: Option<String>,
}

/// `GET /api/info`: what the server edits with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerInfo {
    pub version: String,
    /// The LLM that makes the edits.
    pub model: String,
    pub classifier: ClassifierInfo,
    pub corpus: CorpusInfo,
    /// Examples to try in the demo.
    pub examples: Vec<Example>,
    /// The methods jobs and edits can use (the first is the default).
    pub methods: Vec<MethodInfo>,
    /// The Dis-AE the browser can download to reproduce with (LASS), if the server has one.
    #[serde(default)]
    pub dis_ae: Option<DisAeInfo>,
    /// Whether the demo needs an account (`flipside serve --private`); datasets, jobs and the
    /// portal always do.
    #[serde(default)]
    pub private: bool,
}

/// The server's Dis-AE, for generating in the browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DisAeInfo {
    pub name: String,
    /// The sentiments it writes, in its class order.
    pub labels: Vec<String>,
    pub parameters: usize,
    /// Bytes of its files over the wire (compact weights, compressed): what the browser
    /// downloads to generate itself.
    pub download_bytes: u64,
    /// Each file's content-addressed URL (`…?v=TAG`), which browsers may cache for a year.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// A counterfactual method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MethodInfo {
    pub id: MethodId,
    /// A short name for pickers.
    pub label: String,
    pub description: String,
    /// Whether it retrieves helpers from the corpus.
    pub retrieves: bool,
    /// Whether it calls the LLM.
    pub uses_llm: bool,
    /// Whether keywords guide its edits (`EditRequest.keywords` may replace them).
    pub uses_keywords: bool,
    /// Why this server cannot run it (a model it needs is not loaded); absent when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// A method's id (`GET /api/info` lists them; the OpenAPI document enumerates them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct MethodId(pub String);

impl MethodId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for MethodId {
    fn from(id: &str) -> Self {
        MethodId(id.to_string())
    }
}

impl std::fmt::Display for MethodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The classifier that scores edits (and that the browser can download).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassifierInfo {
    pub name: String,
    pub labels: Vec<String>,
    pub max_len: usize,
    /// Bytes of its files over the wire (compact weights, compressed): what the browser
    /// downloads to score texts itself.
    pub download_bytes: u64,
    /// Each file's content-addressed URL (`…?v=TAG`), which browsers may cache for a year.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// The corpus helpers are retrieved from, and its index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CorpusInfo {
    pub name: String,
    pub sentences: usize,
    pub encoder: String,
}

/// A labelled text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Example {
    pub text: String,
    pub label: String,
}

/// `POST /api/retrieve`: helpers for a text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetrieveRequest {
    pub text: String,
    /// The text's label; helpers are kept from the other label (or `target`).
    pub label: String,
    /// The label to flip to [default: the other label of a binary classifier].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Helpers per query sentence [default: 3].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
}

/// What retrieval found, and the keywords extracted from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetrieveResponse {
    pub target: String,
    /// The sentences of the text used as queries.
    pub queries: Vec<String>,
    pub excerpts: Vec<Excerpt>,
    pub keywords: Vec<String>,
    pub millis: f64,
}

/// `POST /api/edit`: one counterfactual, made as `flipside generate` and jobs make them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EditRequest {
    pub text: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The method [default: the first of `GET /api/info`'s methods, CORE].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<MethodId>,
    /// Use these keywords instead of the retrieved ones (retrieval still runs and is shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keywords: Option<Vec<String>>,
    /// Seed [default: 0]; each attempt's sampling seed is derived from it, the text and the
    /// target, as in `flipside generate --seed` and jobs, so all three make the same edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// Every step of one edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EditResponse {
    pub method: MethodId,
    pub original: String,
    pub label: String,
    pub target: String,
    /// What retrieval found (methods that retrieve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval: Option<RetrieveResponse>,
    /// The retrieved helpers' keywords (given to CORE's prompt; the request's, if it named some).
    pub keywords: Vec<String>,
    /// The counterfactual with its provenance; absent when every attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Counterfactual>,
    /// The attempts that made no counterfactual: why, and the model's reply.
    pub failures: Vec<FailedAttempt>,
    pub labels: Vec<String>,
    /// Label probabilities of the original text, in `labels` order.
    pub original_probabilities: Vec<f32>,
    /// Label probabilities of the edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_probabilities: Option<Vec<f32>>,
    /// The model that edits (empty for methods without one).
    pub model: String,
    /// Time spent in each stage, over every attempt.
    pub timing: Timing,
}

/// `POST /api/classify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassifyRequest {
    pub texts: Vec<String>,
}

/// Label probabilities, one row per text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassifyResponse {
    pub labels: Vec<String>,
    pub probabilities: Vec<Vec<f32>>,
    pub millis: f64,
}

/// A dataset jobs can run on: built in, or uploaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetInfo {
    /// What a job names it by: `imdb:test` for built-ins, a generated id for uploads.
    pub id: String,
    pub name: String,
    pub builtin: bool,
    /// Examples, when known (built-ins are counted when first used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<usize>,
    pub labels: Vec<String>,
    /// Rows skipped as unreadable while uploading.
    pub skipped: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// `POST /api/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRequest {
    /// A dataset id from `GET /api/datasets`.
    pub dataset: String,
    /// The method [default: the first of `GET /api/info`'s methods, CORE].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<MethodId>,
    /// Edit the first N examples after a seeded shuffle [default: 20].
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Skip examples with more words than this [default: 60].
    #[serde(default = "default_max_words")]
    pub max_words: Option<usize>,
    #[serde(default)]
    pub seed: u64,
    /// Keep only edits the classifier flips (others are retried).
    #[serde(default)]
    pub verify: bool,
    /// Tries per example [default: 3].
    #[serde(default = "default_max_attempts")]
    pub max_attempts: usize,
}

fn default_limit() -> usize {
    20
}

fn default_max_words() -> Option<usize> {
    Some(60)
}

fn default_max_attempts() -> usize {
    3
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl JobStatus {
    /// The name stored in the database and sent to clients.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// Parses [`JobStatus::as_str`]'s names.
    pub fn parse(name: &str) -> Option<Self> {
        [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether the job will not change any more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// A generation job and its progress (also the payload of its `progress` events).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: String,
    pub request: JobRequest,
    pub status: JobStatus,
    /// Examples × targets to edit (known once the job has started).
    pub total: usize,
    /// Finished: written or given up.
    pub done: usize,
    pub written: usize,
    pub flipped: usize,
    pub failed_attempts: usize,
    pub given_up: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A page of a longer list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordPage {
    pub records: Vec<Counterfactual>,
    /// Records matching the filter, over all pages.
    pub total: usize,
}
