//! `flipside bench browser`: the classifier's latency on one text in headless Chromium, as the
//! browser app runs it (burn on CPU wasm, or WebGPU), against the same model natively on the
//! server's CPU backend, measured in the same run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use clap::{Args, ValueEnum};
use flipside_shared::data::Input;
use flipside_shared::models::classifier::TextClassifier;
use serde::Deserialize;

use crate::compute::Cpu;
use crate::home::Home;
use crate::models::{load_classifier, resolve_model_dir};
use crate::server::resources::cpu;

/// Words the benchmark text is made of (a made-up review), cut to the wanted token count.
const REVIEW: &str = "I went in expecting another forgettable sequel, but this film surprised me \
    from the first scene. The two leads share an easy warmth, the script trusts its audience, \
    and the quiet middle hour builds to an ending that is both earned and moving. A few jokes \
    miss, the score is too loud in places and one subplot about a stolen car goes nowhere, yet \
    none of that matters much when the central story is told with this much care. The camera \
    work is patient and the editing never rushes a moment that needs room to breathe. I would \
    gladly watch it again with friends and recommend it to anyone who misses films like this.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BrowserBackend {
    /// burn's ndarray backend compiled to wasm (what browsers without WebGPU get)
    Cpu,
    /// burn's WebGPU backend (headless Chromium has only SwiftShader's CPU adapter)
    Webgpu,
}

impl BrowserBackend {
    /// What runs the model, for the results table.
    fn description(self) -> &'static str {
        match self {
            BrowserBackend::Cpu => "CPU wasm, 1 thread",
            BrowserBackend::Webgpu => "WebGPU",
        }
    }

    fn id(self) -> &'static str {
        match self {
            BrowserBackend::Cpu => "cpu",
            BrowserBackend::Webgpu => "webgpu",
        }
    }
}

#[derive(Debug, Args)]
pub struct BrowserBenchArgs {
    /// Classifier to time (a directory or a name under HOME/models; `scripts/serve` trains
    /// imdb-400 on its first run)
    #[arg(long, default_value = "imdb-400")]
    pub classifier: String,
    /// Tokens in the text, [CLS] and [SEP] included
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Timed calls on each side
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Untimed calls first on each side
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// The in-browser backend to time
    #[arg(long, value_enum, default_value_t = BrowserBackend::Cpu)]
    pub backend: BrowserBackend,
    /// The browser app (Trunk's output; `scripts/serve` builds the optimised one)
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub static_dir: PathBuf,
    /// The npm package with playwright-core and the browser script (`npm ci` there first)
    #[arg(long, value_name = "DIR", default_value = "tests/e2e")]
    pub e2e_dir: PathBuf,
    /// The LLM the temporary server loads (unused by the benchmark; a small one starts fast)
    #[arg(long, default_value = "smollm2-135m")]
    pub llm: String,
}

/// What the browser script prints.
#[derive(Deserialize)]
struct BrowserResult {
    millis: Vec<f64>,
    probabilities: Vec<f32>,
    backend: String,
    browser: String,
    load_ms: f64,
}

pub fn bench_browser(home: &Home, args: BrowserBenchArgs) -> Result<()> {
    ensure!(args.runs > 0, "--runs must be at least 1");
    ensure!(
        args.static_dir.join("index.html").is_file(),
        "no browser app in {}: build it with `trunk build --cargo-profile wasm-release` (or run \
         scripts/serve once), or pass --static-dir",
        args.static_dir.display()
    );
    let script = args.e2e_dir.join("bench-classifier.mjs");
    ensure!(
        script.is_file() && args.e2e_dir.join("node_modules/playwright-core").is_dir(),
        "{} needs bench-classifier.mjs and playwright-core: run from the repository root after \
         `(cd tests/e2e && npm ci)`, or pass --e2e-dir",
        args.e2e_dir.display()
    );
    let classifier_dir = resolve_model_dir(home, &args.classifier)?;
    let compute = cpu();
    let classifier = load_classifier::<Cpu>(&classifier_dir, &compute.device)?;
    let text = text_of_tokens(&classifier, args.tokens)?;
    let threads = rayon::current_num_threads();
    println!(
        "browser bench: {} ({}), one text of {} tokens, {} warm-up + {} timed calls per side; \
         app {} ({})",
        args.classifier,
        classifier_dir.display(),
        args.tokens,
        args.warmup,
        args.runs,
        args.static_dir.display(),
        wasm_size(&args.static_dir)?
    );

    // The server's way (all cores), and on one thread as the browser's wasm runs.
    let input = Input::Text { text: text.clone() };
    let (mut native_ms, native_probabilities) = time_native(&classifier, &input, &args)?;
    let (mut one_thread_ms, _) = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()?
        .install(|| time_native(&classifier, &input, &args))?;

    println!("starting a server for the app and timing in headless Chromium…");
    let server = TemporaryServer::start(home, &args, &classifier_dir)?;
    let output = Command::new("node")
        .arg(script.file_name().expect("a file name"))
        .current_dir(&args.e2e_dir)
        .env("FLIPSIDE_URL", &server.url)
        .env("BENCH_TEXT", &text)
        .env("BENCH_BACKEND", args.backend.id())
        .env("BENCH_RUNS", args.runs.to_string())
        .env("BENCH_WARMUP", args.warmup.to_string())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run node (apt-get install nodejs)")?;
    drop(server);
    if !output.status.success() {
        bail!("the browser script failed ({})", output.status);
    }
    let mut browser: BrowserResult = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "the browser script printed no result: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    ensure!(
        browser.backend == args.backend.id(),
        "the app ran on {} instead of {}",
        browser.backend,
        args.backend.id()
    );
    ensure!(
        browser.millis.len() == args.runs
            && browser.probabilities.len() == native_probabilities.len(),
        "the browser script returned {} timings and {} probabilities (expected {} and {})",
        browser.millis.len(),
        browser.probabilities.len(),
        args.runs,
        native_probabilities.len()
    );
    let max_diff = browser
        .probabilities
        .iter()
        .zip(&native_probabilities)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);

    let native = Latency::of(&mut native_ms);
    let one_thread = Latency::of(&mut one_thread_ms);
    let in_browser = Latency::of(&mut browser.millis);
    println!(
        "\n{:<48} {:>10} {:>10} {:>10}",
        "", "median ms", "p10 ms", "p90 ms"
    );
    let row = |name: &str, l: &Latency| {
        println!(
            "{name:<48} {:>10.2} {:>10.2} {:>10.2}",
            l.median, l.p10, l.p90
        );
    };
    row(&format!("native (burn Flex, {threads} threads)"), &native);
    row("native (burn Flex, 1 thread)", &one_thread);
    row(
        &format!("{} ({})", browser.browser, args.backend.description()),
        &in_browser,
    );
    println!(
        "\nbrowser / native: {:.2}× ({:.2}× against one native thread); app load to first score \
         {:.1} s; max |Δp| browser vs native {max_diff:.1e}",
        in_browser.median / native.median,
        in_browser.median / one_thread.median,
        browser.load_ms / 1e3
    );
    Ok(())
}

/// The size of the app's wasm module (a debug build is several times larger than the
/// `wasm-release` one that `scripts/serve` builds).
fn wasm_size(static_dir: &Path) -> Result<String> {
    for entry in std::fs::read_dir(static_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            return Ok(format!(
                "{:.1} MB of wasm",
                path.metadata()?.len() as f64 / 1e6
            ));
        }
    }
    bail!(
        "{} has no .wasm file: is it Trunk's output?",
        static_dir.display()
    )
}

/// Milliseconds of each timed call scoring `input` (after the warm-up), and its probabilities.
fn time_native(
    classifier: &TextClassifier<Cpu>,
    input: &Input,
    args: &BrowserBenchArgs,
) -> Result<(Vec<f64>, Vec<f32>)> {
    let mut millis = Vec::with_capacity(args.runs);
    let mut probabilities = Vec::new();
    for i in 0..args.warmup + args.runs {
        let start = Instant::now();
        probabilities = classifier.predict_batch(&[input])?;
        if i >= args.warmup {
            millis.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok((millis, probabilities))
}

/// [`REVIEW`]'s words from the start, skipping any word that would take the encoding past
/// `tokens`, until the encoding is exactly `tokens` long.
fn text_of_tokens(classifier: &TextClassifier<Cpu>, tokens: usize) -> Result<String> {
    let max_len = classifier.config.max_len;
    ensure!(
        (3..=max_len).contains(&tokens),
        "--tokens must be between 3 and the classifier's max length {max_len}"
    );
    let mut text = String::new();
    for word in REVIEW.split_whitespace() {
        let longer = if text.is_empty() {
            word.to_string()
        } else {
            format!("{text} {word}")
        };
        let count = classifier.tokenizer.encode_texts(&[&longer])?.lengths()[0];
        if count <= tokens {
            text = longer;
        }
        if count == tokens {
            return Ok(text);
        }
    }
    bail!("the benchmark review is shorter than {tokens} tokens")
}

/// Median and 10th/90th percentiles of milliseconds.
struct Latency {
    median: f64,
    p10: f64,
    p90: f64,
}

impl Latency {
    fn of(millis: &mut [f64]) -> Self {
        millis.sort_by(f64::total_cmp);
        let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
        Latency {
            median: at(0.5),
            p10: at(0.1),
            p90: at(0.9),
        }
    }
}

/// `flipside serve` on a free loopback port, serving the app and the classifier's files;
/// killed when dropped.
struct TemporaryServer {
    child: Child,
    url: String,
    /// Its database and uploads (none): deleted after the process is killed.
    _data_dir: tempfile::TempDir,
}

impl TemporaryServer {
    fn start(home: &Home, args: &BrowserBenchArgs, classifier_dir: &Path) -> Result<Self> {
        let data_dir = tempfile::tempdir()?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--quiet")
            .args(["serve", "--listen", "127.0.0.1:0", "--model", &args.llm])
            .arg("--home")
            .arg(home.root())
            .arg("--classifier")
            .arg(classifier_dir)
            .arg("--static-dir")
            .arg(&args.static_dir)
            .arg("--data-dir")
            .arg(data_dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start flipside serve")?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut server = TemporaryServer {
            child,
            url: String::new(),
            _data_dir: data_dir,
        };
        for line in lines.by_ref() {
            if let Some(url) = line?.strip_prefix("listening on ") {
                server.url = url.to_string();
                // Keep reading, so the server never blocks on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Ok(server);
            }
        }
        bail!("flipside serve exited before listening")
    }
}

impl Drop for TemporaryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
