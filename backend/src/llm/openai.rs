//! A client for OpenAI-compatible servers: `/v1/chat/completions` and the legacy
//! `/v1/completions`. The same protocol is spoken by OpenAI, vLLM, the llama.cpp server, Ollama
//! and `flipside serve`.
//!
//! Rate limits (429), server errors (5xx), timeouts and dropped connections are retried with
//! exponential backoff (honouring `Retry-After`); other errors are reported at once with the
//! server's message. Concurrency is bounded by the caller's worker threads.

use std::fmt;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Completion, FinishReason, LlmClient, Prompt, Rejected, Request};

/// Which endpoint requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions` (prompts are sent as messages)
    Chat,
    /// `/v1/completions` (prompts are sent as text; chats are flattened)
    Completions,
}

/// Where the server is and how to talk to it.
#[derive(Clone)]
pub struct ClientOptions {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub api: Api,
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u32,
    /// The first retry's wait; each later one doubles it.
    pub backoff: Duration,
}

impl fmt::Debug for ClientOptions {
    /// Never prints the API key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api", &self.api)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

/// An OpenAI-compatible HTTP client.
#[derive(Debug)]
pub struct OpenAiClient {
    options: ClientOptions,
    http: Client,
}

/// One failed attempt: whether trying again may help, and how long the server asked us to wait.
struct AttemptError {
    error: anyhow::Error,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl OpenAiClient {
    pub fn new(options: ClientOptions) -> Result<Self> {
        let http = Client::builder()
            .timeout(options.timeout)
            .build()
            .context("cannot create the HTTP client")?;
        Ok(OpenAiClient { options, http })
    }

    fn url(&self) -> String {
        let base = self.options.base_url.trim_end_matches('/');
        match self.options.api {
            Api::Chat => format!("{base}/chat/completions"),
            Api::Completions => format!("{base}/completions"),
        }
    }

    fn body(&self, request: &Request) -> Value {
        let s = request.sampling;
        let mut body = json!({
            "model": self.options.model,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "seed": s.seed,
        });
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        match (self.options.api, &request.prompt) {
            (Api::Chat, Prompt::Chat(messages)) => body["messages"] = json!(messages),
            (Api::Chat, Prompt::Text(text)) => {
                body["messages"] = json!([{"role": "user", "content": text}])
            }
            (Api::Completions, Prompt::Text(text)) => body["prompt"] = json!(text),
            (Api::Completions, Prompt::Chat(messages)) => {
                let text: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
                body["prompt"] = json!(text.join("\n\n"));
            }
        }
        body
    }

    fn attempt(&self, body: &Value) -> Result<Completion, AttemptError> {
        let mut call = self.http.post(self.url()).json(body);
        if let Some(key) = &self.options.api_key {
            call = call.bearer_auth(key);
        }
        let response = call.send().map_err(|e| AttemptError {
            retryable: e.is_timeout() || e.is_connect() || e.is_request(),
            error: anyhow!("request to {} failed: {e}", self.url()),
            retry_after: None,
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(&response);
            let message = error_message(response);
            let rejected = matches!(status.as_u16(), 400 | 413 | 422);
            return Err(AttemptError {
                retryable: status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error(),
                error: if rejected {
                    Rejected(format!("{status}: {message}")).into()
                } else {
                    anyhow!("{} answered {status}: {message}", self.url())
                },
                retry_after,
            });
        }
        let reply: Reply = response.json().map_err(|e| AttemptError {
            retryable: true,
            error: anyhow!("unreadable reply from {}: {e}", self.url()),
            retry_after: None,
        })?;
        reply.into_completion().map_err(|error| AttemptError {
            retryable: false,
            error,
            retry_after: None,
        })
    }
}

impl LlmClient for OpenAiClient {
    fn model(&self) -> &str {
        &self.options.model
    }

    fn complete(&self, request: &Request) -> Result<Completion> {
        let body = self.body(request);
        let mut wait = self.options.backoff;
        for attempt in 0..=self.options.retries {
            match self.attempt(&body) {
                Ok(completion) => return Ok(completion),
                Err(failure) if failure.retryable && attempt < self.options.retries => {
                    let pause = failure
                        .retry_after
                        .unwrap_or(wait)
                        .min(Duration::from_secs(60));
                    tracing::warn!(
                        "{:#}; retrying in {:.1} s ({}/{})",
                        failure.error,
                        pause.as_secs_f64(),
                        attempt + 1,
                        self.options.retries
                    );
                    std::thread::sleep(pause);
                    wait *= 2;
                }
                Err(failure) => return Err(failure.error),
            }
        }
        bail!("unreachable: the retry loop returns")
    }
}

fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let seconds: f64 = value.to_str().ok()?.trim().parse().ok()?;
    (seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// The `error.message` of an OpenAI-style error body, or the body itself.
fn error_message(response: Response) -> String {
    let body = response.text().unwrap_or_default();
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.chars().take(500).collect())
}

/// The parts of chat and text completion replies that Flipside reads.
#[derive(Debug, Deserialize)]
struct Reply {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ReplyMessage>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ReplyMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: usize,
    #[serde(default)]
    completion_tokens: usize,
}

impl Reply {
    fn into_completion(self) -> Result<Completion> {
        let choice = self
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("the reply has no choices"))?;
        let text = choice
            .message
            .and_then(|m| m.content)
            .or(choice.text)
            .ok_or_else(|| anyhow!("the reply's choice has neither message content nor text"))?;
        let usage = self.usage.unwrap_or(Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
        });
        Ok(Completion {
            text,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            finish_reason: match choice.finish_reason.as_deref() {
                Some("length") => FinishReason::Length,
                _ => FinishReason::Stop,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_chat_and_text_replies() {
        let chat: Reply = serde_json::from_value(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        }))
        .unwrap();
        let completion = chat.into_completion().unwrap();
        assert_eq!(completion.text, "hi");
        assert_eq!(completion.finish_reason, FinishReason::Length);
        assert_eq!(completion.prompt_tokens, 5);
        let text: Reply = serde_json::from_value(
            json!({"choices": [{"text": "there", "finish_reason": "stop"}]}),
        )
        .unwrap();
        assert_eq!(text.into_completion().unwrap().text, "there");
        let empty: Reply = serde_json::from_value(json!({"choices": []})).unwrap();
        assert!(empty.into_completion().is_err());
    }

    /// A server on loopback that answers each request with the next of `replies` (status, body)
    /// and counts requests; returns its base URL.
    fn scripted_server(
        replies: Vec<(u16, Value)>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let count = Arc::new(AtomicUsize::new(0));
        let replies = Arc::new(Mutex::new(replies.into_iter()));
        let (counter, script) = (count.clone(), replies.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (counter, script) = (counter.clone(), script.clone());
                async move {
                    assert_eq!(body["messages"][0]["content"], "hi");
                    counter.fetch_add(1, Ordering::SeqCst);
                    let (status, reply) = script.lock().unwrap().next().expect("a reply");
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        axum::Json(reply),
                    )
                }
            }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        (format!("http://{address}/v1"), count)
    }

    fn client(base_url: String, retries: u32) -> OpenAiClient {
        OpenAiClient::new(ClientOptions {
            base_url,
            model: "m".into(),
            api_key: Some("sk-test".into()),
            api: Api::Chat,
            timeout: Duration::from_secs(10),
            retries,
            backoff: Duration::from_millis(5),
        })
        .unwrap()
    }

    fn hi() -> Request {
        Request {
            prompt: Prompt::Text("hi".into()),
            sampling: crate::llm::Sampling::default(),
            stop: Vec::new(),
            cancel: Default::default(),
        }
    }

    #[test]
    fn retries_rate_limits_and_server_errors_then_succeeds() {
        let ok = json!({"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]});
        let busy = json!({"error": {"message": "slow down"}});
        let (url, count) = scripted_server(vec![(429, busy.clone()), (503, busy), (200, ok)]);
        let completion = client(url, 3).complete(&hi()).unwrap();
        assert_eq!(completion.text, "hello");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[test]
    fn gives_up_after_the_retries_and_does_not_retry_client_errors() {
        let busy = json!({"error": {"message": "overloaded"}});
        let (url, count) = scripted_server(vec![(500, busy.clone()), (500, busy)]);
        let error = client(url, 1).complete(&hi()).unwrap_err();
        assert!(format!("{error:#}").contains("overloaded"), "{error:#}");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);

        let denied = json!({"error": {"message": "invalid api key"}});
        let too_long = json!({"error": {"message": "context length exceeded"}});
        let (url, count) = scripted_server(vec![(401, denied), (400, too_long)]);
        let client = client(url, 5);
        let error = client.complete(&hi()).unwrap_err();
        assert!(error.to_string().contains("invalid api key"), "{error}");
        assert!(error.downcast_ref::<Rejected>().is_none());
        let error = client.complete(&hi()).unwrap_err();
        assert!(error.downcast_ref::<Rejected>().is_some(), "{error}");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn debug_output_hides_the_api_key() {
        let options = ClientOptions {
            base_url: "http://x/v1".into(),
            model: "m".into(),
            api_key: Some("sk-secret".into()),
            api: Api::Chat,
            timeout: Duration::from_secs(1),
            retries: 0,
            backoff: Duration::from_millis(1),
        };
        let printed = format!("{options:?}");
        assert!(!printed.contains("sk-secret") && printed.contains("redacted"));
    }
}
