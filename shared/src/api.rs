//! The HTTP API's request and response bodies, shared by `flipside serve` and the browser app so
//! that both sides agree on every field. With the `openapi` feature each type also describes
//! itself for the server's OpenAPI document.

use serde::{Deserialize, Serialize};

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
    pub status: String,
    pub version: String,
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
}

/// The classifier that scores edits (and that the browser can download).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassifierInfo {
    pub name: String,
    pub labels: Vec<String>,
    pub max_len: usize,
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

/// One retrieved helper sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Excerpt {
    /// Which query found it (an index into `queries`).
    pub query: usize,
    /// Its sentence id in the corpus.
    pub id: usize,
    pub text: String,
    /// Cosine similarity to the query.
    pub score: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// The label of the review it comes from, when the corpus knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// `POST /api/edit`: one CORE edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EditRequest {
    pub text: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Use these keywords instead of the retrieved ones (retrieval still runs and is shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keywords: Option<Vec<String>>,
    /// Sampling seed [default: 0]; another seed gives another edit (an unusable reply is
    /// retried with the next seeds, up to three tries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// Every step of one edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EditResponse {
    pub original: String,
    pub label: String,
    pub target: String,
    pub retrieval: RetrieveResponse,
    /// The keywords the prompt used.
    pub keywords: Vec<String>,
    /// The LLM's raw reply.
    pub reply: String,
    /// The edited text; absent when the reply held no usable edit (see `failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub labels: Vec<String>,
    /// Label probabilities of the original text, in `labels` order.
    pub original_probabilities: Vec<f32>,
    /// Label probabilities of the edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_probabilities: Option<Vec<f32>>,
    /// Whether the classifier gives the edit the target label.
    pub flipped: bool,
    pub model: String,
    pub timing: EditTiming,
}

/// Milliseconds per stage of an edit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EditTiming {
    pub retrieve_ms: f64,
    pub llm_ms: f64,
    pub classify_ms: f64,
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

/// How a job edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum JobMethod {
    Core,
    LlmOnly,
    RetrieveOnly,
}

/// `POST /api/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRequest {
    /// A dataset id from `GET /api/datasets`.
    pub dataset: String,
    #[serde(default = "default_method")]
    pub method: JobMethod,
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

fn default_method() -> JobMethod {
    JobMethod::Core
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

/// One counterfactual a job made (the JSONL download has every field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRecord {
    pub key: String,
    pub original: String,
    pub edited: String,
    pub label: String,
    pub target: String,
    pub prediction: String,
    pub target_probability: f32,
    pub flipped: bool,
    pub keywords: Vec<String>,
}

/// A page of a longer list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordPage {
    pub records: Vec<JobRecord>,
    /// Records matching the filter, over all pages.
    pub total: usize,
}
