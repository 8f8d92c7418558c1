//! End-to-end tests of LLM editing with the real SmolLM2-135M GGUF model: CORE generation with
//! the embedded engine and through `flipside serve`'s OpenAI API, resuming after a kill, the
//! ablations, and `eval cf`.

use crate::common;

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    EditingSetup as Setup, editing_setup as setup, failure, flipside, limit_file_size, success,
};
use serde_json::Value;

use crate::accounts::{add_user, api_token};
use crate::common::{ITEMS, MODEL};
use crate::datasets::check_parquet_matches_jsonl;

impl Setup {
    fn generate(&self, method: &str, out: &Path) -> Command {
        self.generate_on(&self.items, method, out)
    }

    fn generate_on(&self, data: &Path, method: &str, out: &Path) -> Command {
        let mut command = flipside();
        command
            .args(["generate", "--method", method, "--model", MODEL, "--data"])
            .arg(data)
            .arg("--corpus")
            .arg(&self.corpus)
            .arg("--classifier")
            .arg(&self.classifier)
            .arg("--out")
            .arg(out)
            .args(["--max-attempts", "2", "--seed", "7"]);
        command
    }
}

fn lines(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn failures(out: &Path) -> Vec<Value> {
    let mut name = out.file_name().unwrap().to_os_string();
    name.push(".failures.jsonl");
    lines(&out.with_file_name(name))
}

/// Every job has exactly one counterfactual, or used up its 2 attempts; returns the records.
fn check_complete(out: &Path, jobs: usize) -> Vec<Value> {
    let records = lines(out);
    let keys: Vec<&str> = records.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let unique: HashSet<&str> = keys.iter().copied().collect();
    assert_eq!(unique.len(), keys.len(), "duplicated records: {keys:?}");
    let failed = failures(out);
    let given_up: HashSet<&str> = failed
        .iter()
        .map(|f| f["key"].as_str().unwrap())
        .filter(|k| failed.iter().filter(|f| f["key"] == *k).count() >= 2)
        .collect();
    assert!(given_up.is_disjoint(&unique));
    assert_eq!(
        unique.len() + given_up.len(),
        jobs,
        "records {keys:?}, given up {given_up:?}"
    );
    for failure in &failed {
        assert!(!failure["reason"].as_str().unwrap().is_empty());
    }
    records
}

/// Checks a CORE record's provenance.
fn check_core_record(record: &Value, model: &str) {
    assert_eq!(record["method"], "core");
    assert_ne!(record["edited"], record["original"]);
    assert!(!record["edited"].as_str().unwrap().trim().is_empty());
    assert_ne!(record["label"], record["target"]);
    let provenance = &record["provenance"];
    assert_eq!(provenance["kind"], "core");
    assert!(
        !provenance["retrieved"].as_array().unwrap().is_empty(),
        "{record}"
    );
    assert!(
        !provenance["keywords"].as_array().unwrap().is_empty(),
        "{record}"
    );
    assert_eq!(provenance["prompt"]["id"], "core-sentiment");
    assert_eq!(provenance["prompt"]["hash"].as_str().unwrap().len(), 16);
    assert!(provenance["reply"].is_string(), "{record}");
    assert_eq!(record["model"], model);
    assert!((provenance["sampling"]["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    assert_eq!(provenance["sampling"]["seed"], record["seed"]);
    assert!(record["timing"]["edit_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(record["flipped"], record["prediction"] == record["target"]);
    let p = record["target_probability"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p));
}

/// `flipside serve` with the embedded model: the process, its OpenAI API's base URL, and an
/// API token (the API's key) of a user made with `flipside users`.
fn serve(s: &Setup) -> (Child, String, String) {
    let data = s.dir.path().join("server");
    let (child, url) = common::serve(s, &data, &[]);
    add_user(&data, &[], "ada@lab.org", "lab", "reviewer");
    let key = api_token(&data, &[], "ada@lab.org", "generate");
    (child, format!("{url}v1"), key)
}

#[test]
fn core_edits_with_the_embedded_model_and_through_the_openai_server() {
    let s = setup();
    let local = s.dir.path().join("local.jsonl");
    success(&mut s.generate("core", &local));
    let records = check_complete(&local, 6);
    assert!(
        !records.is_empty(),
        "no edit at all: {:?}",
        failures(&local)
    );
    for record in &records {
        check_core_record(record, MODEL);
    }
    // Settings are saved beside the output and checked when it is continued.
    let config: Value = serde_json::from_slice(
        &std::fs::read(s.dir.path().join("local.jsonl.config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["seed"], 7);
    let error = failure(s.generate("core", &local).args(["--temperature", "0.2"]));
    assert!(
        error.contains("other settings") && error.contains("temperature"),
        "{error}"
    );

    let (mut server, url, key) = serve(&s);
    let remote = s.dir.path().join("remote.jsonl");
    let result = s
        .generate("core", &remote)
        .env("OPENAI_API_KEY", key)
        .args(["--api-base", &url, "--concurrency", "2"])
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let records = check_complete(&remote, 6);
    assert!(
        !records.is_empty(),
        "no edit at all: {:?}",
        failures(&remote)
    );
    for record in &records {
        check_core_record(record, MODEL);
    }

    let table = success(
        flipside()
            .args(["eval", "cf", "--model", MODEL])
            .arg(&local)
            .arg(&remote),
    );
    assert!(
        table.contains("self-BLEU") && table.contains("local.jsonl"),
        "{table}"
    );
    assert!(
        table.contains("remote.jsonl") && table.contains("0.445"),
        "{table}"
    );
    let json = success(
        flipside()
            .args(["eval", "cf", "--json", "--no-ppl"])
            .arg(&local),
    );
    let metrics: Value = serde_json::from_str(json.trim()).unwrap();
    let flipped = lines(&local)
        .iter()
        .filter(|r| r["flipped"] == true)
        .count();
    let flip_rate = metrics["flip_rate"].as_f64().unwrap();
    let records = lines(&local).len() as f64;
    assert!((flip_rate - flipped as f64 / records).abs() < 1e-9);
    // Re-classified by the same classifier (in batches), the flips are the same, but for a
    // probability within padding noise of the boundary.
    let json = success(
        flipside()
            .args(["eval", "cf", "--json", "--no-ppl", "--classifier"])
            .arg(&s.classifier)
            .arg(&local),
    );
    let metrics: Value = serde_json::from_str(json.trim()).unwrap();
    let under = metrics["flip_rate_under"]["flip_rate"].as_f64().unwrap();
    assert!(
        (under - flip_rate).abs() <= 1.0 / records + 1e-9,
        "{metrics}"
    );
    let svg = std::fs::read_to_string(s.dir.path().join("local.zstat.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
}

#[test]
fn a_run_stopped_by_a_full_disk_leaves_no_partial_line_and_resumes() {
    let s = setup();
    let out = s.dir.path().join("full.jsonl");
    // A limit of 2,500 bytes per file stands in for a disk that fills after a record or two.
    let mut command = s.generate("llm-only", &out);
    limit_file_size(&mut command, 2500);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("is the disk full?"), "{stderr}");
    let mut name = out.file_name().unwrap().to_os_string();
    name.push(".failures.jsonl");
    for path in [out.clone(), out.with_file_name(name)] {
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(
            bytes.is_empty() || bytes.ends_with(b"\n"),
            "a partial line in {}",
            path.display()
        );
    }
    let before = lines(&out);
    let resumed = s.generate("llm-only", &out).output().unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let records = check_complete(&out, 6);
    for earlier in before {
        assert!(records.contains(&earlier), "a record was lost: {earlier}");
    }
}

#[test]
fn a_killed_run_resumes_with_nothing_lost_or_duplicated_and_ablations_run() {
    let s = setup();
    let out = s.dir.path().join("run.jsonl");
    // Kill the run once it has written its first record.
    let mut child = s
        .generate("llm-only", &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while lines(&out).is_empty() && failures(&out).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no record written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Simulate a write cut short by the kill.
    let mut file = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
    file.write_all(b"{\"key\":\"cut-").unwrap();
    drop(file);
    let before = lines_lossy(&out);
    let summary = String::from_utf8(s.generate("llm-only", &out).output().unwrap().stderr).unwrap();
    assert!(summary.contains("items done before this run"), "{summary}");
    let records = check_complete(&out, 6);
    for earlier in before {
        assert!(records.contains(&earlier), "a record was lost: {earlier}");
    }
    for record in &records {
        assert_eq!(record["method"], "llm-only");
        assert!(
            record["provenance"]["keywords"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        assert_eq!(record["provenance"]["prompt"]["id"], "llm-only-sentiment");
    }
    // Running it again has nothing left to do.
    let again = String::from_utf8(s.generate("llm-only", &out).output().unwrap().stderr).unwrap();
    assert!(again.contains("0 counterfactuals written"), "{again}");

    // Verified: only edits the classifier flips are written.
    let verified = s.dir.path().join("verified.jsonl");
    success(s.generate("llm-only", &verified).arg("--verify"));
    for record in check_complete(&verified, 6) {
        assert_eq!(record["flipped"], true, "{record}");
    }
    for failure in failures(&verified) {
        let reason = failure["reason"].as_str().unwrap();
        if reason.starts_with("did not flip") {
            assert!(
                failure["reply"].is_string(),
                "the rejected edit is kept: {failure}"
            );
        }
    }

    // `--out FILE.parquet`: the records also as a Parquet table, from their JSON lines in
    // FILE.jsonl (what a rerun resumes from).
    let table = s.dir.path().join("retrieved.parquet");
    let printed = success(&mut s.generate("retrieve-only", &table));
    assert_eq!(printed.trim(), table.to_str().unwrap());
    let retrieved = s.dir.path().join("retrieved.jsonl");
    let records = check_complete(&retrieved, 6);
    let shown = success(flipside().args(["data", "show"]).arg(&table).args([
        "--text-col",
        "edited",
        "--label-col",
        "target",
        "--id-col",
        "key",
    ]));
    assert!(
        shown.contains(&format!("examples {}", records.len())),
        "{shown}"
    );
    if let Some(columns) = check_parquet_matches_jsonl(&table, &retrieved) {
        assert_eq!(columns[..4], ["key", "item", "method", "original"]);
    }
    for record in &records {
        let helpers: Vec<&str> = record["provenance"]["retrieved"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert_eq!(record["edited"].as_str().unwrap(), helpers[0]);
        assert!(record.get("model").is_none());
    }

    // Sentence units: from each review, the sentence that leans toward its label is edited.
    let reviews = s.dir.path().join("reviews.csv");
    std::fs::write(
        &reviews,
        "text,label\n\
         \"I saw it on Sunday with my sister and her friends. The film was wonderful and the \
         cast superb. The popcorn was awful.\",positive\n\
         \"The plot was dull and the jokes were painful throughout. Still, I liked the hat.\",\
         negative\n\
         \"Nice. Short. Good.\",positive\n",
    )
    .unwrap();
    let sentences = s.dir.path().join("sentences.jsonl");
    success(
        s.generate_on(&reviews, "retrieve-only", &sentences)
            .args(["--unit", "sentence"]),
    );
    let mut originals: Vec<String> = lines(&sentences)
        .iter()
        .map(|r| r["original"].as_str().unwrap().to_string())
        .collect();
    originals.sort();
    assert_eq!(
        originals,
        [
            "The film was wonderful and the cast superb.",
            "The plot was dull and the jokes were painful throughout."
        ]
    );
}

/// The complete records of a file whose last line may be cut short.
fn lines_lossy(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn bad_options_are_refused_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items.csv");
    std::fs::write(&items, ITEMS).unwrap();
    let error = failure(
        flipside()
            .args(["generate", "--method", "llm-only", "--data"])
            .arg(&items)
            .args(["--target", "neutral"]),
    );
    assert!(
        error.contains("--target \"neutral\" is not a label"),
        "{error}"
    );
    let error = failure(
        flipside()
            .args(["generate", "--data"])
            .arg(&items)
            .args(["--prompt", "core-nli"]),
    );
    assert!(
        error.contains("template core-nli is for Nli data"),
        "{error}"
    );
    let error = failure(flipside().args(["generate", "--prompt", "no-such-template"]));
    assert!(
        error.contains("neither a template file nor a built-in"),
        "{error}"
    );
}

#[test]
fn seed_pairs_are_made_from_flipped_counterfactuals() {
    let dir = tempfile::tempdir().unwrap();
    let record = |key: &str, flipped: bool, p: f64| {
        serde_json::json!({
            "key": key, "item": key, "method": "core", "original": "The acting was superb.",
            "edited": format!("The acting was wooden ({key})."), "label": "positive",
            "target": "negative", "attempt": 1, "timing": {"retrieve_ms": 1.0, "llm_ms": 2.0,
            "classify_ms": 3.0, "prompt_tokens": 10, "completion_tokens": 5},
            "prediction": if flipped { "negative" } else { "positive" },
            "target_probability": p, "flipped": flipped,
        })
        .to_string()
    };
    let input = dir.path().join("cf.jsonl");
    let lines = [
        record("a", true, 0.9),
        record("b", true, 0.6),
        record("c", false, 0.2),
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("pairs.jsonl");
    let make = |min: &str| {
        let mut command = flipside();
        command
            .args(["pairs", "make", "--min-probability", min, "--out"])
            .arg(&out)
            .arg(&input);
        command
    };
    success(&mut make("0.7"));
    let pairs = self::lines(&out);
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0]["text"], "The acting was superb.");
    assert_eq!(pairs[0]["counterfactual"], "The acting was wooden (a).");
    assert_eq!(pairs[0]["label"], "positive");
    success(&mut make("0.5"));
    assert_eq!(self::lines(&out).len(), 2);
    let error = failure(&mut make("0.95"));
    assert!(error.contains("none of the 3 counterfactuals"), "{error}");

    // --max-change keeps the minimal edits: "wooden (a)" changes 4 of 8 tokens, a rewrite all.
    let mut rewritten = record("d", true, 0.9);
    rewritten = rewritten.replace(
        "The acting was wooden (d).",
        "Nobody should sit through this dreary mess.",
    );
    std::fs::write(&input, [lines.join("\n"), rewritten].join("\n") + "\n").unwrap();
    success(&mut make("0.5"));
    assert_eq!(self::lines(&out).len(), 3);
    success(make("0.5").args(["--max-change", "0.5"]));
    let minimal = self::lines(&out);
    assert_eq!(minimal.len(), 2);
    assert!(
        minimal
            .iter()
            .all(|p| p["counterfactual"] != "Nobody should sit through this dreary mess.")
    );
    let error = failure(make("0.5").args(["--max-change", "0.1"]));
    assert!(
        error.contains("none of the 3 flipped counterfactuals changes at most 0.1"),
        "{error}"
    );
}

#[test]
fn a_prompt_is_optimised_with_fixed_examples_and_a_rerun_asks_the_llm_nothing() {
    use flipside_backend::editing::prompts::PromptTemplate;
    let s = setup();
    let template = s.dir.path().join("one-demo.toml");
    std::fs::write(
        &template,
        r#"id = "one-demo"
description = "one demonstration"
task = "sentiment"
system = "You rewrite reviews. Reply with the rewrite only."
answer_prefix = "Counterfactual:"
stop = ["\nExample:"]

[template]
text = """
Rewrite the review with the opposite sentiment, changing few words.

Example: A lovely film.

Counterfactual: A dreary film.

Example: {text}

Counterfactual:"""
"#,
    )
    .unwrap();
    let examples = s.dir.path().join("fixed.jsonl");
    let pair = |text: &str, cf: &str, label: &str| {
        serde_json::json!({"text": text, "label": label, "counterfactual": cf}).to_string()
    };
    std::fs::write(
        &examples,
        [
            pair("The cast is superb.", "The cast is dreadful.", "positive"),
            pair("I loved every minute.", "I hated every minute.", "positive"),
        ]
        .join("\n"),
    )
    .unwrap();
    let out = s.dir.path().join("optimised");
    let optimise = |examples: &Path, extra: &[&str]| {
        let mut command = flipside();
        command
            .args([
                "pairs",
                "optimise-prompt",
                "--model",
                MODEL,
                "--unit",
                "text",
            ])
            .arg("--data")
            .arg(&s.items)
            .arg("--classifier")
            .arg(&s.classifier)
            .arg("--prompt")
            .arg(&template)
            .arg("--examples")
            .arg(examples)
            .arg("--out")
            .arg(&out)
            .args(["--failures", "2", "--successes", "1", "--max-tokens", "24"])
            .args(extra);
        command
    };
    // Every insertion kept (a gain of at least -1), so both examples go in.
    let keep_all = ["--min-gain=-1", "--target-rate", "2"];
    let printed = success(&mut optimise(&examples, &keep_all));
    assert_eq!(
        printed.trim(),
        out.join("prompt.toml").display().to_string()
    );
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let set = trace["failures"].as_u64().unwrap() + trace["successes"].as_u64().unwrap();
    assert!((1..=3).contains(&set), "{trace}");
    let steps = trace["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{trace}");
    for (step, positions) in steps.iter().zip([2, 3]) {
        assert_eq!(step["kept"], true);
        let rates = step["rates"].as_array().unwrap();
        assert_eq!(rates.len(), positions, "one rate per position: {step}");
        assert!(
            rates
                .iter()
                .all(|r| (0.0..=1.0).contains(&r.as_f64().unwrap()))
        );
    }
    assert_eq!(trace["rates"].as_array().unwrap().len(), 3);
    let optimised = PromptTemplate::load(out.join("prompt.toml").to_str().unwrap()).unwrap();
    let answers = optimised.demonstration_answers();
    assert_eq!(answers.len(), 3, "{}", optimised.text);
    for added in ["The cast is dreadful.", "I hated every minute."] {
        assert!(answers.contains(&added), "{answers:?}");
    }
    assert!(answers.contains(&"A dreary film."));
    // Each evaluated (template, item) once; the rerun finds them all saved.
    let calls = lines(&out.join("evaluations.jsonl")).len();
    let scored: u64 = steps
        .iter()
        .map(|s| s["scored"].as_u64().unwrap() * s["rates"].as_array().unwrap().len() as u64)
        .sum();
    assert!(
        calls as u64 >= scored && scored > 0,
        "{calls} calls, {scored} scored"
    );
    success(&mut optimise(&examples, &keep_all));
    assert_eq!(lines(&out.join("evaluations.jsonl")).len(), calls);
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    assert_eq!(again, trace);

    // Examples must go the items' way.
    let backwards = s.dir.path().join("backwards.jsonl");
    std::fs::write(&backwards, pair("Dull.", "Great.", "negative")).unwrap();
    let error = failure(&mut optimise(&backwards, &[]));
    assert!(
        error.contains("must go from positive to negative"),
        "{error}"
    );
}

/// `bench cf` runs each method on the same items with the same attempts and filter, scores the
/// accepted edits with an independent judge, and resumes: a second run generates nothing more
/// and scores the same counterfactuals.
#[test]
fn bench_cf_scores_every_method_on_the_same_items_and_resumes() {
    let s = setup();
    let out = s.dir.path().join("bench");
    // Classifiers of 8 or 16 IMDb training reviews (one step each), for the judge and for the
    // check that it is independent of the filter.
    let imdb_classifier = |name: &str, draw: &[&str]| {
        let dir = s.dir.path().join(name);
        success(
            flipside()
                .args([
                    "classifier",
                    "train",
                    "--data",
                    "imdb:train",
                    "--epochs",
                    "1",
                ])
                .args(["--batch-size", "16", "--max-len", "16"])
                .args(draw)
                .arg("--out")
                .arg(&dir),
        );
        dir
    };
    let judge = imdb_classifier("judge", &["--skip", "8", "--limit", "8"]);
    let bench_with = |classifier: &Path, judge: &Path| {
        let mut command = flipside();
        command
            .args(["bench", "cf", "--items", "4", "--max-attempts", "2"])
            .args(["--methods", "llm-only,retrieve-only", "--model", MODEL])
            .arg("--data")
            .arg(&s.items)
            .arg("--corpus")
            .arg(&s.corpus)
            .arg("--classifier")
            .arg(classifier)
            .arg("--judge")
            .arg(judge)
            .arg("--out")
            .arg(&out);
        command
    };
    let bench = || bench_with(&s.classifier, &judge);
    let table = success(&mut bench());
    assert!(table.contains("| method | yield |"), "{table}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["items"], 4, "{report}");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    for row in rows {
        let accepted = row["accepted"].as_u64().unwrap();
        assert!(accepted <= 4, "{row}");
        assert_eq!(row["yield_rate"].as_f64().unwrap(), accepted as f64 / 4.0);
        assert!(row["proposals"].as_u64().unwrap() >= accepted, "{row}");
        for share in ["flip_before", "flip_after", "levenshtein", "distinct_2"] {
            let value = row[share].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&value), "{share}: {row}");
        }
        assert!(row["seconds_per_item"].as_f64().unwrap() > 0.0, "{row}");
        // Its records, every one accepted by the filter, are kept for the next run.
        let method = row["method"].as_str().unwrap();
        let records = lines(&out.join(format!("{method}.jsonl")));
        assert!(records.iter().all(|r| r["flipped"] == true), "{records:?}");
        if accepted > 0 {
            assert!(row["cpu_seconds_per_accepted"].as_f64().unwrap() > 0.0);
            assert!(row["perplexity"].as_f64().unwrap() > 1.0, "{row}");
        }
    }
    let retrieve_only = &rows[1];
    assert_eq!(retrieve_only["method"], "retrieve-only");
    assert!(
        retrieve_only["proposals"].as_u64().unwrap() > 0,
        "{retrieve_only}"
    );
    // The items are the file's, the target the other label, ids prefixed with the set.
    let items = lines(&out.join("items.jsonl"));
    assert_eq!(items.len(), 4);
    assert!(
        items
            .iter()
            .all(|i| i["label"] != i["target"] && i["id"].as_str().unwrap().contains("items.csv/"))
    );

    // Run again: everything is done, so nothing is generated and the scores stand.
    success(&mut bench());
    let again: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    for (row, before) in again["rows"].as_array().unwrap().iter().zip(rows) {
        assert_eq!(row["accepted"], before["accepted"]);
        assert_eq!(row["flip_after"], before["flip_after"]);
    }
    // Scoring alone lists a method that never ran as not run, not as a yield of 0.
    let table = success(bench().args(["--score-only", "--methods", "lass"]));
    assert!(table.contains("| lass | skipped: not run yet"), "{table}");
    let scored: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(scored["rows"][0]["accepted"], rows[0]["accepted"]);

    // The judge must be independent of the filter: another model, trained on none of the
    // filter's examples. The judge of 8 reviews after the first 8 is; one of the first 16 is not.
    let error = failure(bench_with(&s.classifier, &s.classifier).arg("--score-only"));
    assert!(
        error.contains("the judge and the filter are the same"),
        "{error}"
    );
    let filter = imdb_classifier("filter", &["--limit", "8"]);
    success(bench_with(&filter, &judge).arg("--score-only"));
    let overlapping = imdb_classifier("overlapping", &["--limit", "16"]);
    let error = failure(bench_with(&filter, &overlapping).arg("--score-only"));
    assert!(
        error.contains("was trained on 8 of the examples the filter"),
        "{error}"
    );
    // A record from before ids were kept cannot be checked (a warning); training the same model
    // again only adds its ids back.
    let record_path = filter.join("training.json");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    let ids = record.as_object_mut().unwrap().remove("train_ids").unwrap();
    assert_eq!(ids.as_array().unwrap().len(), 8);
    std::fs::write(&record_path, record.to_string()).unwrap();
    let unchecked = bench_with(&filter, &overlapping)
        .arg("--score-only")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unchecked.stderr);
    assert!(unchecked.status.success(), "{stderr}");
    assert!(stderr.contains("predates training ids"), "{stderr}");
    imdb_classifier("filter", &["--limit", "8"]);
    let again: Value = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert_eq!(again["train_ids"], ids);
    assert_eq!(
        again["train_seconds"], record["train_seconds"],
        "trained again"
    );
    let error = failure(bench_with(&filter, &overlapping).arg("--score-only"));
    assert!(
        error.contains("was trained on 8 of the examples the filter"),
        "{error}"
    );
}
