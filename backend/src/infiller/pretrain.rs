//! `flipside infiller pretrain`: a T5 trained from scratch by span corruption (noise density
//! 0.15, mean span 3) on corpus sentences, resumable with bit-identical weights like every
//! training here. No T5 weights exist in any reachable package; this is the infiller's start
//! (`infiller train --base DIR` starts from any HF T5 instead).
//!
//! Each sentence is corrupted once, with a generator seeded by (seed, sentence), so that the
//! examples — and a resumed run — are the same every time. A held-out set of sentences (drawn
//! first by a seeded hash) measures the span-corruption loss at the end.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::tensor::backend::Backend;
use flipside_shared::data::stable_hash;
use flipside_shared::infill::{T5Tokenizer, corrupt_spans};
use flipside_shared::models::t5::T5Config;
use flipside_shared::random::SplitMix64;
use serde::{Deserialize, Serialize};

use super::{Seq2SeqExample, Seq2SeqObjective, held_out_loss, load_t5, save_t5};
use crate::compute::Compute;
use crate::model_dirs::write_atomic;
use crate::retrieval::corpus::Corpus;
use crate::training::classifier::{
    CurvePoint, TrainConfig, TrainOutcome, TrainRecord, run_training,
};

/// The model pretraining builds by default: T5 v1.1's shape (gated-GELU) at a size that trains
/// on 2 CPU cores, with the output tied to the embedding to halve the 32k-row matrices.
pub fn default_model(vocab_size: usize) -> T5Config {
    T5Config {
        vocab_size,
        d_model: 256,
        d_kv: 32,
        d_ff: 768,
        num_layers: 4,
        num_decoder_layers: Some(4),
        num_heads: 8,
        relative_attention_num_buckets: 32,
        relative_attention_max_distance: 128,
        dropout_rate: 0.0,
        layer_norm_epsilon: 1e-6,
        feed_forward_proj: "gated-gelu".into(),
        tie_word_embeddings: true,
        scale_decoder_outputs: None,
        pad_token_id: 0,
        eos_token_id: 1,
        decoder_start_token_id: 0,
    }
}

/// Pretraining's optimiser defaults: a from-scratch transformer wants a larger learning rate
/// than fine-tuning.
pub fn default_train() -> TrainConfig {
    TrainConfig {
        epochs: 1,
        batch_size: 32,
        lr: 1e-3,
        weight_decay: 0.01,
        warmup: 0.02,
        max_grad_norm: 1.0,
        max_len: 64,
        seed: 42,
        checkpoint_every: 200,
        ..TrainConfig::default()
    }
}

/// What to pretrain.
pub struct PretrainRun {
    pub corpus_dir: PathBuf,
    /// Train on at most this many sentences (after the held-out ones).
    pub limit: Option<usize>,
    pub held_out: usize,
    pub model: T5Config,
    pub train: TrainConfig,
    pub noise_density: f64,
    pub mean_span: f64,
    pub tokenizer_json: Vec<u8>,
    pub out: PathBuf,
    pub pause_after: Option<usize>,
}

/// What pretraining measured, saved as `pretrain.json` beside the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PretrainReport {
    pub parameters: usize,
    pub train_sentences: usize,
    pub held_out_sentences: usize,
    /// Mean cross-entropy per target token on the held-out sentences, before and after.
    pub held_out_loss_initial: f64,
    pub held_out_loss: f64,
    /// The held-out loss at each checkpoint of training (empty in reports older than it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out_curve: Vec<CurvePoint>,
    /// Input + target tokens per second of training.
    pub tokens_per_second: f64,
    pub train_seconds: f64,
    pub noise_density: f64,
    pub mean_span: f64,
}

/// Span-corruption examples of `sentences`, each corrupted with its own seeded generator.
pub fn corrupted_examples(
    sentences: &[String],
    tokenizer: &T5Tokenizer,
    run: &PretrainRun,
) -> Result<Vec<Seq2SeqExample>> {
    let mut examples = Vec::with_capacity(sentences.len());
    for text in sentences {
        let mut tokens = tokenizer.encode_plain(text)?;
        tokens.truncate(run.train.max_len.saturating_sub(1));
        let mut rng = SplitMix64(stable_hash(run.train.seed, text));
        if let Some(c) = corrupt_spans(
            &tokens,
            tokenizer,
            run.noise_density,
            run.mean_span,
            &mut rng,
        ) {
            examples.push(Seq2SeqExample {
                input: c.input,
                target: c.target,
                negatives: Vec::new(),
            });
        }
    }
    Ok(examples)
}

/// Held-out and training sentences of the corpus: distinct texts ordered by a seeded hash, the
/// first `held_out` held out, the next `limit` (all by default) for training.
fn split_sentences(run: &PretrainRun) -> Result<(Vec<String>, Vec<String>)> {
    let corpus = Corpus::open(&run.corpus_dir)?;
    let mut texts: Vec<String> = corpus.sentences()?.into_iter().map(|s| s.text).collect();
    texts.sort_unstable();
    texts.dedup();
    texts.sort_by_cached_key(|t| stable_hash(run.train.seed, t));
    if texts.len() <= run.held_out {
        bail!(
            "{} has {} sentences; pretraining needs more than the {} held out",
            run.corpus_dir.display(),
            texts.len(),
            run.held_out
        );
    }
    let train_end = run
        .limit
        .map_or(texts.len(), |n| (run.held_out + n).min(texts.len()));
    let train = texts[run.held_out..train_end].to_vec();
    texts.truncate(run.held_out);
    Ok((texts, train))
}

/// Pretrains (or resumes) into `run.out`; returns the training outcome and, when finished, the
/// report (also written to `pretrain.json`).
pub fn pretrain<B: Backend>(
    compute: Compute<B>,
    run: &PretrainRun,
) -> Result<(TrainOutcome, Option<PretrainReport>)> {
    let tokenizer = T5Tokenizer::from_json(&run.tokenizer_json)?;
    if tokenizer.vocab_size() > run.model.vocab_size {
        bail!("the model's vocabulary is smaller than the tokenizer's");
    }
    let (held_out_texts, train_texts) = split_sentences(run)?;
    let held_out = corrupted_examples(&held_out_texts, &tokenizer, run)?;
    let examples = corrupted_examples(&train_texts, &tokenizer, run)?;
    let tokens: usize = examples
        .iter()
        .map(|e| e.input.len() + e.target.len())
        .sum();
    let identity = format!(
        "{}|{}|{}|{}|{}",
        run.model.to_json(),
        run.noise_density,
        run.mean_span,
        run.held_out,
        train_texts.len()
    );
    let fresh = TrainRecord::new(
        &run.train,
        &run.corpus_dir,
        &run.corpus_dir.display().to_string(),
        format!(
            "{:016x}-{}",
            stable_hash(0, &(identity + &train_texts.join("\n"))),
            train_texts.len()
        ),
        Vec::new(),
        examples.len(),
        std::any::type_name::<B>(),
    );
    let objective = Seq2SeqObjective {
        examples,
        validation: Vec::new(),
        curve: held_out.clone(),
        config: run.model.clone(),
        start: None,
        alpha: 0.0,
        tokenizer: tokenizer.clone(),
    };
    let outcome = run_training::<Autodiff<B>, _>(
        &objective,
        &compute,
        fresh,
        &run.out,
        "model.safetensors",
        run.pause_after,
        |model| save_t5(&run.out, &model.valid(), &run.model, &run.tokenizer_json),
    )?;
    if outcome.paused {
        return Ok((outcome, None));
    }
    let report_path = run.out.join("pretrain.json");
    if let Ok(bytes) = std::fs::read(&report_path)
        && let Ok(report) = serde_json::from_slice::<PretrainReport>(&bytes)
    {
        return Ok((outcome, Some(report)));
    }
    let (trained, _) = load_t5::<B>(&run.out, &compute.device)?;
    B::seed(&compute.device, run.train.seed);
    let initial = run.model.init::<B>(&compute.device);
    let batch = run.train.batch_size;
    let record = &outcome.record;
    let report = PretrainReport {
        parameters: trained.num_params(),
        train_sentences: train_texts.len(),
        held_out_sentences: held_out.len(),
        held_out_loss_initial: held_out_loss(
            &initial,
            &held_out,
            &tokenizer,
            batch,
            &compute.device,
        ),
        held_out_loss: held_out_loss(&trained, &held_out, &tokenizer, batch, &compute.device),
        held_out_curve: record.held_out_curve.clone(),
        tokens_per_second: tokens as f64 * run.train.epochs as f64 / record.train_seconds.max(1e-9),
        train_seconds: record.train_seconds,
        noise_density: run.noise_density,
        mean_span: run.mean_span,
    };
    write_atomic(&report_path, &serde_json::to_vec_pretty(&report)?)?;
    Ok((outcome, Some(report)))
}

/// The directory `infiller pretrain` writes by default.
pub fn default_out(models: &Path) -> PathBuf {
    models.join("infiller-pretrained")
}
