//! `flipside bench train`: classifier fine-tuning steps per second against `transformers`
//! (PyTorch), the same texts, batches, hyper-parameters and threads, in one run.

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use clap::{Args, ValueEnum};
use flipside_shared::data::{Dataset, Input};
use flipside_shared::ops::bf16::Bf16Kernel;
use serde::Deserialize;

use super::{TorchBenchArgs, run_reference_script};
use crate::cli::data::ReadArgs;
use crate::compute::Compute;
use crate::home::Home;
use crate::model_dirs::{BertFiles, DEFAULT_ENCODER, resolve_model_dir};
use crate::training::classifier::{
    BatchOrder, TrainConfig, TrainRun, train_classifier, training_order,
};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/transformers_train_classifier.py");

#[derive(Debug, Args)]
pub struct TrainBenchArgs {
    /// Optimiser steps timed (after one untimed warm-up step)
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    #[arg(long, default_value_t = TrainConfig::default().batch_size)]
    pub batch_size: usize,
    /// What is trained on: IMDb reviews of at least `--max-len` words (every batch that long)
    /// or Rotten Tomatoes sentences (each batch padded to its longest)
    #[arg(long, value_enum, default_value_t = BenchTexts::LongReviews)]
    pub texts: BenchTexts,
    /// Tokens per text at most (long reviews: every text is cut to it)
    #[arg(long, default_value_t = 128)]
    pub max_len: usize,
    /// Flipside's batches (`classifier train --batch-order`); transformers trains the same
    /// batches, and with `by-length` also shuffled ones, as its Trainer does by default
    #[arg(long, value_enum, default_value_t = BatchOrder::Shuffled)]
    pub batch_order: BatchOrder,
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

/// The texts `bench train` fine-tunes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchTexts {
    /// IMDb training reviews of at least `--max-len` words: every batch is full length.
    LongReviews,
    /// Rotten Tomatoes training sentences: batches of mixed lengths.
    Sentences,
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
    let count = (args.steps + 1) * args.batch_size;
    let data = match args.texts {
        BenchTexts::LongReviews => long_reviews(home, count, args.max_len)?,
        BenchTexts::Sentences => sentences(home, count)?,
    };
    let model_dir = resolve_model_dir(home, &args.model)?;
    let config = TrainConfig {
        epochs: 1,
        batch_size: args.batch_size,
        max_len: args.max_len,
        checkpoint_every: usize::MAX,
        bf16: args.bf16,
        batch_order: args.batch_order,
        ..TrainConfig::default()
    };
    let inputs: Vec<&Input> = data.examples.iter().map(|e| &e.input).collect();
    let tokens = BertFiles::read(&model_dir)?
        .tokenizer(args.max_len)?
        .count_input_tokens(&inputs)?;
    let texts = match args.texts {
        BenchTexts::LongReviews => "IMDb reviews",
        BenchTexts::Sentences => "Rotten Tomatoes sentences",
    };
    println!(
        "train bench: {} fine-tuned on {texts} ({:.1} tokens on average, at most {}), {} timed steps of {} after one warm-up, {} batches, {threads} threads; CPU features: {}",
        args.model,
        tokens.iter().sum::<usize>() as f64 / tokens.len() as f64,
        args.max_len,
        args.steps,
        args.batch_size,
        args.batch_order
            .to_possible_value()
            .expect("an order")
            .get_name(),
        super::cpu_features()
    );

    // The reference trains the batches Flipside trains (its texts given in Flipside's order),
    // and with batches by length also shuffled ones; in f32, and with --bf16 under its autocast
    // to bf16 too.
    let lengths = (args.batch_order == BatchOrder::ByLength).then_some(tokens.as_slice());
    let mut orders = vec![("", training_order(&config, data.len(), lengths, 0))];
    if lengths.is_some() {
        let shuffled = training_order(&config, data.len(), None, 0);
        orders.push((" in shuffled batches", shuffled));
    }
    let mut references = Vec::new();
    let precisions: &[bool] = if args.bf16 { &[false, true] } else { &[false] };
    for (&autocast_bf16, (batches, order)) in precisions
        .iter()
        .flat_map(|precision| orders.iter().map(move |order| (precision, order)))
    {
        let Some(python) = args.sides.reference_python(home)? else {
            break;
        };
        let examples: Vec<_> = order.iter().map(|&i| &data.examples[i]).collect();
        let request = serde_json::json!({
            "model_dir": model_dir,
            "texts": examples.iter().map(|e| e.input.texts()[0]).collect::<Vec<_>>(),
            "labels": examples.iter().map(|e| e.label).collect::<Vec<_>>(),
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
        references.push((autocast_bf16, *batches, result));
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
    for (autocast_bf16, batches, reference) in references {
        let theirs = args.steps as f64 / reference.seconds;
        let precision = if autocast_bf16 { ", autocast bf16" } else { "" };
        println!(
            "{:<40} {theirs:>7.3} steps/s  first loss {:.4}",
            format!(
                "transformers (torch {}, {}{precision}, {} threads){batches}",
                reference.torch, reference.device, reference.threads
            ),
            reference.losses.first().copied().unwrap_or(f64::NAN)
        );
        println!(
            "ratio flipside / transformers{precision}{batches}: {:.2}x",
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

/// `count` Rotten Tomatoes training sentences (a seeded sample), of their own lengths.
fn sentences(home: &Home, count: usize) -> Result<Dataset> {
    let data = ReadArgs::defaults().load(home, "rotten-tomatoes:train")?;
    if data.len() < count {
        bail!(
            "Rotten Tomatoes has {} training sentences; ask for fewer --steps",
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
