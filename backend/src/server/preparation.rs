//! The server's models while `flipside serve` prepares them: on a first run it fetches the
//! assets, builds the default corpus's index and fine-tunes the classifier, which takes
//! minutes, so the server answers from the start. Until the models are loaded, whatever needs
//! them is answered 503 `preparing` (with Retry-After) saying which step runs and how far it is;
//! the page shows that message and asks again. Sign-in, datasets and the review portal work
//! meanwhile, and jobs wait.

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::watch;

use super::error::{ApiError, ApiResult};
use super::resources::Resources;

/// Seconds a client is told to wait before asking again while the models are prepared.
const RETRY_SECONDS: u64 = 3;

/// Where the preparation stands; clones share it.
#[derive(Clone)]
pub struct Preparation {
    stage: Arc<watch::Sender<Stage>>,
}

#[derive(Clone)]
enum Stage {
    /// The step that runs.
    Preparing(String),
    Ready(Arc<Resources>),
    /// Why it stopped (the server then shuts down).
    Failed(String),
}

impl Preparation {
    /// A preparation that starts with `step`.
    pub fn start(step: impl Into<String>) -> Self {
        Self {
            stage: Arc::new(watch::Sender::new(Stage::Preparing(step.into()))),
        }
    }

    /// The next step, e.g. "fine-tuning the classifier".
    pub fn step(&self, step: impl Into<String>) {
        self.stage.send_replace(Stage::Preparing(step.into()));
    }

    /// Ends the preparation with the loaded models, or with why they could not be prepared.
    pub fn finish(&self, result: anyhow::Result<Resources>) {
        self.stage.send_replace(match result {
            Ok(resources) => Stage::Ready(Arc::new(resources)),
            Err(error) => Stage::Failed(format!("{error:#}")),
        });
    }

    /// The models, or 503 `preparing` saying what is being done.
    pub fn resources(&self) -> ApiResult<Arc<Resources>> {
        self.loaded().map_err(|status| {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "preparing", status)
                .retry_after(RETRY_SECONDS)
        })
    }

    /// What is being prepared, in a sentence, with the newest progress bar's count; `None`
    /// once the models are loaded.
    pub fn status(&self) -> Option<String> {
        self.loaded().err()
    }

    /// The models, or what is being prepared.
    fn loaded(&self) -> Result<Arc<Resources>, String> {
        match &*self.stage.borrow() {
            Stage::Ready(resources) => Ok(resources.clone()),
            Stage::Preparing(step) => Err(match crate::progress::latest() {
                Some(progress) => format!("first-run preparation: {step} ({progress})"),
                None => format!("first-run preparation: {step}"),
            }),
            Stage::Failed(error) => Err(format!("the preparation failed: {error}")),
        }
    }

    /// Why the preparation failed, if it did.
    pub fn failure(&self) -> Option<String> {
        match &*self.stage.borrow() {
            Stage::Failed(error) => Some(error.clone()),
            Stage::Preparing(_) | Stage::Ready(_) => None,
        }
    }

    /// Waits until the preparation ends: the models, or why they could not be prepared.
    pub async fn wait(&self) -> Result<Arc<Resources>, String> {
        let mut receiver = self.stage.subscribe();
        let stage = receiver
            .wait_for(|stage| !matches!(stage, Stage::Preparing(_)))
            .await
            .map(|stage| stage.clone())
            .unwrap_or_else(|_| Stage::Failed("the preparation was dropped".into()));
        match stage {
            Stage::Ready(resources) => Ok(resources),
            Stage::Failed(error) => Err(error),
            Stage::Preparing(_) => unreachable!("waited for the end"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_preparing_with_the_step_until_it_ends() {
        let preparation = Preparation::start("fetching the assets");
        let error = preparation.resources().err().unwrap();
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.code, "preparing");
        assert_eq!(error.retry_after, Some(RETRY_SECONDS));
        assert!(
            error.message.contains("fetching the assets"),
            "{}",
            error.message
        );

        preparation.step("fine-tuning the classifier");
        assert!(
            preparation
                .status()
                .unwrap()
                .contains("fine-tuning the classifier"),
            "{:?}",
            preparation.status()
        );

        let waiting = tokio::spawn({
            let preparation = preparation.clone();
            async move { preparation.wait().await.err() }
        });
        preparation.finish(Err(anyhow::anyhow!("no space left on device")));
        assert_eq!(
            waiting.await.unwrap().as_deref(),
            Some("no space left on device")
        );
        let message = preparation.resources().err().unwrap().message;
        assert!(message.contains("no space left"), "{message}");
    }
}
