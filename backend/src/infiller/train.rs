//! `flipside infiller train`: AutoCAD's label-controlled infilling (§3.3). Each example's
//! rationale spans are masked, one sentinel per span, the gold label word goes last in the
//! input, and the target is the sentinels followed by the original spans. With `alpha` > 0 the
//! same masked input under every other label must make that target unlikely: loss = MLE +
//! α·UL, the unlikelihood on span words only. Validation loss (MLE on held-out examples) picks
//! the best epoch; resumable like every training here.
//!
//! With [`KeywordGuidance`] (retrieval-guided infilling, beyond the paper) an input also
//! carries the keywords of corpus sentences retrieved for the example with its own label, and
//! its unlikelihood rows those retrieved for the other label: the infiller learns to write
//! fills in the spirit of the keywords it is given, which at generation are the target label's.
//! A seeded share of the examples goes without keywords, so that it also fills inputs without.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use flipside_shared::data::stable_hash;
use flipside_shared::infill::{Rationale, T5Tokenizer, infill_input, infill_target};
use flipside_shared::models::t5::T5Config;
use serde::{Deserialize, Serialize};

use super::rationales::{NoRationale, RationaleFinder, RationaleRequest, RationaleSettings};
use super::{Seq2SeqExample, Seq2SeqObjective, save_t5};
use crate::compute::Compute;
use crate::editing::keywords::Lexicons;
use crate::editing::prompts::Task;
use crate::editing::retrieve::{RetrievalSetup, Retriever};
use crate::methods::core::RetrievalContext;
use crate::model_dirs::{load_classifier, write_atomic};
use crate::pipeline::Item;
use crate::progress;
use crate::training::classifier::{TrainConfig, TrainOutcome, TrainRecord, run_training};

/// Infill training's optimiser defaults (AutoCAD: AdamW, betas (0.9, 0.98) — ours (0.9,
/// 0.999) — weight decay 0.1, batch 8, 10 epochs at lr 1e-5 for t5-large; a small T5 from our
/// pretraining learns faster at 3e-4).
pub fn default_train() -> TrainConfig {
    TrainConfig {
        epochs: 3,
        batch_size: 16,
        lr: 3e-4,
        weight_decay: 0.1,
        warmup: 0.0,
        max_grad_norm: 1.0,
        max_len: 128,
        seed: 42,
        checkpoint_every: 100,
        ..TrainConfig::default()
    }
}

/// What to train.
pub struct InfillTrainRun {
    /// Training items (their `label` is the gold label; `target` is ignored).
    pub items: Vec<Item>,
    pub classifier_dir: PathBuf,
    /// The T5 to start from (`infiller pretrain`'s output, the shipped infiller or any HF T5),
    /// and its tokenizer.
    pub base: PathBuf,
    pub tokenizer_json: Vec<u8>,
    pub rationales: RationaleSettings,
    /// Opinion words (for `rationales.opinion_words`) and, with `guidance`, keyword lists.
    pub lexicons: Arc<Lexicons>,
    /// Weight of the unlikelihood term (0: MLE only).
    pub alpha: f64,
    /// Fraction of the examples held out for validation.
    pub validation: f64,
    pub train: TrainConfig,
    pub out: PathBuf,
    pub pause_after: Option<usize>,
    /// Retrieval-guided infilling: keywords of retrieved sentences in the inputs.
    pub guidance: Option<KeywordGuidance>,
}

/// Where retrieval-guided infilling's keywords come from.
pub struct KeywordGuidance {
    pub retrieval: RetrievalSetup,
    pub task: Task,
    /// Most keywords in an input (`generate`'s `--max-keywords` should match).
    pub max_keywords: usize,
    /// The share of examples trained without keywords (drawn by a seeded hash of the item id),
    /// so that the infiller also fills inputs without them (the plain autocad method).
    pub keyword_free: f64,
}

/// How a retrieval-guided infiller's keywords were found, recorded in `infill.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuidanceReport {
    pub corpus: PathBuf,
    pub index: PathBuf,
    pub per_query: usize,
    pub max_queries: usize,
    pub max_keywords: usize,
    /// Examples whose own-label retrieval found at least one keyword.
    pub with_keywords: usize,
    /// Examples trained without keywords ([`KeywordGuidance::keyword_free`]).
    #[serde(default)]
    pub keyword_free: usize,
}

/// What infill training saw, saved as `infill.json` beside the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InfillReport {
    pub items: usize,
    /// Items with a rationale (the classifier right and confident).
    pub with_rationale: usize,
    pub train_examples: usize,
    pub validation_examples: usize,
    pub labels: Vec<String>,
    pub rationales: RationaleSettings,
    pub alpha: f64,
    pub validation_losses: Vec<f64>,
    pub best_epoch: Option<usize>,
    pub train_seconds: f64,
    /// Present when the inputs carried retrieved keywords.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<GuidanceReport>,
}

impl InfillReport {
    /// The report saved beside a trained infiller; `None` for a T5 not trained here.
    pub fn read(dir: &std::path::Path) -> Result<Option<Self>> {
        match std::fs::read(dir.join("infill.json")) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

/// One item's training example: the masked input under its own label, its target, and the
/// inputs under every other label (the unlikelihood rows); each input with its label's
/// `keywords` (none when the map has no entry).
pub fn infill_example(
    rationale: &Rationale,
    label: &str,
    labels: &[String],
    keywords: &KeywordsByLabel,
    tokenizer: &T5Tokenizer,
    max_len: usize,
) -> Result<Option<Seq2SeqExample>> {
    let encode = |label: &str| {
        let keywords = keywords.get(label).map_or(&[][..], Vec::as_slice);
        tokenizer.encode(&infill_input(
            &rationale.text,
            rationale.premise.as_ref(),
            keywords,
            label,
        ))
    };
    let input = encode(label)?;
    let target = tokenizer.encode(&infill_target(&rationale.text, rationale.premise.as_ref()))?;
    if input.len() > max_len || target.len() > max_len {
        return Ok(None);
    }
    let negatives = labels
        .iter()
        .filter(|other| *other != label)
        .map(|other| encode(other))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Seq2SeqExample {
        input,
        target,
        negatives,
    }))
}

/// Trains (or resumes) the infiller into `run.out`.
pub fn train_infiller<B: Backend>(
    compute: Compute<B>,
    run: &InfillTrainRun,
) -> Result<(TrainOutcome, InfillReport)> {
    let classifier = load_classifier::<Autodiff<B>>(&run.classifier_dir, &compute.device)?;
    let labels = classifier.config.labels.clone();
    let finder = RationaleFinder {
        classifier,
        settings: run.rationales.clone(),
        lexicons: run.lexicons.clone(),
    };
    let mut requests = Vec::with_capacity(run.items.len());
    for item in &run.items {
        let Some(label) = labels.iter().position(|l| *l == item.label) else {
            bail!(
                "item {} has label {:?}; the classifier knows {labels:?}",
                item.id,
                item.label
            );
        };
        requests.push(RationaleRequest {
            text: &item.text,
            premise: item.premise.as_deref(),
            label,
        });
    }
    let bar = progress::items(requests.len() as u64, "rationales");
    let rationales = finder.find(&requests, 16, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let (keywords, guidance) = match &run.guidance {
        Some(guidance) => {
            let (keywords, report) =
                guidance_keywords(&compute, guidance, run, &rationales, &labels)?;
            (keywords, Some(report))
        }
        None => (vec![BTreeMap::new(); run.items.len()], None),
    };

    let tokenizer_json = &run.tokenizer_json;
    let tokenizer = T5Tokenizer::from_json(tokenizer_json)?;
    let mut train = Vec::new();
    let mut validation = Vec::new();
    let mut with_rationale = 0;
    for ((item, rationale), keywords) in run.items.iter().zip(&rationales).zip(&keywords) {
        let Ok(rationale) = rationale else { continue };
        with_rationale += 1;
        let Some(example) = infill_example(
            rationale,
            &item.label,
            &labels,
            keywords,
            &tokenizer,
            run.train.max_len,
        )?
        else {
            continue;
        };
        let held_out =
            (stable_hash(run.train.seed, &item.id) % 1000) as f64 / 1000.0 < run.validation;
        if held_out {
            validation.push(example);
        } else {
            train.push(example);
        }
    }
    if train.is_empty() {
        bail!(
            "no training example: the classifier got {with_rationale} of {} items right with \
             p > {}",
            run.items.len(),
            run.rationales.min_confidence
        );
    }
    let mut config = T5Config::from_json(&std::fs::read_to_string(run.base.join("config.json"))?)
        .map_err(anyhow::Error::msg)?;
    config.dropout_rate = 0.1;
    let identity = format!(
        "{}|{}|{:?}|{}",
        config.to_json(),
        run.alpha,
        run.rationales,
        run.base.display()
    );
    let content: String = train
        .iter()
        .chain(&validation)
        .map(|e| format!("{:?}{:?}", e.input, e.target))
        .collect();
    let fresh = TrainRecord::new(
        &run.train,
        &run.base,
        "infill",
        format!(
            "{:016x}-{}",
            stable_hash(0, &(identity + &content)),
            train.len()
        ),
        labels.clone(),
        train.len(),
        std::any::type_name::<B>(),
    );
    let (train_examples, validation_examples) = (train.len(), validation.len());
    let objective = Seq2SeqObjective {
        examples: train,
        validation,
        curve: Vec::new(),
        config: config.clone(),
        start: Some(run.base.clone()),
        alpha: run.alpha,
        tokenizer,
    };
    let outcome = run_training::<Autodiff<B>, _>(
        &objective,
        &compute,
        fresh,
        &run.out,
        "model.safetensors",
        run.pause_after,
        |model| save_t5(&run.out, &model.valid(), &config, tokenizer_json),
    )?;
    let report = InfillReport {
        items: run.items.len(),
        with_rationale,
        train_examples,
        validation_examples,
        labels,
        rationales: run.rationales.clone(),
        alpha: run.alpha,
        validation_losses: outcome.record.validation_losses.clone(),
        best_epoch: outcome.record.best_epoch,
        train_seconds: outcome.record.train_seconds,
        guidance,
    };
    if !outcome.paused {
        write_atomic(
            &run.out.join("infill.json"),
            &serde_json::to_vec_pretty(&report)?,
        )?;
    }
    Ok((outcome, report))
}

/// Retrieved keywords by the label they were retrieved for.
pub type KeywordsByLabel = BTreeMap<String, Vec<String>>;

/// For each item with a rationale, the keywords of sentences retrieved for it with each label
/// (its own for the input, the others for the unlikelihood rows).
fn guidance_keywords<B: Backend>(
    compute: &Compute<B>,
    guidance: &KeywordGuidance,
    run: &InfillTrainRun,
    rationales: &[std::result::Result<Rationale, NoRationale>],
    labels: &[String],
) -> Result<(Vec<KeywordsByLabel>, GuidanceReport)> {
    let setup = &guidance.retrieval;
    let retriever = Retriever::open(compute.clone(), setup.clone(), run.lexicons.clone())
        .context("loading the retrieval index for keyword guidance")?;
    let context = RetrievalContext::over(
        Arc::new(Mutex::new(retriever)),
        run.lexicons.clone(),
        guidance.task,
        guidance.max_keywords,
    );
    let with_rationale = rationales.iter().filter(|r| r.is_ok()).count();
    let bar = progress::items(with_rationale as u64, "retrieving keywords");
    let mut keywords = Vec::with_capacity(run.items.len());
    let mut with_keywords = 0;
    let mut keyword_free = 0;
    for (item, rationale) in run.items.iter().zip(rationales) {
        let mut by_label = BTreeMap::new();
        let draw = stable_hash(run.train.seed, &format!("keyword-free {}", item.id)) % 1000;
        if rationale.is_ok() && (draw as f64 / 1000.0) < guidance.keyword_free {
            keyword_free += 1;
            bar.inc(1);
        } else if rationale.is_ok() {
            for label in labels {
                let query = Item {
                    target: label.clone(),
                    ..item.clone()
                };
                let found = context
                    .retrieve(&query, None)?
                    .retrieval
                    .unwrap_or_default();
                by_label.insert(label.clone(), found.keywords);
            }
            with_keywords += usize::from(by_label.get(&item.label).is_some_and(|k| !k.is_empty()));
            bar.inc(1);
        }
        keywords.push(by_label);
    }
    bar.finish_and_clear();
    let report = GuidanceReport {
        corpus: setup.corpus_dir.clone(),
        index: setup.index_dir.clone(),
        per_query: setup.per_query,
        max_queries: setup.max_queries,
        max_keywords: guidance.max_keywords,
        with_keywords,
        keyword_free,
    };
    Ok((keywords, report))
}
