//! `flipside bench infiller`: T5 training tokens per second and sampling sentences per second
//! against `transformers` (PyTorch, CPU), the same weights, batches and threads, in one run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use burn::backend::Autodiff;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::ElementConversion;
use burn::tensor::backend::Backend;
use clap::Args;
use flipside_shared::infill::T5Tokenizer;
use serde::Deserialize;

use super::{TorchBenchArgs, run_reference_script};
use crate::cli::data::ReadArgs;
use crate::compute::Compute;
use crate::home::Home;
use crate::infiller::pretrain::{PretrainRun, corrupted_examples, default_model, default_train};
use crate::infiller::{
    FILL_CONTRAST, FillRequest, Infiller, Seq2SeqExample, T5_TOKENIZER_ASSET, save_t5, seq2seq_loss,
};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/transformers_t5_speed.py");

#[derive(Debug, Args)]
pub struct InfillerBenchArgs {
    /// Training batches timed (after --warm-up more)
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    #[arg(long, default_value_t = 2)]
    pub warm_up: usize,
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Masked inputs sampled one at a time for the generation rate
    #[arg(long, default_value_t = 32)]
    pub generate: usize,
    #[command(flatten)]
    pub sides: TorchBenchArgs,
}

#[derive(Deserialize)]
struct ReferenceResult {
    seconds: f64,
    tokens: usize,
    first_loss: f64,
    generate_seconds: f64,
    torch: String,
    threads: usize,
}

struct Measured {
    seconds: f64,
    tokens: usize,
    first_loss: f64,
    generate_seconds: f64,
}

pub fn bench_infiller(home: &Home, args: InfillerBenchArgs) -> Result<()> {
    let threads = args.sides.threads();
    let tokenizer_json = std::fs::read(home.asset(T5_TOKENIZER_ASSET)?.join("tokenizer.json"))?;
    let tokenizer = T5Tokenizer::from_json(&tokenizer_json)?;
    let data = ReadArgs::defaults().load(home, "rotten-tomatoes")?;
    let batches = args.steps + args.warm_up;
    let sentences: Vec<String> = data
        .examples
        .iter()
        .take(batches * args.batch_size)
        .map(|e| e.input.texts()[0].to_string())
        .collect();
    let model_config = default_model(32128);
    let run = PretrainRun {
        corpus_dir: PathBuf::new(),
        limit: None,
        held_out: 0,
        model: model_config.clone(),
        train: default_train(),
        noise_density: 0.15,
        mean_span: 3.0,
        tokenizer_json: tokenizer_json.clone(),
        out: PathBuf::new(),
        pause_after: None,
    };
    let examples = corrupted_examples(&sentences, &tokenizer, &run)?;
    let dir = tempfile::tempdir()?;
    with_backend!(args.sides.device, write_initial(dir.path(), &run))?;
    println!(
        "infiller bench: the pretraining model ({} layers × 2, d_model {}, d_ff {}, {}), batch {}, {} timed steps after {} warm-up, {threads} threads; CPU features: {}",
        model_config.num_layers,
        model_config.d_model,
        model_config.d_ff,
        model_config.feed_forward_proj,
        args.batch_size,
        args.steps,
        args.warm_up,
        super::cpu_features()
    );
    let generate: Vec<Vec<u32>> = examples
        .iter()
        .take(args.generate)
        .map(|e| e.input.clone())
        .collect();
    // Flipside's fill of one span allows 20 tokens; random weights rarely end sooner.
    let max_new_tokens = 20;

    let reference = match args.sides.reference_python(home)? {
        None => None,
        Some(python) => {
            let request = serde_json::json!({
                "model_dir": dir.path(),
                "batches": examples.chunks(args.batch_size).map(|chunk| chunk.iter().map(|e| (&e.input, &e.target)).collect::<Vec<_>>()).collect::<Vec<_>>(),
                "warm_up": args.warm_up,
                "lr": run.train.lr,
                "threads": threads,
                "generate": generate,
                "max_new_tokens": max_new_tokens,
            });
            let stdout = run_reference_script(python, REFERENCE_SCRIPT, &request, "transformers")?;
            Some(
                serde_json::from_slice::<ReferenceResult>(&stdout)
                    .context("the reference printed no result")?,
            )
        }
    };
    let ours = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?
        .install(|| {
            let work = Workload {
                dir: dir.path(),
                tokenizer_json: &tokenizer_json,
                examples: &examples,
                generate: &generate,
                run: &run,
                batch_size: args.batch_size,
                warm_up: args.warm_up,
            };
            with_backend!(args.sides.device, time_flipside(&work))
        })?;

    let ours_rate = ours.tokens as f64 / ours.seconds;
    let ours_generate = generate.len() as f64 / ours.generate_seconds;
    println!(
        "{:<34} {ours_rate:>9.0} training tokens/s  {ours_generate:>7.2} samples/s  first loss {:.4}",
        "flipside (burn)", ours.first_loss
    );
    if let Some(reference) = reference {
        let rate = reference.tokens as f64 / reference.seconds;
        let generate_rate = generate.len() as f64 / reference.generate_seconds;
        println!(
            "{:<34} {rate:>9.0} training tokens/s  {generate_rate:>7.2} samples/s  first loss {:.4}",
            format!(
                "transformers (torch {}, {} threads)",
                reference.torch, reference.threads
            ),
            reference.first_loss
        );
        println!(
            "ratio flipside / transformers: training {:.2}x, sampling {:.2}x",
            ours_rate / rate,
            ours_generate / generate_rate
        );
    }
    Ok(())
}

/// The model both sides start from: the default config, initialised with the pretraining seed.
fn write_initial<B: Backend>(compute: Compute<B>, dir: &Path, run: &PretrainRun) -> Result<()> {
    B::seed(&compute.device, run.train.seed);
    let model = run.model.init::<B>(&compute.device);
    save_t5(dir, &model, &run.model, &run.tokenizer_json)
}

/// What both sides run.
struct Workload<'a> {
    dir: &'a Path,
    tokenizer_json: &'a [u8],
    examples: &'a [Seq2SeqExample],
    generate: &'a [Vec<u32>],
    run: &'a PretrainRun,
    batch_size: usize,
    warm_up: usize,
}

fn time_flipside<B: Backend>(compute: Compute<B>, work: &Workload) -> Result<Measured> {
    let Workload {
        dir,
        tokenizer_json,
        examples,
        generate,
        run,
        batch_size,
        warm_up,
    } = *work;
    let device = &compute.device;
    let tokenizer = T5Tokenizer::from_json(tokenizer_json)?;
    let (mut model, _) = crate::infiller::load_t5::<Autodiff<B>>(dir, device)?;
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(run.train.weight_decay as f32)
        .with_epsilon(1e-8)
        .init::<Autodiff<B>, _>();
    let (mut seconds, mut tokens, mut first_loss) = (0.0, 0, None);
    for (step, chunk) in examples.chunks(batch_size).enumerate() {
        let refs: Vec<&Seq2SeqExample> = chunk.iter().collect();
        let started = Instant::now();
        let loss = seq2seq_loss(&model, &refs, 0.0, &tokenizer, device);
        let value = loss.clone().into_scalar().elem::<f64>();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(run.train.lr, model, grads);
        let elapsed = started.elapsed().as_secs_f64();
        first_loss.get_or_insert(value);
        if step >= warm_up {
            seconds += elapsed;
            tokens += chunk
                .iter()
                .map(|e| e.input.len() + e.target.len())
                .sum::<usize>();
        }
    }
    let infiller = Infiller::<B>::from_dir(dir, tokenizer_json.to_vec(), device)?;
    let started = Instant::now();
    for (i, ids) in generate.iter().enumerate() {
        let input = tokenizer.decode_with_sentinels(ids)?;
        let request = FillRequest {
            input: &input,
            contrast: None,
            spans: 1,
            banned: &[],
            avoided: None,
            favoured: None,
            seed: i as u64,
        };
        infiller.fill(request, FILL_CONTRAST)?;
    }
    Ok(Measured {
        seconds,
        tokens,
        first_loss: first_loss.unwrap_or(f64::NAN),
        generate_seconds: started.elapsed().as_secs_f64(),
    })
}
