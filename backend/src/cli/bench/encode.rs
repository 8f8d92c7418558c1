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
use crate::compute::Compute;
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, load_encoder, resolve_model_dir};
use crate::with_backend;
use flipside_shared::ops::int8::Kernel;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/sentence_transformers_encode.py");

#[derive(Debug, Args)]
pub struct EncodeBenchArgs {
    /// Sentences to encode (Rotten Tomatoes sentences, in file order). Each side encodes them
    /// twice and the second pass is compared; the first (on a GPU, with its kernels compiled
    /// and tuned for every new shape) is printed beside it
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
    /// The timed pass, after a first pass over the same sentences.
    seconds: f64,
    /// The first pass: on a GPU it includes compiling and tuning kernels for every shape.
    first_pass_seconds: Option<f64>,
    /// Flipside's: every sentence's; the reference's: the first 8.
    first_embeddings: Vec<Vec<f32>>,
    /// What ran, e.g. the library versions.
    description: String,
}

#[derive(Deserialize)]
struct ReferenceResult {
    seconds: f64,
    first_pass_seconds: f64,
    /// One more pass, in batches sorted by token count as Flipside's.
    token_sorted_seconds: f64,
    /// After `torch.ao.quantization.quantize_dynamic` (CPU, when asked).
    int8_seconds: Option<f64>,
    /// The same int8 model in batches sorted by token count.
    int8_token_sorted_seconds: Option<f64>,
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
    let max_len = crate::model_dirs::BertFiles::read(&model_dir)?.max_len;
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

    let kernels = args.sides.int8_kernels();
    let reference = match args.sides.reference_python(home)? {
        Some(python) => {
            let request = serde_json::json!({
                "model_dir": model_dir, "sentences": sentences, "batch_size": args.batch_size,
                "max_len": max_len, "threads": threads, "device": args.sides.device,
                "int8": !kernels.is_empty(),
            });
            Some(run_reference(python, &request)?)
        }
        None => None,
    };
    // Flipside runs second, on the same thread count (rayon reads RAYON_NUM_THREADS), in f32
    // and then with each int8 kernel.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let run = |kernel| {
        pool.install(|| {
            with_backend!(
                args.sides.device,
                time_flipside(&model_dir, &sentences, args.batch_size, kernel)
            )
        })
    };
    let ours = run(None)?;
    let int8s = kernels
        .iter()
        .map(|&kernel| run(Some(kernel)))
        .collect::<Result<Vec<_>>>()?;

    let rate = |timing: &Timing| sentences.len() as f64 / timing.seconds;
    let timings: Vec<&Timing> = [Some(&ours)]
        .into_iter()
        .chain(int8s.iter().map(Some))
        .chain(reference.iter().flat_map(|r| {
            [
                Some(&r.own_batches),
                Some(&r.token_sorted),
                r.int8.as_ref(),
                r.int8_token_sorted.as_ref(),
            ]
        }))
        .flatten()
        .collect();
    let width = timings
        .iter()
        .map(|t| t.description.len())
        .max()
        .unwrap_or(0);
    for timing in timings {
        let first_pass = timing
            .first_pass_seconds
            .map(|seconds| format!(" (first pass {:.1})", sentences.len() as f64 / seconds))
            .unwrap_or_default();
        println!(
            "{:<width$} {:>9.1} sentences/s{first_pass}",
            timing.description,
            rate(timing)
        );
    }
    for (kernel, int8) in kernels.iter().zip(&int8s) {
        let agreement = EmbeddingAgreement::of(&ours.first_embeddings, &int8.first_embeddings);
        println!(
            "int8 ({}) vs f32: {:.2}x; cosine of the two embeddings min {:.4}, mean {:.4}; top-10 neighbours shared {:.1}%",
            kernel.name(),
            rate(int8) / rate(&ours),
            agreement.min_cosine,
            agreement.mean_cosine,
            100.0 * agreement.neighbours_shared
        );
    }
    if let Some(reference) = reference {
        let theirs_rate = rate(&reference.own_batches);
        println!(
            "ratio flipside / sentence-transformers: {:.2}x ({:.2}x its pass in batches sorted by tokens, as Flipside's)",
            rate(&ours) / theirs_rate,
            rate(&ours) / rate(&reference.token_sorted),
        );
        for (kernel, int8) in kernels.iter().zip(&int8s) {
            let sorted = reference
                .int8_token_sorted
                .as_ref()
                .map(|sorted| {
                    format!(
                        " ({:.2}x in batches sorted by tokens)",
                        rate(int8) / rate(sorted)
                    )
                })
                .unwrap_or_default();
            let against_int8 = reference
                .int8
                .as_ref()
                .map(|theirs| {
                    format!(
                        ", {:.2}x its dynamic int8{sorted}",
                        rate(int8) / rate(theirs)
                    )
                })
                .unwrap_or_default();
            println!(
                "ratio flipside int8 ({}) / sentence-transformers: {:.2}x PyTorch's f32{against_int8}",
                kernel.name(),
                rate(int8) / theirs_rate,
            );
        }
        let max_diff = ours
            .first_embeddings
            .iter()
            .flatten()
            .zip(reference.own_batches.first_embeddings.iter().flatten())
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
    int8: Option<Kernel>,
) -> Result<Timing> {
    let mut encoder = load_encoder::<B>(model_dir, &compute.device)?;
    if let Some(kernel) = int8 {
        encoder = encoder.with_int8_copies(kernel);
    }
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    // Two passes over the same sentences, both timed: a GPU backend compiles and tunes its
    // kernels for each new shape during the first.
    let pass = || -> Result<(Vec<Vec<f32>>, f64)> {
        let started = Instant::now();
        let embeddings = encoder.embed_all(&texts, batch_size, &compute.batches, &|_| {})?;
        crate::compute::wait_for::<B>(&compute.device)?;
        Ok((embeddings, started.elapsed().as_secs_f64()))
    };
    let (_, first_pass_seconds) = pass()?;
    let (embeddings, seconds) = pass()?;
    Ok(Timing {
        seconds,
        first_pass_seconds: Some(first_pass_seconds),
        first_embeddings: embeddings,
        description: format!(
            "flipside (burn {}){}",
            std::any::type_name::<B>(),
            int8.map(|kernel| format!(", int8 {}", kernel.name()))
                .unwrap_or_default()
        ),
    })
}

/// How close int8 embeddings are to the f32 ones of the same sentences.
struct EmbeddingAgreement {
    min_cosine: f32,
    mean_cosine: f32,
    /// Of every sentence's 10 nearest other sentences by f32 embeddings, the share that are
    /// also among its 10 nearest by int8 embeddings.
    neighbours_shared: f64,
}

impl EmbeddingAgreement {
    const NEIGHBOURS: usize = 10;

    fn of(f32s: &[Vec<f32>], int8s: &[Vec<f32>]) -> Self {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let cosines: Vec<f32> = f32s.iter().zip(int8s).map(|(a, b)| dot(a, b)).collect();
        let nearest = |all: &[Vec<f32>], i: usize| -> Vec<usize> {
            let mut others: Vec<(f32, usize)> = (0..all.len())
                .filter(|&j| j != i)
                .map(|j| (dot(&all[i], &all[j]), j))
                .collect();
            others.sort_by(|a, b| b.0.total_cmp(&a.0));
            others
                .iter()
                .take(Self::NEIGHBOURS)
                .map(|&(_, j)| j)
                .collect()
        };
        let shared: usize = (0..f32s.len())
            .map(|i| {
                let int8_nearest = nearest(int8s, i);
                nearest(f32s, i)
                    .iter()
                    .filter(|j| int8_nearest.contains(j))
                    .count()
            })
            .sum();
        let possible = f32s.len() * Self::NEIGHBOURS.min(f32s.len().saturating_sub(1));
        Self {
            min_cosine: cosines.iter().copied().fold(f32::INFINITY, f32::min),
            mean_cosine: cosines.iter().sum::<f32>() / cosines.len().max(1) as f32,
            neighbours_shared: shared as f64 / possible.max(1) as f64,
        }
    }
}

/// The reference's timings (see the script).
struct ReferenceTimings {
    /// f32, in sentence-transformers' own batches (sorted by characters).
    own_batches: Timing,
    /// f32, in batches sorted by token count, as Flipside's.
    token_sorted: Timing,
    /// Dynamic int8, when asked: in its own batches, and sorted by tokens.
    int8: Option<Timing>,
    int8_token_sorted: Option<Timing>,
}

/// The reference's timings for `request`.
fn run_reference(python: Command, request: &serde_json::Value) -> Result<ReferenceTimings> {
    let stdout = run_reference_script(python, REFERENCE_SCRIPT, request, "sentence-transformers")?;
    let result: ReferenceResult =
        serde_json::from_slice(&stdout).context("the reference printed no result")?;
    let description = format!(
        "sentence-transformers (torch {}, {} threads)",
        result.torch, result.threads
    );
    let pass = |seconds: f64, what: &str| Timing {
        seconds,
        first_pass_seconds: None,
        first_embeddings: Vec::new(),
        description: format!("{description}, {what}"),
    };
    let token_sorted = pass(result.token_sorted_seconds, "batches sorted by tokens");
    let int8 = result
        .int8_seconds
        .map(|seconds| pass(seconds, "dynamic int8"));
    let int8_token_sorted = result
        .int8_token_sorted_seconds
        .map(|seconds| pass(seconds, "dynamic int8, batches sorted by tokens"));
    Ok(ReferenceTimings {
        own_batches: Timing {
            seconds: result.seconds,
            first_pass_seconds: Some(result.first_pass_seconds),
            first_embeddings: result.first_embeddings,
            description,
        },
        token_sorted,
        int8,
        int8_token_sorted,
    })
}
