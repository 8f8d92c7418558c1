//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use burn::tensor::backend::Backend;
use flipside_backend::home::Home;
use flipside_backend::infiller::shipped::shipped_infiller;
use flipside_backend::model_dirs::BertFiles;
use flipside_shared::models::classifier::{
    ClassifierConfig, SequenceClassifier, load_encoder_weights,
};

/// The largest `|a − b|` over two equally long lists of numbers.
pub fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

/// Asserts that files `a` and `b` hold the same bytes; a failure says `what` and where they
/// first differ (not the files' bytes).
pub fn assert_same_file(a: &Path, b: &Path, what: &str) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    if x != y {
        let at = x.iter().zip(&y).take_while(|(x, y)| x == y).count();
        panic!(
            "{what}: {} ({} bytes) and {} ({} bytes) first differ at byte {at}",
            a.display(),
            x.len(),
            b.display(),
            y.len()
        );
    }
}

/// The Flipside home the test command fetched assets into (`FLIPSIDE_HOME` or `~/.flipside`).
pub fn home() -> Home {
    Home::resolve(std::env::var_os("FLIPSIDE_HOME").map(PathBuf::from)).unwrap()
}

/// The directory of a fetched asset; fails with the fetch command when it is missing.
pub fn asset(name: &str) -> PathBuf {
    home().asset(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The `flipside` binary under test, using the shared home for assets. Its embedded LLM uses
/// one thread: the tests run two at a time, and llama.cpp's threads spin while they wait for a
/// core, so with two threads each the `generate` tests took 112 s instead of 42 on 2 cores.
pub fn flipside() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flipside"));
    command
        .env("FLIPSIDE_HOME", home().root())
        .env("FLIPSIDE_LLM_THREADS", "1")
        .env("NO_COLOR", "1");
    command
}

/// Runs a command and returns its stdout, failing with its stderr when it fails.
pub fn success(command: &mut Command) -> String {
    String::from_utf8(succeeded(command).stdout).unwrap()
}

/// Runs a command that must succeed and returns its stderr (where summaries go).
pub fn success_stderr(command: &mut Command) -> String {
    String::from_utf8(succeeded(command).stderr).unwrap()
}

fn succeeded(command: &mut Command) -> Output {
    let output = command.output().expect("the command runs");
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs a command that must fail and returns its stderr.
pub fn failure(command: &mut Command) -> String {
    let output: Output = command.output().expect("flipside runs");
    assert!(
        !output.status.success(),
        "{command:?} should have failed; stdout:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).unwrap()
}

/// `python3` with the packages of the tests' reference environment that `var` points at
/// (scripts/lib.sh's `python_packages`) on its path, offline and with a throwaway Hugging Face
/// cache; `None`, with a note that `check` is skipped, where `var` is not set.
pub fn reference_python(var: &str, check: &str) -> Option<Command> {
    let Some(packages) = std::env::var_os(var) else {
        eprintln!("{var} is not set: {check} is skipped");
        return None;
    };
    let cache = std::env::temp_dir().join(format!("flipside-hf-cache-{}", std::process::id()));
    let mut command = Command::new("python3");
    command
        .env("PYTHONPATH", packages)
        .env("PYTHONWARNINGS", "ignore")
        .env("HF_HOME", &cache)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_DISABLE_PROGRESS_BARS", "1");
    Some(command)
}

/// A small sentiment dataset whose label is carried by one adjective among neutral words.
pub fn toy_sentiment_csv() -> String {
    let positive = [
        "wonderful",
        "superb",
        "delightful",
        "brilliant",
        "excellent",
        "moving",
    ];
    let negative = ["dreadful", "awful", "boring", "terrible", "dull", "painful"];
    let subjects = ["film", "movie", "show", "story"];
    let mut csv = String::from("text,label\n");
    for (i, subject) in subjects.iter().enumerate() {
        for (good, bad) in positive.iter().zip(negative) {
            csv.push_str(&format!(
                "the {subject} we saw on day {i} was {good},positive\n"
            ));
            csv.push_str(&format!(
                "the {subject} we saw on day {i} was {bad},negative\n"
            ));
        }
    }
    csv
}

/// The toy task's minimal pairs, positive → negative only (as the LLM makes LASS's pairs).
pub fn toy_pairs(out: &Path) {
    let csv = toy_sentiment_csv();
    let lines: Vec<&str> = csv.lines().skip(1).collect();
    let pairs: String = lines
        .chunks(2)
        .map(|pair| {
            let text = |line: &str| line.rsplit_once(',').unwrap().0.to_string();
            serde_json::json!({
                "text": text(pair[0]),
                "label": "positive",
                "counterfactual": text(pair[1]),
            })
            .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(out, pairs).unwrap();
}

/// `lass train`'s sizes for the toy task's tiny Dis-AE.
pub const TINY_DIS_AE_SIZES: &[&str] = &[
    "--vocabulary",
    "200",
    "--d-embed",
    "16",
    "--d-encoder",
    "16",
    "--d-latent",
    "8",
    "--d-decoder",
    "32",
];

/// Trains a tiny Dis-AE on the toy task into `root/out` (writing `root/toy.csv` and
/// `root/pairs.jsonl` first); returns `lass train`'s output.
pub fn tiny_dis_ae(root: &Path, out: &str, extra: &[&str]) -> String {
    std::fs::write(root.join("toy.csv"), toy_sentiment_csv()).unwrap();
    toy_pairs(&root.join("pairs.jsonl"));
    success(
        flipside()
            .args(["lass", "train", "--unit", "text", "--data"])
            .arg(root.join("toy.csv"))
            .arg("--pairs")
            .arg(root.join("pairs.jsonl"))
            .arg("--out")
            .arg(root.join(out))
            .args(TINY_DIS_AE_SIZES)
            .args(["--ramp-steps", "50"])
            .args(["--epochs", "20", "--pair-epochs", "60", "--batch-size", "8"])
            .args(["--lr", "1e-2", "--checkpoint-every", "20"])
            .args(extra),
    )
}

/// Writes [`toy_sentiment_csv`] to `dir/toy.csv` and trains a classifier confident on it into
/// `dir/classifier`; returns both paths.
pub fn toy_classifier(dir: &Path) -> (PathBuf, PathBuf) {
    let (data, classifier) = (dir.join("toy.csv"), dir.join("classifier"));
    std::fs::write(&data, toy_sentiment_csv()).unwrap();
    success(
        flipside()
            .args(["classifier", "train", "--data"])
            .arg(&data)
            .arg("--out")
            .arg(&classifier)
            .args([
                "--epochs",
                "6",
                "--batch-size",
                "8",
                "--max-len",
                "16",
                "--lr",
                "2e-4",
            ]),
    );
    (data, classifier)
}

/// A classifier with the pretrained MiniLM encoder and a head initialised from `seed`.
pub fn minilm_classifier<B: Backend>(
    labels: &[&str],
    max_len: usize,
    seed: u64,
) -> (SequenceClassifier<B>, ClassifierConfig, BertFiles) {
    let device = Default::default();
    B::seed(&device, seed);
    let files = BertFiles::read(&asset("minilm")).unwrap();
    let config = ClassifierConfig::bert(
        files.config.clone(),
        labels.iter().map(|l| l.to_string()).collect(),
        max_len,
    );
    let mut model = config.init::<B>(&device);
    load_encoder_weights(&mut model, files.weights().unwrap()).unwrap();
    (model, config, files)
}

/// The embedded LLM of the editing tests.
pub const MODEL: &str = "smollm2-135m";

/// Helper sentences for the corpus.
pub const CORPUS: &str = "\
The acting was wooden and the plot made no sense.
What a delight this film is, the cast is superb.
A dull, lifeless script with boring explosions.
The photography is gorgeous and every frame looks like a painting.
The dialogue was painfully stiff and the actors seemed bored.
A moving, wonderful story that I would watch again tomorrow.
";

/// Items to edit.
pub const ITEMS: &str = "\
text,label
The film was wonderful and the cast superb.,positive
A boring story with dreadful acting.,negative
The music was lovely and the ending moving.,positive
The plot was dull and the jokes painful.,negative
An excellent show with a brilliant script.,positive
A terrible film and an awful waste of time.,negative
";

/// A test's own directory and items file, with the corpus (indexed with MiniLM) and the small
/// trained classifier that the editing tests share.
pub struct EditingSetup {
    pub dir: tempfile::TempDir,
    pub corpus: PathBuf,
    pub classifier: PathBuf,
    pub items: PathBuf,
}

/// A fresh setup; the corpus and classifier are made by the first test that asks, once per run.
pub fn editing_setup() -> EditingSetup {
    static SHARED: OnceLock<PathBuf> = OnceLock::new();
    let shared = SHARED.get_or_init(shared_editing_models);
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items.csv");
    std::fs::write(&items, ITEMS).unwrap();
    EditingSetup {
        dir,
        corpus: shared.join("corpus"),
        classifier: shared.join("classifier"),
        items,
    }
}

/// A Flipside home with the shared home's assets and no trained models, for servers under test:
/// `serve` picks up HOME/models/dis-ae and HOME/models/infiller when they exist, so a developer's
/// trained models would otherwise change what a test's server can do. The infiller Flipside
/// ships is written there first, so that no server under test writes it (one whose writes are
/// limited, as a full disk limits them, could not).
fn home_without_models() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        remove_leftovers("home-without-models-");
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("home-without-models-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let assets = root.join("assets");
        if !assets.exists() {
            std::os::unix::fs::symlink(home().root().join("assets"), &assets).unwrap();
        }
        shipped_infiller(&Home::new(&root)).unwrap();
        root
    })
}

/// Removes the directories `PREFIX<pid>` under the target's temporary directory that earlier
/// test runs left (their processes are gone).
fn remove_leftovers(prefix: &str) {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix(prefix)
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Builds the shared corpus, index and classifier in a directory of this test process under
/// the target directory, first removing those of earlier runs.
fn shared_editing_models() -> PathBuf {
    remove_leftovers("editing-");
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = root.join(format!("editing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Helper ids of their own: the corpus never holds an item's "own review", so retrieval
    // finds the same helpers for a dataset's item and for the same text in the demo.
    let helpers = dir.join("helpers.csv");
    let rows: Vec<String> = CORPUS
        .lines()
        .enumerate()
        .map(|(i, text)| format!("helper-{i},\"{text}\""))
        .collect();
    std::fs::write(&helpers, format!("id,text\n{}\n", rows.join("\n"))).unwrap();
    let corpus = dir.join("corpus");
    success(
        flipside()
            .args(["corpus", "build", "--id-col", "id", "--corpus"])
            .arg(&corpus)
            .arg(&helpers),
    );
    success(flipside().args(["index", "build", "--corpus"]).arg(&corpus));
    let toy = dir.join("toy.csv");
    std::fs::write(&toy, toy_sentiment_csv()).unwrap();
    success(
        flipside()
            .args(["classifier", "train", "--data"])
            .arg(&toy)
            .arg("--out")
            .arg(dir.join("classifier"))
            .args(["--epochs", "2", "--batch-size", "8", "--max-len", "24"]),
    );
    dir
}

/// Starts `flipside serve` on a free loopback port with the setup's corpus and classifier, the
/// embedded [`MODEL`] and `data_dir`; returns the process and the base URL (`http://…/`).
pub fn serve(setup: &EditingSetup, data_dir: &Path, extra: &[&str]) -> (Child, String) {
    spawn_server(serve_command(setup, data_dir, extra).stderr(Stdio::null()))
}

/// Starts a `flipside serve` command (its stdout is read here) and waits until its models are
/// loaded; returns it and its address.
pub fn spawn_server(command: &mut Command) -> (Child, String) {
    let (child, url, lines) = spawn_listening(command);
    wait_until_ready(lines);
    (child, url)
}

/// The lines a server prints on stdout.
pub type ServerLines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Starts a `flipside serve` command (its stdout is read here) and waits until it listens
/// (its models may still be prepared); returns it, its address and the rest of its stdout.
pub fn spawn_listening(command: &mut Command) -> (Child, String, ServerLines) {
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("listening on ") {
                    return (child, url.to_string(), lines);
                }
            }
            _ => {
                let status = child.wait();
                panic!("flipside serve exited before listening: {status:?}")
            }
        }
    }
}

/// Reads the server's stdout until it says "ready" (its models loaded), then keeps draining it
/// so that the server never blocks on a full pipe.
fn wait_until_ready(mut lines: ServerLines) {
    loop {
        match lines.next() {
            Some(Ok(line)) if line == "ready" => break,
            Some(Ok(_)) => {}
            _ => panic!("flipside serve exited before it was ready"),
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
}

/// The `flipside serve` command of [`serve`], not started.
pub fn serve_command(setup: &EditingSetup, data_dir: &Path, extra: &[&str]) -> Command {
    let mut command = flipside();
    command
        .env("FLIPSIDE_HOME", home_without_models())
        .args(["serve", "--model", MODEL, "--corpus"])
        .arg(&setup.corpus)
        .arg("--classifier")
        .arg(&setup.classifier)
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra);
    // A free port, unless the test picks one (to restart a server at the same address).
    if !extra.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    command
}

/// Makes `command`'s process fail writes past `bytes` in any one file, as a full disk fails
/// them (EFBIG where a full disk gives ENOSPC; the signal such a write raises is ignored, so
/// that the write returns the error).
pub fn limit_file_size(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
}
