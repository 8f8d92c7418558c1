//! A trained Dis-AE on disk (`config.json`, `model.safetensors`, `tokenizer.json`, and what
//! training saw in `lass.json`), and the backend-erased [`Reproduce`] that methods edit with.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context as _, Result};
use burn::tensor::backend::Backend;
use flipside_shared::models::dis_ae::DisAeConfig;
use flipside_shared::models::dis_ae::reproduce::{Reproducer, Reproduction, TargetSentiment};
use flipside_shared::models::search::DecodeSettings;
use serde::{Deserialize, Serialize};

/// The files of a Dis-AE directory.
pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = crate::model_dirs::WEIGHTS_FILE;
pub const VOCABULARY_FILE: &str = "tokenizer.json";
pub const REPORT_FILE: &str = "lass.json";

/// The config of the Dis-AE in `dir`.
pub fn read_config(dir: &Path) -> Result<DisAeConfig> {
    let path = dir.join(CONFIG_FILE);
    let bytes = std::fs::read(&path)
        .with_context(|| format!("no Dis-AE at {}: no {CONFIG_FILE}", dir.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))
}

/// Texts of each label that can lend their sentiment (sentiment parents), saved in `lass.json`.
pub type SentimentParents = BTreeMap<String, Vec<String>>;

/// What `lass train` saw and measured, saved as `lass.json` beside the model.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LassReport {
    pub labels: Vec<String>,
    pub vocabulary_size: usize,
    pub parameters: usize,
    /// Unpaired texts of the corpus-first stage (0: the stage was skipped).
    pub texts: usize,
    /// Pairs of the pairs stage (0: the stage was skipped).
    pub pairs: usize,
    /// Mean training loss of each epoch, per stage.
    pub corpus_losses: Vec<f64>,
    pub pair_losses: Vec<f64>,
    /// Wall time of each stage, across resumptions.
    pub corpus_seconds: f64,
    pub pair_seconds: f64,
    /// Texts reproduction may take a sentiment from, by label.
    pub sentiment_parents: SentimentParents,
}

impl LassReport {
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(REPORT_FILE);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "no Dis-AE at {}: train one with `flipside lass train`",
                dir.display()
            )
        })?;
        serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))
    }
}

/// Loads the Dis-AE in `dir` onto `device`.
pub fn load_reproducer<B: Backend>(dir: &Path, device: &B::Device) -> Result<Reproducer<B>> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).with_context(|| {
            format!(
                "no {name} in {}: train a Dis-AE with `flipside lass train`",
                dir.display()
            )
        })
    };
    Reproducer::from_files(
        &read(CONFIG_FILE)?,
        read(WEIGHTS_FILE)?,
        &read(VOCABULARY_FILE)?,
        device,
    )
    .with_context(|| format!("loading the Dis-AE {}", dir.display()))
}

/// A loaded Dis-AE, whatever its backend: what the `lass` method reproduces with.
pub trait Reproduce: Send + Sync {
    /// Its directory, recorded with every edit.
    fn name(&self) -> &str;
    /// Texts of `label` that can lend their sentiment.
    fn sentiment_parents(&self, label: &str) -> &[String];
    /// See [`Reproducer::can_rewrite`].
    fn can_rewrite(&self, text: &str) -> bool;
    /// See [`Reproducer::reproduce_all`].
    fn reproduce_all(
        &self,
        contents: &[&str],
        sentiment: TargetSentiment,
        settings: &DecodeSettings,
    ) -> Result<Vec<Vec<Reproduction>>>;
}

/// A [`Reproducer`] shared between threads.
pub struct SharedReproducer<B: Backend> {
    name: String,
    reproducer: Mutex<Reproducer<B>>,
    parents: SentimentParents,
}

impl<B: Backend> SharedReproducer<B> {
    /// Loads the Dis-AE in `dir`.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self> {
        let reproducer = load_reproducer::<B>(dir, device)?;
        Ok(Self {
            name: dir.display().to_string(),
            parents: LassReport::read(dir)?.sentiment_parents,
            reproducer: Mutex::new(reproducer),
        })
    }
}

impl<B: Backend> Reproduce for SharedReproducer<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn sentiment_parents(&self, label: &str) -> &[String] {
        self.parents.get(label).map_or(&[], Vec::as_slice)
    }

    fn can_rewrite(&self, text: &str) -> bool {
        let reproducer = self.reproducer.lock().unwrap_or_else(|e| e.into_inner());
        reproducer.can_rewrite(text)
    }

    fn reproduce_all(
        &self,
        contents: &[&str],
        sentiment: TargetSentiment,
        settings: &DecodeSettings,
    ) -> Result<Vec<Vec<Reproduction>>> {
        let reproducer = self.reproducer.lock().unwrap_or_else(|e| e.into_inner());
        Ok(reproducer.reproduce_all(contents, sentiment, settings)?)
    }
}
