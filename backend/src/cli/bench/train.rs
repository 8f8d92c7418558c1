//! `flipside bench train`: classifier fine-tuning steps per second against `transformers`
//! (PyTorch), the same reviews, batches, hyper-parameters and threads, in one run.

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use clap::{Args, ValueEnum};
use flipside_shared::data::Dataset;
use flipside_shared::models::bf16::Bf16Kernel;
use serde::Deserialize;

use super::{TorchBenchArgs, run_reference_script};
use crate::cli::data::ReadArgs;
use crate::compute::Compute;
use crate::home::Home;
use crate::models::{DEFAULT_ENCODER, resolve_model_dir};
use crate::train::{TrainConfig, TrainRun, train_classifier};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/transformers_train_classifier.py");

#[derive(Debug, Args)]
pub struct TrainBenchArgs {
    /// Optimiser steps timed (after one untimed warm-up step)
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    #[arg(long, default_value_t = TrainConfig::default().batch_size)]
    pub batch_size: usize,
    /// Tokens per review: only reviews of at least this many words are used, so every batch is
    /// this long on both sides whatever order it is trained in
    #[arg(long, default_value_t = 128)]
    pub max_len: usize,
    /// The encoder fine-tuned: a BERT directory or a model asset name
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub model: String,
    /// Train with the linear layers in bf16 (`classifier train --bf16`); the reference then
    /// runs twice, in f32 and under PyTorch's CPU autocast to bf16
    #[arg(long)]
    pub bf16: bool,
    #[command(flatten)]
    pub sides: TorchBenchArgs,
}

#[derive(Deserialize)]
struct ReferenceResult {
    seconds: f64,
    losses: Vec<f64>,
    torch: String,
    threads: usize,
    device: String,
}

pub fn bench_train(home: &Home, args: TrainBenchArgs) -> Result<()> {
    let threads = args.sides.threads();
    let device = args.sides.device;
    let data = long_reviews(home, (args.steps + 1) * args.batch_size, args.max_len)?;
    let model_dir = resolve_model_dir(home, &args.model)?;
    let config = TrainConfig {
        epochs: 1,
        batch_size: args.batch_size,
        max_len: args.max_len,
        checkpoint_every: usize::MAX,
        bf16: args.bf16,
        ..TrainConfig::default()
    };
    println!(
        "train bench: {} fine-tuned on IMDb reviews, {} timed steps of {} × {} tokens after one warm-up, {threads} threads; CPU features: {}",
        args.model,
        args.steps,
        args.batch_size,
        args.max_len,
        super::cpu_features()
    );

    // PyTorch in f32, and with --bf16 under its autocast to bf16 too.
    let mut references = Vec::new();
    let precisions: &[bool] = if args.bf16 { &[false, true] } else { &[false] };
    for &autocast_bf16 in precisions {
        let Some(python) = args.sides.reference_python(home)? else {
            break;
        };
        let request = serde_json::json!({
            "model_dir": model_dir,
            "texts": data.examples.iter().map(|e| e.input.texts()[0]).collect::<Vec<_>>(),
            "labels": data.examples.iter().map(|e| e.label).collect::<Vec<_>>(),
            "num_labels": data.labels.names().len(),
            "batch_size": config.batch_size, "max_len": config.max_len,
            "steps": args.steps + 1, "lr": config.lr, "weight_decay": config.weight_decay,
            "warmup": config.warmup, "max_grad_norm": config.max_grad_norm,
            "threads": threads, "device": device, "seed": config.seed,
            "autocast_bf16": autocast_bf16,
        });
        let stdout = run_reference_script(python, REFERENCE_SCRIPT, &request, "transformers")?;
        let result = serde_json::from_slice::<ReferenceResult>(&stdout)
            .context("the reference printed no result")?;
        references.push((autocast_bf16, result));
    }
    let out = tempfile::tempdir()?;
    let run = TrainRun {
        train: &data,
        encoder_dir: &model_dir,
        out: out.path(),
        config,
        pause_after: None,
    };
    let (seconds, first_loss) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?
        .install(|| with_backend!(device, time_flipside(&run)))?;

    let ours = args.steps as f64 / seconds;
    println!(
        "{:<40} {ours:>7.3} steps/s  first loss {first_loss:.4}",
        format!(
            "flipside (burn, {}{})",
            device.to_possible_value().expect("a device").get_name(),
            match Bf16Kernel::best().filter(|_| args.bf16) {
                Some(kernel) => format!(", bf16 {}", kernel.name()),
                None => String::new(),
            }
        )
    );
    for (autocast_bf16, reference) in references {
        let theirs = args.steps as f64 / reference.seconds;
        let precision = if autocast_bf16 { ", autocast bf16" } else { "" };
        println!(
            "{:<40} {theirs:>7.3} steps/s  first loss {:.4}",
            format!(
                "transformers (torch {}, {}{precision}, {} threads)",
                reference.torch, reference.device, reference.threads
            ),
            reference.losses.first().copied().unwrap_or(f64::NAN)
        );
        println!(
            "ratio flipside / transformers{precision}: {:.2}x",
            ours / theirs
        );
    }
    Ok(())
}

/// `count` IMDb training reviews (a seeded sample) of at least `max_len` words: truncated to
/// `max_len` tokens, every batch has that length.
fn long_reviews(home: &Home, count: usize, max_len: usize) -> Result<Dataset> {
    let mut data = ReadArgs::defaults().load(home, "imdb:train")?;
    data.examples
        .retain(|e| e.input.texts()[0].split_whitespace().count() >= max_len);
    if data.len() < count {
        bail!(
            "only {} IMDb reviews have {max_len} words or more; ask for fewer --steps or a \
             smaller --max-len",
            data.len()
        );
    }
    Ok(data.limited(Some(count), TrainConfig::default().seed))
}

/// Trains with the library's training function; returns the seconds of every step after the
/// first and the first step's loss.
fn time_flipside<B: Backend>(compute: Compute<B>, run: &TrainRun) -> Result<(f64, f64)> {
    let device = compute.device.clone();
    let outcome = train_classifier(compute, run)?;
    // Nothing left queued (and CubeCL prints its kernel profile here when asked to).
    crate::compute::wait_for::<B>(&device)?;
    let record = outcome.record;
    Ok((
        record.step_seconds.iter().skip(1).sum(),
        record.losses.first().copied().unwrap_or(f64::NAN),
    ))
}
