//! The argument groups several commands share: the default classifier, where helpers are
//! retrieved from, AutoCAD's infiller, how LASS reproduces, the optimiser's settings, and a resumable run's
//! `--pause-after` and `--device`. Commands flatten them into their own arguments.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, bail};
use clap::Args;
use serde::Serialize;

use super::corpus::CorpusArg;
use super::llm::LlmArgs;
use crate::compute::DeviceChoice;
use crate::editing::retrieve::RetrievalSetup;
use crate::home::Home;
use crate::infiller::rationales::RationaleSettings;
use crate::infiller::{FILL_CONTRAST, FILL_OPINION_BIAS};
use crate::lass::model::REPORT_FILE;
use crate::lass::shipped::{DIS_AE, SHIPPED_DIS_AE};
use crate::llm::Fluency;
use crate::methods::InfillerSetup;
use crate::methods::lass::{DEFAULT_MAX_PERPLEXITY, ReproductionSettings, SentimentSource};
use crate::model_dirs::{DEFAULT_ENCODER, WEIGHTS_FILE, resolve_model_dir};
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::index_dir;
use crate::retrieval::reranker::DEFAULT_RERANKER;
use crate::training::classifier::TrainConfig;

/// The classifier `scripts/quickstart` trains, used to check flips by default.
pub const DEFAULT_CLASSIFIER: &str = "imdb-400";

/// Where `lass train` writes and `generate --method lass` reads by default (under HOME/models).
pub const DEFAULT_DIS_AE: &str = "dis-ae";
/// The fluency filter's model: small like the paper's GPT-2.
pub const DEFAULT_FLUENCY_MODEL: &str = "smollm2-135m";

/// AutoCAD's infiller and how it samples.
#[derive(Debug, Clone, Args, Serialize)]
pub struct InfillerArgs {
    /// The T5 infiller AutoCAD edits with (`flipside infiller train`'s output)
    /// [default: HOME/models/infiller when it exists, else the one Flipside ships]
    #[arg(long = "infiller", value_name = "DIR")]
    pub name: Option<String>,
    /// Label contrast: each token of a fill scored by (1 + W)·log p(target label)
    /// − W·log p(the item's label); 0 samples from the target label alone, as AutoCAD does.
    /// W = 1 makes fills more fluent but fewer of them flip
    #[arg(long, value_name = "W", default_value_t = FILL_CONTRAST.weight)]
    pub label_contrast: f32,
    /// The most words AutoCAD masks in an item, the most salient first, for closer edits
    /// (AutoCAD's 30 % of a 40-word sentence is 12 words) [default: no cap, as in the paper]
    #[arg(long, value_name = "N")]
    pub max_masked: Option<usize>,
    /// Mask the classifier's salient words only, as the paper does. By default AutoCAD also
    /// masks every opinion word of the item's own polarity (Liu & Hu's lexicon; sentiment data
    /// only) and never writes one back: on `bench cf` that raised the yield from 140 to 160 of
    /// 200 items and the judge's flip rate before the filter from 0.34 to 0.51
    #[arg(long)]
    pub no_opinion_words: bool,
    /// Added to the log-probability of the target polarity's opinion words (those written as
    /// one piece) in AutoCAD's fills; 0 leaves the infiller's choice alone. On `bench cf` 1
    /// raised the judge's flip rate before the filter from 0.51 to 0.73 and the median
    /// perplexity from 772 to 879
    #[arg(long, value_name = "B", default_value_t = FILL_OPINION_BIAS)]
    pub opinion_bias: f32,
}

impl InfillerArgs {
    /// The infiller these arguments name, finding rationales by `rationales`.
    pub fn setup(&self, home: &Home, mut rationales: RationaleSettings) -> Result<InfillerSetup> {
        if !(self.label_contrast.is_finite() && self.label_contrast >= 0.0) {
            bail!(
                "--label-contrast must be 0 or more, not {}",
                self.label_contrast
            );
        }
        if let Some(cap) = self.max_masked {
            if cap == 0 {
                bail!("--max-masked must be at least 1");
            }
            rationales.max_words = Some(cap);
        }
        rationales.opinion_words = !self.no_opinion_words;
        if !self.opinion_bias.is_finite() {
            bail!("--opinion-bias must be a number, not {}", self.opinion_bias);
        }
        rationales.opinion_bias = self.opinion_bias;
        let mut setup = InfillerSetup::resolve(home, self.name.as_deref(), rationales)?;
        setup.label_contrast.weight = self.label_contrast;
        Ok(setup)
    }
}

/// Where helpers are retrieved from.
#[derive(Debug, Clone, Args, Serialize)]
#[command(next_help_heading = "Retrieval")]
pub struct RetrievalArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub corpus: CorpusArg,
    /// Retriever whose index is searched (a trained CF-DPR name, a directory or minilm)
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub encoder: String,
    /// Helpers kept per query sentence
    #[arg(short, long, default_value_t = 3)]
    pub k: usize,
    /// Query sentences per item: the ones with the most opinion words
    #[arg(long, default_value_t = 3)]
    pub max_queries: usize,
    /// Re-order the top K candidates with a cross-encoder re-ranker
    #[arg(long, value_name = "K")]
    pub rerank: Option<usize>,
    #[arg(long, default_value = DEFAULT_RERANKER)]
    pub reranker: String,
    /// Keep helpers of any label (by default only sentences from reviews with the target
    /// label, when the corpus knows labels)
    #[arg(long)]
    pub any_label: bool,
}

impl RetrievalArgs {
    /// The retrieval these options describe.
    pub fn setup(&self, home: &Home) -> Result<RetrievalSetup> {
        let corpus_dir = self.corpus.dir(home);
        Ok(RetrievalSetup {
            index_dir: index_dir(&corpus_dir, &self.encoder),
            corpus_dir,
            encoders: RetrieverEncoders::resolve(home, &self.encoder)?,
            reranker: match self.rerank {
                Some(k) => Some((resolve_model_dir(home, &self.reranker)?, k)),
                None => None,
            },
            per_query: self.k,
            max_queries: self.max_queries,
            target_label_only: !self.any_label,
        })
    }
}

/// How `generate` and `serve` reproduce with LASS.
#[derive(Debug, Clone, Args, Serialize)]
#[command(next_help_heading = "LASS")]
pub struct LassArgs {
    /// The Dis-AE LASS reproduces with (`flipside lass train`'s output, or `dis-ae-shipped`)
    /// [default: HOME/models/dis-ae when `lass train` has finished one there, else the Dis-AE
    /// Flipside ships]
    #[arg(long, value_name = "DIR")]
    pub dis_ae: Option<String>,
    /// Where each output's sentiment comes from: the target label's learnt vector, or a text
    /// with the target label (a sentiment parent, drawn per attempt)
    #[arg(long, value_enum, default_value_t)]
    pub sentiment: SentimentSource,
    #[command(flatten)]
    #[serde(flatten)]
    pub fluency: FluencyArgs,
}

/// LASS's perplexity filter.
#[derive(Debug, Clone, Args, Serialize)]
pub struct FluencyArgs {
    /// The perplexity threshold under --fluency-model: outputs above it and above their
    /// source's perplexity are dropped (`lass evaluate`: outputs above it are counted as not
    /// kept); 0: no fluency model
    #[arg(long, default_value_t = DEFAULT_MAX_PERPLEXITY, value_name = "PPL")]
    pub max_perplexity: f64,
    /// The embedded model that scores perplexity: a model asset or a GGUF file
    #[arg(long, default_value = DEFAULT_FLUENCY_MODEL, value_name = "NAME|FILE")]
    pub fluency_model: String,
}

impl FluencyArgs {
    /// The fluency model for one caller at a time, unless the filter is off.
    pub fn load(&self, home: &Home) -> Result<Option<Arc<dyn Fluency>>> {
        if self.max_perplexity <= 0.0 {
            return Ok(None);
        }
        self.model(home, 1).map(Some)
    }

    /// The fluency model a run of `concurrency` items at once needs: to rank candidates
    /// (`candidates` > 1, whatever the filter), else to filter LASS's outputs when it
    /// `reproduces`, else none.
    pub fn for_run(
        &self,
        home: &Home,
        reproduces: bool,
        candidates: usize,
        concurrency: usize,
    ) -> Result<Option<Arc<dyn Fluency>>> {
        if candidates > 1 || (reproduces && self.max_perplexity > 0.0) {
            self.model(home, concurrency).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The fluency model for `callers` at once, loaded by the embedded engine as `--model`
    /// loads it (its threads, the FLIPSIDE_LLM_THREADS variable), from its scoring copy
    /// ([`LlmArgs::scorer`]).
    pub fn model(&self, home: &Home, callers: usize) -> Result<Arc<dyn Fluency>> {
        let llm = LlmArgs {
            model: self.fluency_model.clone(),
            ..super::defaults::<LlmArgs>()
        };
        Ok(Arc::new(llm.scorer(home, callers)?))
    }
}

impl LassArgs {
    pub fn settings(&self) -> ReproductionSettings {
        let threshold = self.fluency.max_perplexity;
        ReproductionSettings {
            sentiment: self.sentiment,
            max_perplexity: (threshold > 0.0).then_some(threshold),
        }
    }

    /// The Dis-AE directory ([`dis_ae_dir`]).
    pub fn dir(&self, home: &Home) -> Result<PathBuf> {
        dis_ae_dir(home, self.dis_ae.as_deref())
    }
}

/// The Dis-AE directory `name` (a model name or a directory; [`SHIPPED_DIS_AE`] is the one
/// Flipside ships), else HOME/models/dis-ae when `lass train` has finished one there, else the
/// shipped one.
pub fn dis_ae_dir(home: &Home, name: Option<&str>) -> Result<PathBuf> {
    match name {
        Some(SHIPPED_DIS_AE) => DIS_AE.dir(home),
        Some(name) => resolve_model_dir(home, name),
        None => {
            let trained = home.models().join(DEFAULT_DIS_AE);
            match trained.join(WEIGHTS_FILE).is_file() && trained.join(REPORT_FILE).is_file() {
                true => Ok(trained),
                false => DIS_AE.dir(home),
            }
        }
    }
}

/// Optimiser settings; each left out takes the command's own default (see its `--help`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Training")]
pub struct OptimiserArgs {
    /// Passes over the training data
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Examples per optimizer step
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate (AdamW; linear warmup, then linear decay)
    #[arg(long)]
    pub lr: Option<f64>,
    /// Fraction of the steps spent warming the learning rate up
    #[arg(long)]
    pub warmup: Option<f64>,
    /// AdamW decoupled weight decay
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Truncate inputs and targets to this many tokens
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Seed for initialisation, masking, data order and dropout
    #[arg(long)]
    pub seed: Option<u64>,
    /// Save a resumable checkpoint every this many steps
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
}

impl OptimiserArgs {
    /// `defaults` with the options given replacing theirs.
    pub fn over(&self, defaults: TrainConfig) -> TrainConfig {
        TrainConfig {
            epochs: self.epochs.unwrap_or(defaults.epochs),
            batch_size: self.batch_size.unwrap_or(defaults.batch_size),
            lr: self.lr.unwrap_or(defaults.lr),
            warmup: self.warmup.unwrap_or(defaults.warmup),
            weight_decay: self.weight_decay.unwrap_or(defaults.weight_decay),
            max_len: self.max_len.unwrap_or(defaults.max_len),
            seed: self.seed.unwrap_or(defaults.seed),
            checkpoint_every: self.checkpoint_every.unwrap_or(defaults.checkpoint_every),
            ..defaults
        }
    }
}

/// A resumable run's stopping point and device.
#[derive(Debug, Args)]
pub struct ResumableArgs {
    /// Stop after this many steps (of each stage, for a training in stages); running the same
    /// command again resumes
    #[arg(long, value_name = "STEPS")]
    pub pause_after: Option<usize>,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}
