//! Fine-tuning a sequence classifier: AdamW, linear warmup and decay, global gradient-norm
//! clipping, fixed seeds, and checkpoints that let a killed run resume exactly.
//!
//! Reproducibility: the data order of epoch `e` is a ChaCha8 shuffle seeded by `(seed, e)`,
//! and the backend RNG (dropout) is reseeded with `(seed, step)` before every step, so a run
//! resumed from a checkpoint takes the same steps as one that was never interrupted, on the
//! same CPU and thread count: the CPU backend's sums (and a batch's split into parts) follow
//! the thread count, so a run resumed on other threads ends with weights differing in their
//! last bits (a toy Dis-AE paused on one thread and resumed on two did).

use std::fs;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use flipside_shared::data::{Dataset, Example, Input, stable_hash};
use flipside_shared::metrics::{accuracy, argmax_rows};
use flipside_shared::models::classifier::{
    Architecture, ClassifierConfig, SequenceClassifier, TextClassifier, load_encoder_weights,
};
use flipside_shared::ops::bf16::{Bf16Kernel, Bf16Training};
use flipside_shared::ops::int8::Kernel;
use flipside_shared::tokenize::TextTokenizer;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::compute::{Batches, Compute};
use crate::model_dirs::{
    BertFiles, int8_where_possible, load_classifier, save_classifier, write_atomic,
};
use crate::progress;
use crate::training::adamw::AdamW;
use crate::training::parts::loss_and_gradients;

/// Training hyper-parameters; saved with every checkpoint and model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    /// Passes over the training data.
    pub epochs: usize,
    /// Examples per optimizer step.
    pub batch_size: usize,
    /// Peak learning rate (AdamW).
    pub lr: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// Fraction of the steps spent warming the learning rate up linearly from zero.
    pub warmup: f64,
    /// Clip the global L2 norm of the gradient to this value.
    pub max_grad_norm: f64,
    /// Truncate inputs to this many tokens.
    pub max_len: usize,
    /// Seed for the head's initialisation, the data order and dropout.
    pub seed: u64,
    /// Save a resumable checkpoint every this many steps.
    pub checkpoint_every: usize,
    /// The classification head: Hugging Face's (a directory `transformers` loads), or the
    /// head over mean-pooled states that the re-ranker keeps.
    pub head: Head,
    /// Multiply the encoder's linear layers (forward and gradients) in bf16 with AMX or AVX-512
    /// BF16, summing in f32 ([`flipside_shared::ops::bf16`]); CPU only. The weights then depend on the CPU.
    pub bf16: bool,
    /// How a classifier's training examples are put into batches. (Dis-AE's training always
    /// groups by length; the other objectives shuffle.) Records written before this option
    /// existed were shuffled.
    #[serde(default, skip_serializing_if = "BatchOrder::is_shuffled")]
    pub batch_order: BatchOrder,
}

/// How a classifier's training examples are put into batches in each epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchOrder {
    /// A seeded shuffle of all examples, cut into batches.
    #[default]
    Shuffled,
    /// Examples of similar token counts batched together (less padding, faster on short and
    /// mixed-length texts): the seeded shuffle sorted by length within runs of 50 batches,
    /// then the batches shuffled.
    ByLength,
}

impl BatchOrder {
    fn is_shuffled(&self) -> bool {
        *self == BatchOrder::Shuffled
    }
}

/// Which head a trained classifier gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Head {
    /// `BertForSequenceClassification`'s: the pretrained pooler over `[CLS]`, then a linear layer.
    HfPooler,
    /// A linear layer over the mean of the token states (Flipside's own format: MiniLM was
    /// trained to produce that representation, and on ~100 seed pairs the re-ranker learns
    /// only with it).
    MeanPooled,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 2,
            batch_size: 16,
            lr: 5e-5,
            weight_decay: 0.01,
            warmup: 0.1,
            max_grad_norm: 1.0,
            max_len: 256,
            seed: 42,
            checkpoint_every: 50,
            head: Head::HfPooler,
            bf16: false,
            batch_order: BatchOrder::Shuffled,
        }
    }
}

/// Linear warmup to `lr` over the first `warmup` fraction of steps, then linear decay to zero
/// (the schedule of HF's `get_linear_schedule_with_warmup`, evaluated after each step).
pub fn learning_rate(config: &TrainConfig, step: usize, total: usize) -> f64 {
    let warmup = (config.warmup * total as f64).round() as usize;
    let done = (step + 1) as f64;
    let factor = if step < warmup {
        done / warmup as f64
    } else {
        ((total - step) as f64 / (total - warmup).max(1) as f64).clamp(0.0, 1.0)
    };
    config.lr * factor
}

/// The permutation of `0..n` used in `epoch`.
fn epoch_order(n: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(mix(seed, epoch as u64));
    order.shuffle(&mut rng);
    order
}

/// The order in which `items` training items are trained in `epoch` (`config.batch_size` at a
/// time): in batches of similar `lengths` when given (`bucketed_order`), else shuffled.
pub fn training_order(
    config: &TrainConfig,
    items: usize,
    lengths: Option<&[usize]>,
    epoch: usize,
) -> Vec<usize> {
    match lengths {
        Some(lengths) => bucketed_order(lengths, config.batch_size, config.seed, epoch),
        None => epoch_order(items, config.seed, epoch),
    }
}

/// Batches per length bucket: the shuffled items are cut into runs of this many batches, each
/// run sorted by length.
const BUCKET_BATCHES: usize = 50;

/// The items of `epoch` in batches of similar length (less padding): the seeded permutation,
/// cut into runs of [`BUCKET_BATCHES`] batches, each run sorted by `lengths` and cut into
/// batches, and the batches shuffled.
fn bucketed_order(lengths: &[usize], batch_size: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let batch_size = batch_size.max(1);
    let mut order = epoch_order(lengths.len(), seed, epoch);
    for run in order.chunks_mut(batch_size * BUCKET_BATCHES) {
        run.sort_by_key(|&i| lengths[i]);
    }
    let mut batches: Vec<&[usize]> = order.chunks(batch_size).collect();
    // The last (short) batch stays last: every other batch is full.
    let last = batches.pop();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(mix(seed ^ 0x5eed, epoch as u64));
    batches.shuffle(&mut rng);
    batches.into_iter().chain(last).flatten().copied().collect()
}

fn mix(seed: u64, value: u64) -> u64 {
    stable_hash(seed, &value.to_string())
}

/// A fingerprint of a dataset's ids and labels, to refuse resuming on different data.
pub fn fingerprint(dataset: &Dataset) -> String {
    let mut h = 0u64;
    for example in &dataset.examples {
        h = stable_hash(h, &format!("{}\u{1f}{}", example.id, example.label));
    }
    format!("{h:016x}-{}", dataset.len())
}

/// What a training run records next to its checkpoints and its final model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainRecord {
    pub config: TrainConfig,
    pub encoder: PathBuf,
    pub train_dataset: String,
    pub train_fingerprint: String,
    pub labels: Vec<String>,
    pub total_steps: usize,
    /// Steps completed.
    pub step: usize,
    /// The training loss of every completed step.
    pub losses: Vec<f64>,
    /// The wall time of every completed step: forward, backward and optimiser update, without
    /// checkpoints and validation (a step on a GPU ends when its loss is read back).
    #[serde(default)]
    pub step_seconds: Vec<f64>,
    /// Wall time spent training, across resumptions.
    pub train_seconds: f64,
    /// The validation loss after each epoch (objectives with a validation set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_losses: Vec<f64>,
    /// The epoch (1-based) whose model had the lowest validation loss: the one kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_epoch: Option<usize>,
    /// The held-out loss at each checkpoint (objectives with a learning-curve set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out_curve: Vec<CurvePoint>,
    pub backend: String,
    pub flipside_version: String,
    /// The ids of the training examples (classifiers; none in records older than the field),
    /// unique within `train_dataset`'s source: what a judge independent of this model must not
    /// have been trained on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_ids: Vec<String>,
}

/// One point of a learning curve: the held-out loss after `step` optimiser steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub step: usize,
    pub loss: f64,
}

impl TrainRecord {
    /// The record of a run that has not started: `items` training items in batches of
    /// `config.batch_size` for `config.epochs` epochs.
    pub fn new(
        config: &TrainConfig,
        encoder: &Path,
        train_dataset: &str,
        train_fingerprint: String,
        labels: Vec<String>,
        items: usize,
        backend: &str,
    ) -> Self {
        Self {
            config: config.clone(),
            encoder: encoder.to_path_buf(),
            train_dataset: train_dataset.to_string(),
            train_fingerprint,
            labels,
            total_steps: items.div_ceil(config.batch_size) * config.epochs,
            step: 0,
            losses: Vec::new(),
            step_seconds: Vec::new(),
            train_seconds: 0.0,
            validation_losses: Vec::new(),
            best_epoch: None,
            held_out_curve: Vec::new(),
            backend: backend.to_string(),
            flipside_version: env!("CARGO_PKG_VERSION").to_string(),
            train_ids: Vec::new(),
        }
    }

    /// The mean training loss of each epoch so far (the last one possibly partial).
    pub fn epoch_losses(&self, steps_per_epoch: usize) -> Vec<f64> {
        self.losses
            .chunks(steps_per_epoch.max(1))
            .map(|epoch| epoch.iter().sum::<f64>() / epoch.len() as f64)
            .collect()
    }

    /// Optimizer steps per epoch.
    pub fn steps_per_epoch(&self) -> usize {
        self.total_steps / self.config.epochs.max(1)
    }
}

/// A log line at a checkpoint, for runs whose stderr is not a terminal (the progress bar is
/// hidden there): the step, the mean loss since the last checkpoint and the mean time per step.
fn log_progress(record: &TrainRecord, interval: usize) {
    let recent = &record.losses[record.losses.len().saturating_sub(interval)..];
    let mean_loss = recent.iter().sum::<f64>() / recent.len().max(1) as f64;
    tracing::info!(
        step = record.step,
        total = record.total_steps,
        mean_loss = %format!("{mean_loss:.4}"),
        seconds_per_step = %format!("{:.3}", record.train_seconds / record.step.max(1) as f64),
        "checkpoint saved"
    );
}

/// The outcome of [`train_classifier`].
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    pub record: TrainRecord,
    /// Whether training stopped at `pause_after` before finishing.
    pub paused: bool,
}

/// Where training writes: `out/` receives the model, `out/train-state/` the checkpoints.
pub struct TrainRun<'a> {
    pub train: &'a Dataset,
    pub encoder_dir: &'a Path,
    pub out: &'a Path,
    pub config: TrainConfig,
    /// Stop after this many steps in this invocation (resume by running the same command again).
    pub pause_after: Option<usize>,
}

const STATE_DIR: &str = "train-state";
const RECORD_FILE: &str = "training.json";

/// What a training loop optimises: a model and the loss of a batch of training items.
pub trait Objective<B: AutodiffBackend> {
    type Model: AutodiffModule<B>;
    /// The number of training items; a batch is a list of item indices.
    fn items(&self) -> usize;
    /// The starting model (pretrained weights; new parameters drawn from the seeded backend).
    fn init(&self, device: &B::Device) -> Result<Self::Model>;
    /// A model of the right shape to load a checkpoint into.
    fn skeleton(&self, device: &B::Device) -> Self::Model;
    /// The mean loss over the items of `batch`, at optimiser step `step` (0-based; for losses
    /// whose weights change over training).
    fn loss(
        &self,
        model: &Self::Model,
        batch: &[usize],
        step: usize,
        device: &B::Device,
    ) -> Result<Tensor<B, 1>>;
    /// The loss on held-out data, measured after each epoch; when given, the model of the
    /// epoch with the lowest one is the run's result (not the last).
    fn validation_loss(&self, _model: &Self::Model, _device: &B::Device) -> Option<f64> {
        None
    }
    /// The loss on held-out data measured at every checkpoint: the run's learning curve (it
    /// does not choose the model).
    fn curve_loss(&self, _model: &Self::Model, _device: &B::Device) -> Option<f64> {
        None
    }
    /// Each item's length (tokens): when given, batches hold items of similar length, so
    /// padding costs less (see `bucketed_order`). Asked once per run, after a finished run
    /// was looked for.
    fn lengths(&self) -> Result<Option<Vec<usize>>> {
        Ok(None)
    }
    /// Whether the loss is the mean of independent per-item losses that draw nothing at
    /// random: then on the CPU each batch runs in parts, one per thread ([`loss_and_gradients`]).
    fn item_mean(&self) -> bool {
        false
    }
}

/// The model a fresh run starts from: `objective`'s, with the backend seeded by `seed` and every
/// lazily initialised parameter drawn at once, in the module's order, so that the starting
/// weights do not depend on which computation touches each first (or on a benchmark's reference
/// reading them all).
pub fn initial_model<B: AutodiffBackend, O: Objective<B>>(
    objective: &O,
    device: &B::Device,
    seed: u64,
) -> Result<O::Model> {
    B::seed(device, seed);
    let model = objective.init(device)?;
    let _ = model.valid();
    Ok(model)
}

/// Runs the optimisation described by `fresh` (its config and total steps), resuming from the
/// checkpoint in `state_dir` when it holds one of the same run, saving checkpoints there, and
/// stopping early after `pause_after` steps; on the CPU (`compute.batches`), a batch may run in
/// parts on its threads ([`Objective::item_mean`]). Returns the model (of a finished run with a
/// validation set: the epoch with the lowest validation loss) and the record; the run is
/// finished when `record.step == record.total_steps`.
pub fn optimise<B: AutodiffBackend, O: Objective<B> + Sync>(
    objective: &O,
    compute: &Compute<B::InnerBackend>,
    fresh: TrainRecord,
    state_dir: &Path,
    pause_after: Option<usize>,
) -> Result<(O::Model, TrainRecord)> {
    let device = &compute.device;
    let config = fresh.config.clone();
    let total = fresh.total_steps;
    let steps_per_epoch = fresh.steps_per_epoch();
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let mut optimizer = AdamW::new(config.weight_decay as f32, 1e-8).init::<B, O::Model>();

    let mut best: Option<O::Model> = None;
    let (mut model, mut record) = match read_record(state_dir)? {
        Some(saved) => {
            if !same_run(&saved, &fresh) {
                bail!(
                    "{} holds a checkpoint of a different training run (other data or \
                     hyper-parameters); use another --out, or delete that directory to start over",
                    state_dir.display()
                );
            }
            let model = objective
                .skeleton(device)
                .load_file(state_dir.join("model"), &recorder, device)
                .context("cannot load the training checkpoint")?;
            optimizer = optimizer.load_record(
                recorder
                    .load(state_dir.join("optimizer"), device)
                    .context("cannot load the optimizer checkpoint")?,
            );
            if saved.best_epoch.is_some() {
                best = Some(
                    objective
                        .skeleton(device)
                        .load_file(state_dir.join("best"), &recorder, device)
                        .context("cannot load the best model of the training checkpoint")?,
                );
            }
            tracing::info!(
                step = saved.step,
                total,
                "resuming from {}",
                state_dir.display()
            );
            (model, with_train_ids(saved, &fresh))
        }
        None => (initial_model(objective, device, config.seed)?, fresh),
    };

    let bar = progress::items(total as u64, "training");
    bar.set_position(record.step as u64);
    let started = Instant::now();
    let seconds_before = record.train_seconds;
    let pause_at = pause_after.map(|n| record.step + n);
    let lengths = objective.lengths()?;
    // A loss that is a mean over items runs a batch in one part per thread on the CPU.
    let parts = match compute.batches {
        Batches::Parallel if objective.item_mean() => rayon::current_num_threads(),
        _ => 1,
    };
    let order_of =
        |epoch: usize| training_order(&config, objective.items(), lengths.as_deref(), epoch);
    let mut order = order_of(record.step / steps_per_epoch);

    while record.step < total && pause_at != Some(record.step) {
        let (epoch, within) = (record.step / steps_per_epoch, record.step % steps_per_epoch);
        if within == 0 {
            order = order_of(epoch);
        }
        let start = within * config.batch_size;
        let batch = &order[start..(start + config.batch_size).min(order.len())];

        let step_started = Instant::now();
        B::seed(device, mix(config.seed, record.step as u64 + 1));
        let (loss_value, mut grads) =
            loss_and_gradients(objective, &model, batch, record.step, device, parts)?;
        if !loss_value.is_finite() {
            bail!(
                "the loss became {loss_value} at step {}; lower --lr",
                record.step
            );
        }
        clip_global_norm(&model, &mut grads, config.max_grad_norm);
        model = optimizer.step(learning_rate(&config, record.step, total), model, grads);

        record.step += 1;
        record.losses.push(loss_value);
        record
            .step_seconds
            .push(step_started.elapsed().as_secs_f64());
        let running = record
            .epoch_losses(steps_per_epoch)
            .last()
            .copied()
            .unwrap_or_default();
        bar.set_message(format!("loss {running:.3}"));
        bar.inc(1);
        if record.step % steps_per_epoch == 0
            && let Some(loss) = objective.validation_loss(&model, device)
        {
            let epoch = record.step / steps_per_epoch;
            let improved = record
                .validation_losses
                .iter()
                .all(|&previous| loss < previous);
            record.validation_losses.push(loss);
            tracing::info!(epoch, loss, improved, "validation loss");
            if improved {
                record.best_epoch = Some(epoch);
                best = Some(model.clone());
            }
        }
        if record.step % config.checkpoint_every.max(1) == 0
            || pause_at == Some(record.step)
            || record.step == total
        {
            record.train_seconds = seconds_before + started.elapsed().as_secs_f64();
            if let Some(loss) = objective.curve_loss(&model, device) {
                tracing::info!(step = record.step, loss, "held-out loss");
                record.held_out_curve.push(CurvePoint {
                    step: record.step,
                    loss,
                });
            }
            save_state(
                state_dir,
                &model,
                best.as_ref(),
                &optimizer,
                &record,
                &recorder,
            )?;
            if !std::io::stderr().is_terminal() {
                log_progress(&record, config.checkpoint_every.max(1));
            }
        }
    }
    bar.finish_and_clear();
    record.train_seconds = seconds_before + started.elapsed().as_secs_f64();
    let finished = record.step == total;
    Ok((
        if finished {
            best.unwrap_or(model)
        } else {
            model
        },
        record,
    ))
}

/// The record of the finished model in `out` if it comes from the run `fresh` describes
/// (`None` if `out` holds no finished model, i.e. no file `artifact`); an error if it comes
/// from another run.
pub fn finished_run(
    out: &Path,
    fresh: &TrainRecord,
    artifact: &str,
) -> Result<Option<TrainRecord>> {
    let Some(done) = read_record(out)? else {
        return Ok(None);
    };
    if !same_run(&done, fresh) {
        bail!(
            "{} holds a model from a different training run (other data or \
             hyper-parameters); use another --out, or delete it to train again",
            out.display()
        );
    }
    if !out.join(artifact).is_file() {
        return Ok(None);
    }
    tracing::info!(
        "{} already holds this model; delete it to train again",
        out.display()
    );
    let lacked_ids = done.train_ids.is_empty() && !fresh.train_ids.is_empty();
    let done = with_train_ids(done, fresh);
    if lacked_ids {
        write_atomic(&out.join(RECORD_FILE), &serde_json::to_vec_pretty(&done)?)?;
    }
    Ok(Some(done))
}

/// A record saved before records kept their training ids, given the ids of the same run.
fn with_train_ids(saved: TrainRecord, fresh: &TrainRecord) -> TrainRecord {
    match saved.train_ids.is_empty() {
        true => TrainRecord {
            train_ids: fresh.train_ids.clone(),
            ..saved
        },
        false => saved,
    }
}

/// Writes the record of a finished run into `out` and removes its checkpoints.
pub fn finish_run(out: &Path, record: &TrainRecord) -> Result<()> {
    write_atomic(&out.join(RECORD_FILE), &serde_json::to_vec_pretty(record)?)?;
    fs::remove_dir_all(out.join(STATE_DIR)).ok();
    Ok(())
}

/// The checkpoint directory of a run writing into `out`.
pub fn state_dir(out: &Path) -> PathBuf {
    out.join(STATE_DIR)
}

/// Linear layers in bf16 on this thread while the returned value lives, when `config` asks for
/// it: only on the CPU backend of a CPU with AVX-512 BF16 (AMX's products where it has them).
fn bf16_training<B: Backend>(config: &TrainConfig) -> Result<Option<Bf16Training>> {
    if !config.bf16 {
        return Ok(None);
    }
    if std::any::TypeId::of::<B>() != std::any::TypeId::of::<burn::backend::Flex>() {
        bail!("--bf16 is for the CPU backend; on a GPU the products stay f32");
    }
    let Some(kernel) = Bf16Kernel::best() else {
        bail!(
            "--bf16 needs a CPU with AVX-512 BF16 (AMD Zen 4 or later, Intel Cooper Lake or \
             Sapphire Rapids and later); this CPU has none: train without --bf16"
        );
    };
    Ok(Some(Bf16Training::enter(kernel)))
}

/// Fine-tunes a classifier on `run.train`, starting from the encoder in `run.encoder_dir`,
/// resuming from `run.out/train-state` if a checkpoint of the same run is there. On success the
/// model is saved to `run.out` (see [`crate::model_dirs::save_classifier`]) and the state removed.
pub fn train_classifier<B: Backend>(compute: Compute<B>, run: &TrainRun) -> Result<TrainOutcome> {
    let config = &run.config;
    if run.train.is_empty() {
        bail!("the training set is empty");
    }
    if run.train.labels.len() < 2 {
        bail!(
            "a classifier needs at least two labels, found {:?}",
            run.train.labels.names()
        );
    }
    let _bf16 = bf16_training::<B>(config)?;
    let files = BertFiles::read(run.encoder_dir)?;
    let objective = ClassifierObjective {
        train: run.train,
        batch_order: config.batch_order,
        tokenizer: files.tokenizer(config.max_len)?,
        model_config: classifier_config(&files, run.train, config)?,
        files: &files,
    };
    let fresh = TrainRecord {
        train_ids: run.train.examples.iter().map(|e| e.id.clone()).collect(),
        ..TrainRecord::new(
            config,
            run.encoder_dir,
            &run.train.name,
            fingerprint(run.train),
            objective.model_config.labels.clone(),
            run.train.len(),
            std::any::type_name::<B>(),
        )
    };
    run_training::<Autodiff<B>, _>(
        &objective,
        &compute,
        fresh,
        run.out,
        "model.safetensors",
        run.pause_after,
        |model| {
            save_classifier(
                run.out,
                &model.valid(),
                &objective.model_config,
                &files.tokenizer_json,
            )
        },
    )
}

/// The classifier a run trains: Hugging Face's head for the encoder's family (or the
/// mean-pooled head on BERT), the training set's labels.
fn classifier_config(
    files: &BertFiles,
    train: &Dataset,
    config: &TrainConfig,
) -> Result<ClassifierConfig> {
    let architecture = match (files.architecture, config.head) {
        (Architecture::DistilBert, _) => bail!(
            "{}: fine-tuning DistilBERT is not supported (its checkpoints are read, not \
             written); start from a BERT or RoBERTa checkpoint",
            files.dir.display()
        ),
        (Architecture::Bert, Head::MeanPooled) => Architecture::MeanPooled,
        (_, Head::MeanPooled) => bail!("the mean-pooled head is only trained on BERT encoders"),
        (family, Head::HfPooler) => family,
    };
    Ok(ClassifierConfig {
        architecture,
        ..ClassifierConfig::bert(
            files.config.clone(),
            train.labels.names().to_vec(),
            config.max_len,
        )
    })
}

/// A whole training run writing into `out`: reuses a finished model of the same run (one whose
/// `artifact` file exists), otherwise runs or resumes [`optimise`]; when the run finishes,
/// `save` writes the model and the record is written beside it.
pub fn run_training<B: AutodiffBackend, O: Objective<B> + Sync>(
    objective: &O,
    compute: &Compute<B::InnerBackend>,
    fresh: TrainRecord,
    out: &Path,
    artifact: &str,
    pause_after: Option<usize>,
    save: impl FnOnce(O::Model) -> Result<()>,
) -> Result<TrainOutcome> {
    if let Some(record) = finished_run(out, &fresh, artifact)? {
        return Ok(TrainOutcome {
            record,
            paused: false,
        });
    }
    let (model, record) = optimise(objective, compute, fresh, &state_dir(out), pause_after)?;
    let paused = record.step < record.total_steps;
    if !paused {
        save(model)?;
        finish_run(out, &record)?;
    }
    Ok(TrainOutcome { record, paused })
}

/// Cross-entropy of a sequence classifier on labelled examples.
struct ClassifierObjective<'a> {
    train: &'a Dataset,
    batch_order: BatchOrder,
    tokenizer: TextTokenizer,
    model_config: ClassifierConfig,
    files: &'a BertFiles,
}

impl<B: AutodiffBackend> Objective<B> for ClassifierObjective<'_> {
    type Model = SequenceClassifier<B>;

    fn items(&self) -> usize {
        self.train.len()
    }

    fn init(&self, device: &B::Device) -> Result<Self::Model> {
        // The pretrained encoder and its pooler (as `from_pretrained` starts a
        // `BertForSequenceClassification`); the classifier layer is new.
        let mut model = self.model_config.init::<B>(device);
        load_encoder_weights(&mut model, self.files.weights()?)
            .with_context(|| format!("loading {}", self.files.dir.display()))?;
        Ok(model)
    }

    fn skeleton(&self, device: &B::Device) -> Self::Model {
        self.model_config.init::<B>(device)
    }

    fn lengths(&self) -> Result<Option<Vec<usize>>> {
        Ok(match self.batch_order {
            BatchOrder::Shuffled => None,
            BatchOrder::ByLength => {
                let inputs: Vec<&Input> = self.train.examples.iter().map(|e| &e.input).collect();
                Some(self.tokenizer.count_input_tokens(&inputs)?)
            }
        })
    }

    fn loss(
        &self,
        model: &Self::Model,
        batch: &[usize],
        _step: usize,
        device: &B::Device,
    ) -> Result<Tensor<B, 1>> {
        let examples: Vec<&Example> = batch.iter().map(|&i| &self.train.examples[i]).collect();
        let input = self
            .tokenizer
            .encode_inputs(&examples.iter().map(|e| &e.input).collect::<Vec<_>>())?
            .to_input::<B>(device);
        let targets: Vec<i64> = examples.iter().map(|e| e.label as i64).collect();
        let targets =
            Tensor::<B, 1, Int>::from_data(TensorData::new(targets, [examples.len()]), device);
        Ok(CrossEntropyLossConfig::new()
            .init(device)
            .forward(model.forward(&input), targets))
    }
}

/// Whether two records describe the same training run (data, encoder and hyper-parameters).
fn same_run(a: &TrainRecord, b: &TrainRecord) -> bool {
    a.config == b.config
        && a.train_fingerprint == b.train_fingerprint
        && a.labels == b.labels
        && a.encoder == b.encoder
        && a.total_steps == b.total_steps
}

/// The training record of the model in `dir`, if it has one.
pub fn read_record(dir: &Path) -> Result<Option<TrainRecord>> {
    let path = dir.join(RECORD_FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("corrupt {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes model, optimizer and record into a fresh directory, then swaps it in with renames,
/// so a kill at any moment leaves either the previous checkpoint or the new one.
fn save_state<B: AutodiffBackend, M: AutodiffModule<B>, O: Optimizer<M, B>>(
    state_dir: &Path,
    model: &M,
    best: Option<&M>,
    optimizer: &O,
    record: &TrainRecord,
    recorder: &NamedMpkFileRecorder<FullPrecisionSettings>,
) -> Result<()> {
    let parent = state_dir.parent().expect("state dir has a parent");
    fs::create_dir_all(parent)?;
    let staging = parent.join(format!("{STATE_DIR}.new"));
    let old = parent.join(format!("{STATE_DIR}.old"));
    fs::remove_dir_all(&staging).ok();
    fs::create_dir_all(&staging)?;
    model
        .clone()
        .save_file(staging.join("model"), recorder)
        .context("cannot save the model checkpoint")?;
    if let Some(best) = best {
        best.clone()
            .save_file(staging.join("best"), recorder)
            .context("cannot save the best model")?;
    }
    recorder
        .record(optimizer.to_record(), staging.join("optimizer"))
        .context("cannot save the optimizer checkpoint")?;
    fs::write(
        staging.join(RECORD_FILE),
        serde_json::to_vec_pretty(record)?,
    )?;
    fs::remove_dir_all(&old).ok();
    if state_dir.exists() {
        fs::rename(state_dir, &old)?;
    }
    fs::rename(&staging, state_dir)?;
    fs::remove_dir_all(&old).ok();
    Ok(())
}

/// Scales all gradients so that their global L2 norm is at most `max_norm` (like PyTorch's
/// `clip_grad_norm_`; burn's built-in clipping works per parameter tensor).
fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) {
    struct SquaredNorm<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        sum: Option<Tensor<B::InnerBackend, 1>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
                let s = g.powi_scalar(2).sum();
                self.sum = Some(match self.sum.take() {
                    Some(acc) => acc + s,
                    None => s,
                });
            }
        }
    }
    struct Scale<'a, B: AutodiffBackend> {
        grads: &'a mut GradientsParams,
        factor: f64,
        _backend: std::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let id: ParamId = param.id;
            if let Some(g) = self.grads.remove::<B::InnerBackend, D>(id) {
                self.grads.register(id, g * self.factor);
            }
        }
    }

    let mut norm = SquaredNorm::<B> { grads, sum: None };
    model.visit(&mut norm);
    let Some(sum) = norm.sum else { return };
    let total = (sum.into_scalar().elem::<f32>() as f64).sqrt();
    if total > max_norm {
        let factor = max_norm / (total + 1e-6);
        model.visit(&mut Scale::<B> {
            grads,
            factor,
            _backend: std::marker::PhantomData,
        });
    }
}

/// The label the classifier predicts for each example of `dataset`, with a progress bar.
pub fn predicted_labels<B: Backend>(
    classifier: &TextClassifier<B>,
    dataset: &Dataset,
    batch_size: usize,
    batches: Batches,
) -> Result<Vec<usize>> {
    let bar = progress::items(dataset.len() as u64, "evaluating");
    let inputs: Vec<_> = dataset.examples.iter().map(|e| &e.input).collect();
    let probs = classifier.predict(&inputs, batch_size, &batches, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let flat: Vec<f32> = probs.into_iter().flatten().collect();
    Ok(argmax_rows(&flat, classifier.config.labels.len()))
}

/// Accuracy of a classifier on a dataset, with a progress bar.
pub fn evaluate<B: Backend>(
    classifier: &TextClassifier<B>,
    dataset: &Dataset,
    batch_size: usize,
    batches: Batches,
) -> Result<Evaluation> {
    let started = Instant::now();
    let predicted = predicted_labels(classifier, dataset, batch_size, batches)?;
    let gold: Vec<usize> = dataset.examples.iter().map(|e| e.label).collect();
    Ok(Evaluation {
        dataset: dataset.name.clone(),
        examples: dataset.len(),
        accuracy: accuracy(&predicted, &gold),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Loads the classifier in `dir`, checking that its labels are `dataset`'s.
fn load_for<B: Backend>(
    compute: &Compute<B>,
    dir: &Path,
    dataset: &Dataset,
) -> Result<TextClassifier<B>> {
    let classifier = load_classifier::<B>(dir, &compute.device)?;
    if classifier.config.labels != dataset.labels.names() {
        bail!(
            "the classifier's labels {:?} differ from {}'s {:?}",
            classifier.config.labels,
            dataset.name,
            dataset.labels.names()
        );
    }
    Ok(classifier)
}

/// Loads the classifier in `dir` and evaluates it on `dataset`, whose labels must match; with
/// `int8`, its encoder multiplies in int8 where it can ([`int8_where_possible`]), with
/// `int8_kernel` if given.
pub fn evaluate_dir<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    dataset: &Dataset,
    batch_size: usize,
    int8: bool,
    int8_kernel: Option<Kernel>,
) -> Result<Evaluation> {
    let mut classifier = load_for(&compute, dir, dataset)?;
    if int8 {
        classifier.model.bert = int8_where_possible(classifier.model.bert, int8_kernel);
    }
    evaluate(&classifier, dataset, batch_size, compute.batches)
}

/// Loads the classifier in `dir` and predicts a label id for each example of each dataset
/// (whose labels must match the classifier's).
pub fn predict_dir<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    datasets: &[&Dataset],
    batch_size: usize,
) -> Result<Vec<Vec<usize>>> {
    let Some(first) = datasets.first() else {
        return Ok(Vec::new());
    };
    let classifier = load_for(&compute, dir, first)?;
    datasets
        .iter()
        .map(|dataset| predicted_labels(&classifier, dataset, batch_size, compute.batches))
        .collect()
}

/// The result of [`evaluate`].
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub dataset: String,
    pub examples: usize,
    pub accuracy: f64,
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        let config = TrainConfig {
            lr: 1.0,
            warmup: 0.2,
            ..TrainConfig::default()
        };
        let lrs: Vec<f64> = (0..10).map(|s| learning_rate(&config, s, 10)).collect();
        let expected = [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125];
        for (got, want) in lrs.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{lrs:?}");
        }
        let no_warmup = TrainConfig {
            warmup: 0.0,
            ..config
        };
        assert_eq!(learning_rate(&no_warmup, 0, 4), 1.0);
    }

    #[test]
    fn epoch_orders_are_seeded_permutations() {
        let a = epoch_order(50, 1, 0);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(a, epoch_order(50, 1, 0));
        assert_ne!(a, epoch_order(50, 1, 1));
        assert_ne!(a, epoch_order(50, 2, 0));
    }

    #[test]
    fn bucketed_batches_are_a_permutation_of_similar_lengths() {
        let lengths: Vec<usize> = (0..1000).map(|i| (i * 7919) % 97).collect();
        let order = bucketed_order(&lengths, 8, 3, 0);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(order, bucketed_order(&lengths, 8, 3, 0));
        assert_ne!(order, bucketed_order(&lengths, 8, 3, 1));
        let spread = |order: &[usize]| -> usize {
            order
                .chunks(8)
                .map(|batch| {
                    let lens = batch.iter().map(|&i| lengths[i]);
                    lens.clone().max().unwrap() - lens.min().unwrap()
                })
                .sum()
        };
        // Random batches of 8 out of 0..97 spread ~ 70 each; bucketed ones a few.
        assert!(spread(&order) * 10 < spread(&epoch_order(1000, 3, 0)));
        // Batches are not in length order.
        let firsts: Vec<usize> = order.chunks(8).map(|b| lengths[b[0]]).collect();
        assert!(firsts.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn global_norm_clipping_scales_all_gradients_together() {
        use burn::nn::{Linear, LinearConfig};
        type B = Autodiff<crate::compute::Cpu>;
        let _alone = crate::training::train_alone();
        let device = Default::default();
        let layer: Linear<B> = LinearConfig::new(2, 1).init(&device);
        let x = Tensor::<B, 2>::from_data([[3.0, 4.0]], &device);
        // d(sum(y))/dW = x^T = [3, 4], d/db = 1: global norm sqrt(9 + 16 + 1).
        let loss = layer.forward(x).sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &layer);
        clip_global_norm(&layer, &mut grads, 1.0);
        let w = grads
            .get::<crate::compute::Cpu, 2>(layer.weight.id)
            .unwrap()
            .into_data()
            .into_vec::<f32>()
            .unwrap();
        let b = grads
            .get::<crate::compute::Cpu, 1>(layer.bias.as_ref().unwrap().id)
            .unwrap()
            .into_data()
            .into_vec::<f32>()
            .unwrap();
        let norm = 26f32.sqrt();
        assert!(
            (w[0] - 3.0 / norm).abs() < 1e-5 && (w[1] - 4.0 / norm).abs() < 1e-5,
            "{w:?}"
        );
        assert!((b[0] - 1.0 / norm).abs() < 1e-5, "{b:?}");
    }
}
