//! Large language models behind one interface: an embedded GGUF engine (llama.cpp, in-process)
//! and a client for any OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama,
//! `flipside serve`).

pub mod local;
pub mod openai;
pub mod scoring_copy;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use flipside_shared::records::Sampling;
pub use local::{LocalEngine, SCORED_TOGETHER};
pub use openai::{Api, OpenAiClient};
pub use scoring_copy::scoring_copy;

/// The default editor model: the only small model seen to make correct sentiment-flipping edits.
pub const DEFAULT_EDITOR_MODEL: &str = "qwen2.5-coder-1.5b";

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// What to complete: a conversation (formatted with the model's chat template) or raw text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Chat(Vec<Message>),
    Text(String),
}

/// A completion request.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    pub sampling: Sampling,
    /// Generation stops before the first occurrence of any of these.
    pub stop: Vec<String>,
    /// Cancelled when the caller gives up on it (the embedded engine then stops at the next
    /// token with [`Abandoned`]; e.g. through a drop guard held by a server's handler, dropped
    /// when its client leaves).
    pub cancel: CancellationToken,
}

/// The error of a completion whose caller gave up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the caller gave up on the completion")
    }
}

impl std::error::Error for Abandoned {}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// End of sequence or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

/// A model's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish_reason: FinishReason,
}

/// A request the model refused for what it is (too long for the context, invalid), as opposed
/// to a broken engine or an unreachable server: retrying the same request will not help, but
/// other requests may succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected(pub String);

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request was rejected: {}", self.0)
    }
}

impl std::error::Error for Rejected {}

/// A language model that completes prompts: the embedded engine or a server's client.
/// Implementations are shared between worker threads.
pub trait LlmClient: Send + Sync {
    /// The model's name, recorded with every output.
    fn model(&self) -> &str;

    /// Completes one request (blocking). Errors caused by the request itself are [`Rejected`].
    fn complete(&self, request: &Request) -> Result<Completion>;

    /// Completes one request as [`LlmClient::complete`] does, handing `on_text` the reply piece
    /// by piece as it is written (the pieces join into the completion's text); by default the
    /// whole reply at once.
    fn complete_streaming(
        &self,
        request: &Request,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Completion> {
        let completion = self.complete(request)?;
        on_text(&completion.text);
        Ok(completion)
    }
}

/// Scores how fluent a text is by its perplexity under a language model (LASS's filter).
pub trait Fluency: Send + Sync {
    /// The scoring model's name.
    fn model(&self) -> &str;
    /// `exp` of the mean negative log-likelihood of the text's tokens.
    fn perplexity(&self, text: &str) -> Result<f64>;
    /// The perplexity of each of `texts`, in order. An engine that scores texts faster
    /// together (texts sharing their opening, a larger batch) overrides it.
    fn perplexities(&self, texts: &[&str]) -> Vec<Result<f64>> {
        texts.iter().map(|text| self.perplexity(text)).collect()
    }
    /// A scorer for texts that come one after another and share their openings (a beam's
    /// hypotheses, then their source). An engine that can keep what it evaluated of the earlier
    /// texts for the later ones overrides it.
    fn scorer(&self) -> Box<dyn Scorer + '_> {
        Box::new(Independent(self))
    }
}

/// Scores texts in turn (see [`Fluency::scorer`]).
pub trait Scorer {
    /// The perplexity of each of `texts`, in order.
    fn perplexities(&mut self, texts: &[&str]) -> Vec<Result<f64>>;
}

/// Each call scored on its own.
struct Independent<'a, F: ?Sized>(&'a F);

impl<F: Fluency + ?Sized> Scorer for Independent<'_, F> {
    fn perplexities(&mut self, texts: &[&str]) -> Vec<Result<f64>> {
        self.0.perplexities(texts)
    }
}

/// Cuts `text` before the first occurrence of any stop string; true if one was found.
pub fn cut_at_stop(text: &mut String, stop: &[String]) -> bool {
    let first = stop
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min();
    match first {
        Some(at) => {
            text.truncate(at);
            true
        }
        None => false,
    }
}

/// How much of `text`, a reply so far (already cut at its stop strings), can no longer change
/// as more is written: all but a tail that may be the start of a stop string, or of a character
/// whose bytes have not all come (decoded as U+FFFD).
pub fn settled_len(text: &str, stop: &[String]) -> usize {
    let undecoded = text.len() - text.trim_end_matches('\u{fffd}').len();
    let open = stop
        .iter()
        .flat_map(|s| s.char_indices().skip(1).map(|(at, _)| &s[..at]))
        .filter(|prefix| text.ends_with(prefix))
        .map(str::len)
        .max()
        .unwrap_or(0);
    text.len() - undecoded.max(open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_that_may_start_a_stop_string_or_a_character_is_not_settled() {
        let stop = ["\n\nReview:".to_string()];
        assert_eq!(settled_len("one two", &stop), 7);
        assert_eq!(settled_len("one two\n", &stop), 7);
        assert_eq!(settled_len("one two\n\nRev", &stop), 7);
        assert_eq!(settled_len("one two\nx", &stop), 9);
        assert_eq!(settled_len("caf\u{fffd}", &[]), 3);
        assert_eq!(settled_len("", &stop), 0);
    }

    #[test]
    fn cuts_at_the_earliest_stop_string() {
        let mut text = "one\n\ntwo Review: three".to_string();
        assert!(cut_at_stop(
            &mut text,
            &["Review:".to_string(), "\n\n".to_string()]
        ));
        assert_eq!(text, "one");
        let mut text = "no stop here".to_string();
        assert!(!cut_at_stop(&mut text, &["".to_string(), "x".to_string()]));
        assert_eq!(text, "no stop here");
    }
}
