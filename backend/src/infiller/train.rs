//! `flipside infiller train`: AutoCAD's label-controlled infilling (§3.3). Each example's
//! rationale spans are masked, one sentinel per span, the gold label word goes last in the
//! input, and the target is the sentinels followed by the original spans. With `alpha` > 0 the
//! same masked input under every other label must make that target unlikely: loss = MLE +
//! α·UL, the unlikelihood on span words only. Validation loss (MLE on held-out examples) picks
//! the best epoch; resumable like every training here.

use std::path::PathBuf;

use anyhow::{Result, bail};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use flipside_shared::data::stable_hash;
use flipside_shared::infill::{T5Tokenizer, infill_input, infill_target};
use flipside_shared::models::t5::T5Config;
use serde::{Deserialize, Serialize};

use super::rationales::{Rationale, RationaleFinder, RationaleRequest, RationaleSettings};
use super::{Seq2SeqExample, Seq2SeqObjective, save_t5};
use crate::compute::Compute;
use crate::models::{load_classifier, write_atomic};
use crate::pipeline::Item;
use crate::progress;
use crate::train::{TrainConfig, TrainOutcome, TrainRecord, run_training};

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
    /// The T5 to start from (`infiller pretrain`'s output or any HF T5), and its tokenizer.
    pub base: PathBuf,
    pub tokenizer_json: Vec<u8>,
    pub rationales: RationaleSettings,
    /// Weight of the unlikelihood term (0: MLE only).
    pub alpha: f64,
    /// Fraction of the examples held out for validation.
    pub validation: f64,
    pub train: TrainConfig,
    pub out: PathBuf,
    pub pause_after: Option<usize>,
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
}

/// One item's training example: the masked input under its own label, its target, and the
/// inputs under every other label (the unlikelihood rows).
pub fn infill_example(
    rationale: &Rationale,
    label: &str,
    labels: &[String],
    tokenizer: &T5Tokenizer,
    max_len: usize,
) -> Result<Option<Seq2SeqExample>> {
    let encode = |label: &str| {
        tokenizer.encode(&infill_input(
            &rationale.text,
            rationale.premise.as_ref(),
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
    let mut rationales = Vec::with_capacity(requests.len());
    for chunk in requests.chunks(16) {
        rationales.extend(finder.find(chunk, 16)?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();

    let tokenizer_json = &run.tokenizer_json;
    let tokenizer = T5Tokenizer::from_json(tokenizer_json)?;
    let mut train = Vec::new();
    let mut validation = Vec::new();
    let mut with_rationale = 0;
    for (item, rationale) in run.items.iter().zip(&rationales) {
        let Ok(rationale) = rationale else { continue };
        with_rationale += 1;
        let Some(example) = infill_example(
            rationale,
            &item.label,
            &labels,
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
        config: config.clone(),
        start: Some(run.base.clone()),
        alpha: run.alpha,
        tokenizer,
    };
    let outcome = run_training::<Autodiff<B>, _>(
        &objective,
        &compute.device,
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
    };
    if !outcome.paused {
        write_atomic(
            &run.out.join("infill.json"),
            &serde_json::to_vec_pretty(&report)?,
        )?;
    }
    Ok((outcome, report))
}
