//! `flipside bench …`: speed against reference implementations, measured in the same run.

mod browser;
mod cf;
mod dis_ae;
mod encode;
mod infiller;
mod llm;
mod matmul;
mod portal;
mod retrieval;
mod train;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::compute::DeviceChoice;
use crate::home::Home;
use flipside_shared::ops::int8::Kernel;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The classifier's latency on one 64-token text in headless Chromium (the browser app's
    /// CPU wasm or WebGPU backend) vs natively on the server's CPU backend
    Browser(browser::BrowserBenchArgs),
    /// Dis-AE training steps per second vs the same architecture in PyTorch (same initial
    /// weights, batches and threads), and the cores each side keeps busy
    DisAe(dis_ae::DisAeBenchArgs),
    /// Every method's counterfactuals of the same held-out items, with the same attempts and
    /// filter: yield, flips judged by an independent classifier before and after the filter,
    /// closeness, perplexity, diversity and CPU-seconds per accepted counterfactual
    Cf(Box<cf::CfBenchArgs>),
    /// Sentence embeddings per second, Flipside vs sentence-transformers (PyTorch, same device)
    Encode(encode::EncodeBenchArgs),
    /// The encoder's linear layers alone, GFLOPS vs PyTorch's F.linear (same shapes and
    /// threads): how much of the encode and train gaps is the matrix-product kernel
    Matmul(matmul::MatmulBenchArgs),
    /// Prompt and decode tokens per second of the embedded LLM vs llama-cpp-python (same GGUF,
    /// prompt and threads)
    Llm(llm::LlmBenchArgs),
    /// T5 training tokens/s and sampling samples/s vs transformers (PyTorch, CPU; same weights,
    /// batches and threads)
    Infiller(infiller::InfillerBenchArgs),
    /// HNSW search vs faiss IndexIVFFlat and IndexHNSWFlat: build time, memory, recall@k,
    /// queries per second
    Retrieval(retrieval::RetrievalBenchArgs),
    /// Classifier fine-tuning steps per second vs transformers (PyTorch; same reviews, batches,
    /// hyper-parameters and threads)
    Train(train::TrainBenchArgs),
    /// The review portal's decide-and-fetch-next with a large queue: p50/p95 on SQLite and
    /// Postgres (goal p95 ≤ 50 ms at 100k items)
    Portal(portal::PortalBenchArgs),
}

pub fn run(home: &Home, command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Browser(args) => browser::bench_browser(home, args),
        BenchCommand::Cf(args) => cf::bench_cf(home, *args),
        BenchCommand::DisAe(args) => dis_ae::bench_dis_ae(home, args),
        BenchCommand::Encode(args) => encode::bench_encode(home, args),
        BenchCommand::Infiller(args) => infiller::bench_infiller(home, args),
        BenchCommand::Llm(args) => llm::bench_llm(home, args),
        BenchCommand::Matmul(args) => matmul::bench_matmul(home, args),
        BenchCommand::Retrieval(args) => retrieval::bench_retrieval(home, args),
        BenchCommand::Portal(args) => portal::bench_portal(args),
        BenchCommand::Train(args) => train::bench_train(home, args),
    }
}

/// CPU seconds this process has used so far, all threads, user and system.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The options of the benches whose reference runs on PyTorch (`encode`, `train`, `infiller`).
#[derive(Debug, Args)]
pub struct TorchBenchArgs {
    /// CPU threads for both sides [default: all cores]
    #[arg(long)]
    pub threads: Option<usize>,
    /// Skip the PyTorch reference (no Python environment needed)
    #[arg(long)]
    pub no_reference: bool,
    /// Python virtual environment for the reference, created (torch, sentence-transformers from
    /// PyPI: several GB) if missing [default: HOME/bench/venv]
    #[arg(long, value_name = "DIR")]
    pub venv: Option<PathBuf>,
    /// Where both sides run
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

impl TorchBenchArgs {
    /// The int8 kernels to time beside f32: every one this CPU has on the CPU backend, none
    /// on a GPU.
    pub fn int8_kernels(&self) -> Vec<Kernel> {
        match self.device {
            DeviceChoice::Cpu => Kernel::available(),
            _ => Vec::new(),
        }
    }

    /// The thread count both sides use.
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The reference's Python, offline and quiet (no warnings, progress bars or hub lookups),
    /// or `None` with `--no-reference`.
    pub fn reference_python(&self, home: &Home) -> Result<Option<Command>> {
        if self.no_reference {
            return Ok(None);
        }
        let python = reference_python(
            home,
            self.venv.as_deref(),
            "venv",
            &["torch", "sentence-transformers"],
        )?;
        let mut command = Command::new(python);
        command
            .env("HF_HUB_OFFLINE", "1")
            .env("TOKENIZERS_PARALLELISM", "false")
            .env("PYTHONWARNINGS", "ignore")
            .env("TRANSFORMERS_VERBOSITY", "error")
            .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            .env("TQDM_DISABLE", "1");
        Ok(Some(command))
    }
}

/// The SIMD features of this CPU that matter for speed, e.g. "avx2 fma (no avx512f)", and whether
/// this build holds gemm's f32 products to AVX2: every speed figure is only comparable between
/// machines (and builds) with the same ones.
pub fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected;
        let features = [
            ("avx2", is_x86_feature_detected!("avx2")),
            ("fma", is_x86_feature_detected!("fma")),
            ("avx512f", is_x86_feature_detected!("avx512f")),
            ("avx512vnni", is_x86_feature_detected!("avx512vnni")),
            ("avx512bf16", is_x86_feature_detected!("avx512bf16")),
            ("amx-bf16", flipside_shared::ops::amx::bf16_usable()),
        ];
        let has: Vec<&str> = features.iter().filter(|f| f.1).map(|f| f.0).collect();
        let lacks: Vec<&str> = features.iter().filter(|f| !f.1).map(|f| f.0).collect();
        let listed = if lacks.is_empty() {
            has.join(" ")
        } else {
            format!("{} (no {})", has.join(" "), lacks.join(", "))
        };
        if cfg!(feature = "avx512") || !is_x86_feature_detected!("avx512f") {
            listed
        } else {
            format!("{listed}; f32 products held to AVX2 (built without the avx512 feature)")
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// Runs a reference script (`python -c script`, with any environment already set on `python`),
/// sends it `request` as JSON on stdin and returns what it printed; `what` names it in errors.
fn run_reference_script(
    mut python: Command,
    script: &str,
    request: &serde_json::Value,
    what: &str,
) -> Result<Vec<u8>> {
    let mut child = python
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start the {what} reference"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(request.to_string().as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!("the {what} reference failed ({})", output.status);
    }
    Ok(output.stdout)
}

/// The Python of the reference environment: `venv` if given, else `HOME/bench/NAME`, created
/// with `packages` when missing.
fn reference_python(
    home: &Home,
    venv: Option<&Path>,
    name: &str,
    packages: &[&str],
) -> Result<PathBuf> {
    let venv = venv.map_or_else(|| home.root().join("bench").join(name), Path::to_path_buf);
    ensure_venv(&venv, packages)
}

/// Creates a Python virtual environment with `packages` from PyPI unless it is already there;
/// returns its Python.
fn ensure_venv(venv: &Path, packages: &[&str]) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    let ready = venv.join(".flipside-ready");
    if ready.exists() {
        return Ok(python);
    }
    println!(
        "creating {} with {} (one-off)…",
        venv.display(),
        packages.join(", ")
    );
    let status = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(venv)
        .status()
        .context("cannot run python3 to create the reference environment")?;
    if !status.success() {
        bail!("python3 -m venv {} failed", venv.display());
    }
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .status()?;
    if !status.success() {
        bail!(
            "installing {} into {} failed",
            packages.join(", "),
            venv.display()
        );
    }
    std::fs::write(ready, b"")?;
    Ok(python)
}
