//! `flipside bench browser`: the classifier's latency on one text in headless Chromium, as the
//! browser app runs it (burn on CPU wasm, or WebGPU), against the same model natively on the
//! server's CPU backend, measured in the same run, and the bytes a first and a second visit to
//! the page transfer; with `--dis-ae`, also LASS's generation
//! (samples/s) in the page against native. Both sides run the compact int8 weights the page
//! downloads.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use burn::module::Module;
use clap::{Args, ValueEnum};
use flipside_shared::data::Input;
use flipside_shared::models::classifier::TextClassifier;
use flipside_shared::ops::int8::Kernel;
use serde::Deserialize;

use crate::compute::Cpu;
use crate::home::Home;
use crate::lass::model::load_reproducer;
use crate::model_dirs::{compact_model_dir, load_classifier, resolve_model_dir};
use crate::server::downloads::{CLASSIFIER_BITS, DIS_AE_BITS};
use crate::server::resources::cpu;
use flipside_shared::models::dis_ae::reproduce::{TargetSentiment, lass_decoding};
use flipside_shared::sentences::split_sentences;

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
    /// burn's flex backend compiled to wasm with SIMD128, the encoder's products in int8 with
    /// relaxed SIMD where the browser has it (what browsers without WebGPU get)
    Cpu,
    /// burn's WebGPU backend (headless Chromium has only SwiftShader's CPU adapter)
    Webgpu,
}

impl BrowserBackend {
    /// What runs the model (with the page's int8 kernel, if any), for the results table.
    fn description(self, int8: Option<Kernel>) -> String {
        match (self, int8) {
            (BrowserBackend::Cpu, Some(kernel)) => {
                format!("CPU wasm, int8 {}, 1 thread", kernel.name())
            }
            (BrowserBackend::Cpu, None) => "CPU wasm, 1 thread".into(),
            (BrowserBackend::Webgpu, _) => "WebGPU".into(),
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
    /// On the CPU backend, have the page multiply with SIMD128's int8 kernel (`?int8=simd128`,
    /// what browsers without relaxed SIMD run) instead of relaxed SIMD
    #[arg(long)]
    pub simd128: bool,
    /// The browser app (Trunk's output; `scripts/serve` builds the optimised one)
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub static_dir: PathBuf,
    /// The npm package with playwright-core and the browser script (`npm ci` there first)
    #[arg(long, value_name = "DIR", default_value = "tests/e2e")]
    pub e2e_dir: PathBuf,
    /// The LLM the temporary server loads (unused by the benchmark; a small one starts fast)
    #[arg(long, default_value = "smollm2-135m")]
    pub llm: String,
    /// Also time LASS's generation with this Dis-AE (`lass train`'s output: a directory or a
    /// name under HOME/models), in the page and natively
    #[arg(long, value_name = "DIR")]
    pub dis_ae: Option<String>,
    /// Texts the Dis-AE reproduces at once (the benchmark review's sentences, repeated)
    #[arg(long, default_value_t = 20)]
    pub samples: usize,
    /// Timed generations of all the texts on each side (after one untimed)
    #[arg(long, default_value_t = 3)]
    pub generation_runs: usize,
    /// V8 flags for the page's Chromium, e.g. `--no-enable-avx --no-enable-avx2
    /// --no-enable-fma3` for the SSE4.2 code a CPU without AVX gets (V8 has no AVX-512 code: the
    /// instruction sets it uses are printed)
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub js_flags: Option<String>,
}

impl BrowserBenchArgs {
    /// The environment every browser script gets: the server's URL and the V8 flags.
    fn script_env<'a>(&'a self, url: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![("FLIPSIDE_URL", url)];
        if let Some(flags) = &self.js_flags {
            env.push(("CHROMIUM_JS_FLAGS", flags.as_str()));
        }
        env
    }
}

/// The Chromium the browser scripts launch (`CHROMIUM`, else Debian's).
fn chromium_path() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// The instruction sets V8 generates code for in that Chromium with `js_flags` (the line its
/// `--js-flags=--help` starts with, such as `SSE3=1 … AVX2=1 … FMA3=1 …`).
fn v8_instruction_sets(js_flags: Option<&str>) -> Result<String> {
    let mut chromium = Command::new(chromium_path())
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--js-flags={} --help", js_flags.unwrap_or("")))
        .arg("about:blank")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {}", chromium_path().display()))?;
    let stdout = chromium.stdout.take().expect("a piped stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("SSE3="));
    chromium.kill().ok();
    chromium.wait().ok();
    line.context("Chromium's V8 did not list its instruction sets")
}

/// What the Dis-AE browser script prints.
#[derive(Deserialize)]
struct GenerationResult {
    millis: Vec<f64>,
    outputs: Vec<String>,
    /// The Web Workers the page decodes in (one per core).
    workers: usize,
    /// The same page with one worker (`?workers=1`).
    one_worker: OneWorkerResult,
    browser: String,
    load_ms: f64,
}

/// The page's generation with one worker.
#[derive(Deserialize)]
struct OneWorkerResult {
    millis: Vec<f64>,
    outputs: Vec<String>,
}

/// What the browser script prints.
#[derive(Deserialize)]
struct BrowserResult {
    millis: Vec<f64>,
    probabilities: Vec<f32>,
    backend: String,
    /// The page's int8 kernel (CPU backend).
    int8: Option<Kernel>,
    browser: String,
    load_ms: f64,
    /// A first visit to the page in a new profile, then a second, each until the classifier is
    /// loaded.
    visits: [Visit; 2],
}

/// What crossed the network during one visit to the page (Chromium's count).
#[derive(Deserialize)]
struct Visit {
    /// Headers and bodies as received (compressed where they were sent so).
    bytes: u64,
    requests: usize,
    /// Requests the browser's cache answered.
    from_cache: usize,
}

pub fn bench_browser(home: &Home, args: BrowserBenchArgs) -> Result<()> {
    ensure!(args.runs > 0, "--runs must be at least 1");
    ensure!(
        !args.simd128 || args.backend == BrowserBackend::Cpu,
        "--simd128 chooses the CPU backend's int8 kernel: it needs --backend cpu"
    );
    ensure!(
        args.static_dir.join("index.html").is_file(),
        "no browser app in {}: build it with `trunk build --cargo-profile wasm-release` (or run \
         scripts/serve once), or pass --static-dir",
        args.static_dir.display()
    );
    let script = args.e2e_dir.join("bench-classifier.mjs");
    let dis_ae = match &args.dis_ae {
        Some(name) => Some(resolve_model_dir(home, name)?),
        None => None,
    };
    ensure!(
        args.samples > 0 && args.generation_runs > 0,
        "--samples and --generation-runs must be at least 1"
    );
    ensure!(
        script.is_file() && args.e2e_dir.join("node_modules/playwright-core").is_dir(),
        "{} needs bench-classifier.mjs and playwright-core: run from the repository root after \
         `(cd tests/e2e && npm ci)`, or pass --e2e-dir",
        args.e2e_dir.display()
    );
    let classifier_dir = resolve_model_dir(home, &args.classifier)?;
    let compute = cpu();
    // Native runs the compact int8 weights the page downloads, so both compute the same model.
    let compacted = tempfile::tempdir()?;
    let native_dir = compacted.path().join("classifier");
    compact_model_dir(&classifier_dir, &native_dir, CLASSIFIER_BITS)?;
    let classifier = load_classifier::<Cpu>(&native_dir, &compute.device)?;
    let text = text_of_tokens(&classifier, args.tokens)?;
    let threads = rayon::current_num_threads();
    println!(
        "browser bench: {} ({}, {CLASSIFIER_BITS}-bit weights on both sides), one text of {} \
         tokens, {} warm-up + {} timed calls per side; app {} ({})",
        args.classifier,
        classifier_dir.display(),
        args.tokens,
        args.warmup,
        args.runs,
        args.static_dir.display(),
        wasm_size(&args.static_dir)?
    );

    // The server's way (all cores), and on one thread as the browser's wasm runs; in f32 (the
    // server's classifier) and in int8 where this CPU has a kernel worth it.
    let input = Input::Text { text: text.clone() };
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let (mut native_ms, native_probabilities) = time_native(&classifier, &input, &args)?;
    let (mut one_thread_ms, _) = one_thread.install(|| time_native(&classifier, &input, &args))?;
    let native_int8 = match Kernel::best() {
        Some(kernel) => {
            let int8 = classifier.clone().with_int8_copies(kernel);
            let (mut all, _) = time_native(&int8, &input, &args)?;
            let (mut one, _) = one_thread.install(|| time_native(&int8, &input, &args))?;
            Some((kernel, Latency::of(&mut all), Latency::of(&mut one)))
        }
        None => None,
    };
    println!(
        "V8's instruction sets{}: {}",
        args.js_flags
            .as_deref()
            .map(|flags| format!(" with {flags}"))
            .unwrap_or_default(),
        v8_instruction_sets(args.js_flags.as_deref())?
    );
    println!("starting a server for the app and timing in headless Chromium…");
    let server = TemporaryServer::start(home, &args, &classifier_dir, dis_ae.as_deref())?;
    let mut browser: BrowserResult = run_script(
        &args.e2e_dir,
        &script,
        &[
            args.script_env(&server.url).as_slice(),
            &[
                ("BENCH_TEXT", &text),
                ("BENCH_BACKEND", args.backend.id()),
                (
                    "BENCH_QUERY",
                    if args.simd128 { "&int8=simd128" } else { "" },
                ),
                ("BENCH_RUNS", &args.runs.to_string()),
                ("BENCH_WARMUP", &args.warmup.to_string()),
            ],
        ]
        .concat(),
    )?;
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
    if args.simd128 {
        ensure!(
            browser.int8 == Some(Kernel::Simd128),
            "the page multiplied with {:?} instead of SIMD128",
            browser.int8
        );
    }
    // What the page should compute: the same products (its int8 kernel's integer sums, here
    // one at a time) on its CPU backend, f32 on WebGPU.
    let expected = match browser.int8 {
        Some(kernel) => classifier
            .clone()
            .with_int8_copies(kernel)
            .predict_batch(&[&input])?,
        None => native_probabilities.clone(),
    };
    let max_diff = |reference: &[f32]| {
        browser
            .probabilities
            .iter()
            .zip(reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max)
    };
    let (same_products, against_f32) = (max_diff(&expected), max_diff(&native_probabilities));

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
    if let Some((kernel, all, one)) = &native_int8 {
        let name = kernel.name();
        row(&format!("native int8 ({name}, {threads} threads)"), all);
        row(&format!("native int8 ({name}, 1 thread)"), one);
    }
    row(
        &format!(
            "{} ({})",
            browser.browser,
            args.backend.description(browser.int8)
        ),
        &in_browser,
    );
    println!(
        "\nbrowser / native: {:.2}× ({:.2}× against one native thread); app load to first score \
         {:.1} s; max |Δp| browser vs native with the page's products {same_products:.1e}, vs \
         native f32 {against_f32:.1e}",
        in_browser.median / native.median,
        in_browser.median / one_thread.median,
        browser.load_ms / 1e3
    );
    let [first, second] = &browser.visits;
    println!(
        "page load until the classifier is ready: first visit {:.2} MB in {} requests, second \
         visit {:.1} kB in {} requests ({} from the browser's cache)",
        first.bytes as f64 / 1e6,
        first.requests,
        second.bytes as f64 / 1e3,
        second.requests,
        second.from_cache
    );
    if let Some((kernel, all, one)) = &native_int8 {
        println!(
            "browser / native int8 ({}): {:.2}× ({:.2}× against one native thread)",
            kernel.name(),
            in_browser.median / all.median,
            in_browser.median / one.median
        );
    }
    if let Some(dis_ae) = dis_ae {
        let native_dis_ae = compacted.path().join("dis-ae");
        compact_model_dir(&dis_ae, &native_dis_ae, DIS_AE_BITS)?;
        bench_generation(&args, &dis_ae, &native_dis_ae, &server.url)?;
    }
    Ok(())
}

/// LASS's generation: `--samples` texts reproduced at once with the Dis-AE's first label (beam
/// 4, at most 70 tokens), natively (from `compact`, the compact copy of `dis_ae` the page
/// downloads) and in the page; samples per second and whether the texts agree.
fn bench_generation(
    args: &BrowserBenchArgs,
    dis_ae: &Path,
    compact: &Path,
    url: &str,
) -> Result<()> {
    let reproducer = load_reproducer::<Cpu>(compact, &Default::default())?;
    let label = reproducer.config.labels[0].clone();
    let sentences = split_sentences(REVIEW);
    let texts: Vec<&str> = sentences
        .iter()
        .copied()
        .cycle()
        .take(args.samples)
        .collect();
    let generate = || -> Result<(f64, Vec<String>)> {
        let start = Instant::now();
        let outputs =
            reproducer.reproduce(&texts, TargetSentiment::Label(&label), &lass_decoding())?;
        Ok((
            start.elapsed().as_secs_f64() * 1e3,
            outputs.into_iter().map(|o| o.text).collect(),
        ))
    };
    let time_native = || -> Result<(Vec<f64>, Vec<String>)> {
        let mut outputs = generate()?.1;
        let mut millis = Vec::new();
        for _ in 0..args.generation_runs {
            let (ms, texts) = generate()?;
            millis.push(ms);
            outputs = texts;
        }
        Ok((millis, outputs))
    };
    let (mut native_ms, native_texts) = time_native()?;
    let (mut one_thread_ms, _) = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()?
        .install(time_native)?;
    let mut browser: GenerationResult = run_script(
        &args.e2e_dir,
        &args.e2e_dir.join("bench-dis-ae.mjs"),
        &[
            args.script_env(url).as_slice(),
            &[
                ("BENCH_TEXTS", &serde_json::to_string(&texts)?),
                ("BENCH_LABEL", &label),
                ("BENCH_RUNS", &args.generation_runs.to_string()),
            ],
        ]
        .concat(),
    )?;
    let same_as_native = |outputs: &[String]| {
        outputs
            .iter()
            .zip(&native_texts)
            .filter(|(a, b)| a == b)
            .count()
    };
    let same = same_as_native(&browser.outputs);
    let same_one_worker = same_as_native(&browser.one_worker.outputs);
    let per_second = |millis: &mut [f64]| texts.len() as f64 / (Latency::of(millis).median / 1e3);
    let threads = rayon::current_num_threads();
    let native = per_second(&mut native_ms);
    let in_browser = per_second(&mut browser.millis);
    println!(
        "\nDis-AE generation ({}, {} parameters, {DIS_AE_BITS}-bit weights on both sides): {} \
         texts to {label} at once, beam 4, at most 70 tokens; median of {} runs",
        dis_ae.display(),
        reproducer.model.num_params(),
        texts.len(),
        args.generation_runs
    );
    println!("{:<48} {:>10}", "", "samples/s");
    println!(
        "{:<48} {native:>10.1}",
        format!("native (burn Flex, {threads} threads)")
    );
    println!(
        "{:<48} {:>10.1}",
        "native (burn Flex, 1 thread)",
        per_second(&mut one_thread_ms)
    );
    let one_worker = per_second(&mut browser.one_worker.millis);
    println!(
        "{:<48} {one_worker:>10.1}",
        format!("{} (CPU wasm, 1 worker)", browser.browser)
    );
    println!(
        "{:<48} {in_browser:>10.1}",
        format!(
            "{} (CPU wasm, {} workers)",
            browser.browser, browser.workers
        )
    );
    println!(
        "\nbrowser / native: {:.2}× ({:.2}× with one worker; {} workers / 1: {:.2}×); page load to \
         Dis-AE ready {:.1} s; {same} of {n} texts equal to native ({same_one_worker} with one \
         worker)",
        in_browser / native,
        one_worker / native,
        browser.workers,
        in_browser / one_worker,
        browser.load_ms / 1e3,
        n = texts.len()
    );
    Ok(())
}

/// Runs a browser script of `e2e_dir` with `env` and parses the JSON it prints.
fn run_script<T: serde::de::DeserializeOwned>(
    e2e_dir: &Path,
    script: &Path,
    env: &[(&str, &str)],
) -> Result<T> {
    let output = Command::new("node")
        .arg(script.file_name().expect("a file name"))
        .current_dir(e2e_dir)
        .envs(env.iter().copied())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run node (apt-get install nodejs)")?;
    if !output.status.success() {
        bail!(
            "the browser script {} failed ({})",
            script.display(),
            output.status
        );
    }
    serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "the browser script printed no result: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
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
    fn start(
        home: &Home,
        args: &BrowserBenchArgs,
        classifier_dir: &Path,
        dis_ae: Option<&Path>,
    ) -> Result<Self> {
        let data_dir = tempfile::tempdir()?;
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("--quiet")
            .args(["serve", "--listen", "127.0.0.1:0", "--model", &args.llm])
            .arg("--home")
            .arg(home.root())
            .arg("--classifier")
            .arg(classifier_dir)
            .arg("--static-dir")
            .arg(&args.static_dir)
            .arg("--data-dir")
            .arg(data_dir.path());
        if let Some(dis_ae) = dis_ae {
            // The page generates by itself: the server needs no fluency model.
            command
                .arg("--dis-ae")
                .arg(dis_ae)
                .args(["--max-perplexity", "0"]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start flipside serve")?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut server = TemporaryServer {
            child,
            url: String::new(),
            _data_dir: data_dir,
        };
        // The address comes first, "ready" once the models are loaded.
        for line in lines.by_ref() {
            let line = line?;
            if let Some(url) = line.strip_prefix("listening on ") {
                server.url = url.to_string();
            } else if line == "ready" && !server.url.is_empty() {
                // Keep reading, so the server never blocks on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Ok(server);
            }
        }
        bail!("flipside serve exited before it was ready")
    }
}

impl Drop for TemporaryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
