//! `flipside bench llm`: the embedded engine's prompt and decode speed against
//! llama-cpp-python on the same GGUF, token ids and threads, in the same run.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use clap::Args;
use serde::Deserialize;

use super::{reference_python, run_reference_script};
use crate::cli::llm::LlmArgs;
use crate::editing::prompts::{PromptTemplate, Slots};
use crate::home::Home;
use crate::llm::local::Timings;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/llama_cpp_python_speed.py");

/// The llama-cpp-python release measured against (built from source by pip: 15–20 minutes).
const LLAMA_CPP_PYTHON: &str = "llama-cpp-python==0.3.36";

#[derive(Debug, Args)]
pub struct LlmBenchArgs {
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Tokens decoded per run
    #[arg(long, default_value_t = 128)]
    pub decode_tokens: usize,
    /// Timed runs of each engine (the median is reported), after one warm-up run
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Only time Flipside's engine
    #[arg(long)]
    pub no_reference: bool,
    /// Python environment with llama-cpp-python (created from PyPI, a 15–20 minute source
    /// build, if missing) [default: HOME/bench/llama-cpp-python]
    #[arg(long, value_name = "DIR")]
    pub venv: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct ReferenceResult {
    version: String,
    runs: Vec<Run>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct Run {
    prompt_ms: f64,
    decode_ms: f64,
}

pub fn bench_llm(home: &Home, args: LlmBenchArgs) -> Result<()> {
    anyhow::ensure!(args.repeats >= 1, "--repeats must be at least 1");
    let threads = args.llm.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let model_path = args.llm.model_path(home)?;
    let engine = args.llm.local(home)?;
    // The prompt: CORE's sentiment prompt for a short review, in the model's chat format.
    let template = PromptTemplate::load("core-sentiment")?;
    let keywords = ["dull", "plot", "wooden", "acting", "boring"].map(str::to_string);
    let prompt = engine.render(&template.chat(&Slots {
        text: "A moving story with superb acting; the ending stayed with me for days.",
        label: "positive",
        target: "negative",
        keywords: Some(&keywords),
        ..Default::default()
    }))?;
    let tokens = engine.tokenize(&prompt, true);
    println!(
        "LLM bench: {} ({}), prompt {} tokens, decode {} tokens, {threads} threads, median of {}",
        engine_name(&model_path),
        model_path.display(),
        tokens.len(),
        args.decode_tokens,
        args.repeats
    );

    let mut ours = Vec::new();
    for run in 0..=args.repeats {
        let timings = engine.bench(&tokens, args.decode_tokens)?;
        if run > 0 {
            ours.push(as_run(timings));
        }
    }
    let ours = median(&ours);
    let reference = if args.no_reference {
        None
    } else {
        let python = reference_python(
            home,
            args.venv.as_deref(),
            "llama-cpp-python",
            &[LLAMA_CPP_PYTHON],
        )?;
        let request = serde_json::json!({
            "model": model_path,
            "context": args.llm.context,
            "batch": 512,
            "threads": threads,
            "prompt_tokens": tokens.iter().map(|t| t.0).collect::<Vec<_>>(),
            "decode_tokens": args.decode_tokens,
            "warmup": 1,
            "repeats": args.repeats,
        });
        let stdout = run_reference_script(
            Command::new(python),
            REFERENCE_SCRIPT,
            &request,
            "llama-cpp-python",
        )?;
        let result: ReferenceResult = serde_json::from_slice(&stdout)
            .context("the llama-cpp-python reference printed no result")?;
        Some((result.version, median(&result.runs)))
    };

    let rate = |tokens: usize, ms: f64| tokens as f64 / (ms / 1e3);
    let (prompt_rate, decode_rate) = (
        rate(tokens.len(), ours.prompt_ms),
        rate(args.decode_tokens, ours.decode_ms),
    );
    println!(
        "{:<34} {:>16} {:>16}",
        "engine", "prompt tok/s", "decode tok/s"
    );
    println!(
        "{:<34} {prompt_rate:>16.1} {decode_rate:>16.1}",
        "flipside (llama.cpp, llama-cpp-2)"
    );
    if let Some((version, theirs)) = reference {
        let (their_prompt, their_decode) = (
            rate(tokens.len(), theirs.prompt_ms),
            rate(args.decode_tokens, theirs.decode_ms),
        );
        println!(
            "{:<34} {their_prompt:>16.1} {their_decode:>16.1}",
            format!("llama-cpp-python {version}")
        );
        println!(
            "{:<34} {:>15.2}× {:>15.2}×",
            "ratio (flipside / reference)",
            prompt_rate / their_prompt,
            decode_rate / their_decode
        );
    }
    Ok(())
}

fn engine_name(path: &std::path::Path) -> String {
    path.parent()
        .and_then(|p| p.file_name())
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn as_run(timings: Timings) -> Run {
    Run {
        prompt_ms: timings.prompt_ms,
        decode_ms: timings.decode_ms,
    }
}

/// The run with the median total time.
fn median(runs: &[Run]) -> Run {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| (a.prompt_ms + a.decode_ms).total_cmp(&(b.prompt_ms + b.decode_ms)));
    sorted[sorted.len() / 2]
}
