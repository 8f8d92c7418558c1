//! `flipside bench encode`: sentence embeddings per second against sentence-transformers.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::backend::Backend;
use clap::Args;

use super::{TorchBenchArgs, run_reference_script};
use serde::Deserialize;

use crate::cli::data::ReadArgs;
use crate::compute::{Compute, DeviceChoice};
use crate::home::Home;
use crate::models::{DEFAULT_ENCODER, load_encoder, resolve_model_dir};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/sentence_transformers_encode.py");

#[derive(Debug, Args)]
pub struct EncodeBenchArgs {
    /// Sentences to encode (Rotten Tomatoes sentences, in file order)
    #[arg(long, default_value_t = 2048)]
    pub sentences: usize,
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub model: String,
    #[command(flatten)]
    pub sides: TorchBenchArgs,
}

struct Timing {
    seconds: f64,
    first_embeddings: Vec<Vec<f32>>,
    /// What ran, e.g. the library versions.
    description: String,
}

#[derive(Deserialize)]
struct ReferenceResult {
    seconds: f64,
    torch: String,
    threads: usize,
    first_embeddings: Vec<Vec<f32>>,
}

pub fn bench_encode(home: &Home, args: EncodeBenchArgs) -> Result<()> {
    let threads = args.sides.threads();
    let data = ReadArgs::defaults().load(home, "rotten-tomatoes")?;
    let sentences: Vec<String> = data
        .examples
        .iter()
        .take(args.sentences)
        .map(|e| e.input.texts()[0].to_string())
        .collect();
    let model_dir = resolve_model_dir(home, &args.model)?;
    let max_len = crate::models::BertFiles::read(&model_dir)?.max_len;
    let mean_words = sentences
        .iter()
        .map(|s| s.split_whitespace().count())
        .sum::<usize>() as f64
        / sentences.len().max(1) as f64;
    println!(
        "encode bench: {} sentences (mean {mean_words:.1} words), batch {}, {threads} threads, max_len {max_len}; CPU features: {}",
        sentences.len(),
        args.batch_size,
        super::cpu_features()
    );

    let reference = match args.sides.reference_python(home)? {
        Some(python) => Some(run_reference(
            python,
            &model_dir,
            &sentences,
            args.batch_size,
            max_len,
            threads,
            args.sides.device,
        )?),
        None => None,
    };
    // Flipside runs second, on the same thread count (rayon reads RAYON_NUM_THREADS).
    let ours = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?
        .install(|| {
            with_backend!(
                args.sides.device,
                time_flipside(&model_dir, &sentences, args.batch_size)
            )
        })?;

    let ours_rate = sentences.len() as f64 / ours.seconds;
    println!("{:<28} {ours_rate:>9.1} sentences/s", ours.description);
    if let Some(reference) = reference {
        let theirs_rate = sentences.len() as f64 / reference.seconds;
        println!(
            "{:<28} {theirs_rate:>9.1} sentences/s",
            reference.description
        );
        println!(
            "ratio flipside / sentence-transformers: {:.2}x",
            ours_rate / theirs_rate
        );
        let max_diff = ours
            .first_embeddings
            .iter()
            .flatten()
            .zip(reference.first_embeddings.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("max |difference| of the first embeddings: {max_diff:.2e}");
    }
    Ok(())
}

fn time_flipside<B: Backend>(
    compute: Compute<B>,
    model_dir: &Path,
    sentences: &[String],
    batch_size: usize,
) -> Result<Timing> {
    let encoder = load_encoder::<B>(model_dir, &compute.device)?;
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let warm_up = &texts[..(2 * batch_size).min(texts.len())];
    encoder.embed_all(warm_up, batch_size, &compute.batches, &|_| {})?;
    let started = Instant::now();
    let embeddings = encoder.embed_all(&texts, batch_size, &compute.batches, &|_| {})?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Timing {
        seconds,
        first_embeddings: embeddings.into_iter().take(8).collect(),
        description: format!("flipside (burn {})", std::any::type_name::<B>()),
    })
}

fn run_reference(
    python: Command,
    model_dir: &Path,
    sentences: &[String],
    batch_size: usize,
    max_len: usize,
    threads: usize,
    device: DeviceChoice,
) -> Result<Timing> {
    let request = serde_json::json!({
        "model_dir": model_dir, "sentences": sentences, "batch_size": batch_size,
        "max_len": max_len, "threads": threads, "device": device,
    });
    let stdout = run_reference_script(python, REFERENCE_SCRIPT, &request, "sentence-transformers")?;
    let result: ReferenceResult =
        serde_json::from_slice(&stdout).context("the reference printed no result")?;
    Ok(Timing {
        seconds: result.seconds,
        first_embeddings: result.first_embeddings,
        description: format!(
            "sentence-transformers (torch {}, {} threads)",
            result.torch, result.threads
        ),
    })
}
