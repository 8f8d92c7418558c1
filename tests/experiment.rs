//! `flipside experiment`: a 3-seed bag-of-words experiment on small files — interrupted and
//! resumed without retraining a finished unit — and its early errors.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use crate::common::{failure, flipside, success};

const POSITIVE: [&str; 8] = [
    "wonderful",
    "superb",
    "delightful",
    "brilliant",
    "excellent",
    "moving",
    "gripping",
    "charming",
];
const NEGATIVE: [&str; 8] = [
    "dreadful", "awful", "boring", "terrible", "dull", "painful", "tedious", "clumsy",
];

/// A base set with a spurious cue (positive reviews mention "that director", negative ones
/// "that studio"), counterfactuals of its first 40 examples (the adjective flipped, the cue
/// kept), and an out-of-domain test set where the cue points the other way. Returns the
/// experiment file.
fn write_files(dir: &Path) -> std::path::PathBuf {
    let mut base = String::from("id,text,label\n");
    let mut records = String::new();
    let mut i = 0;
    for subject in ["film", "movie", "show", "story", "cast", "script"] {
        for (good, bad) in POSITIVE.iter().zip(NEGATIVE) {
            for (text, label, edited, target) in [
                (
                    format!("the {subject} by that director was {good}"),
                    "positive",
                    format!("the {subject} by that director was {bad}"),
                    "negative",
                ),
                (
                    format!("the {subject} from that studio was {bad}"),
                    "negative",
                    format!("the {subject} from that studio was {good}"),
                    "positive",
                ),
            ] {
                base.push_str(&format!("b{i},{text},{label}\n"));
                if i < 40 {
                    let record = serde_json::json!({
                        "key": format!("b{i}→{target}"), "item": format!("b{i}"),
                        "method": "core", "original": text, "edited": edited, "label": label,
                        "target": target, "seed": 1, "attempt": 1, "prediction": target,
                        "target_probability": 0.9, "flipped": i % 5 != 0,
                        "timing": {"context_ms": 1.0, "edit_ms": 1.0, "judge_ms": 1.0},
                        "provenance": {"kind": "core"}
                    });
                    records.push_str(&format!("{record}\n"));
                }
                i += 1;
            }
        }
    }
    fs::write(dir.join("base.csv"), base).unwrap();
    fs::write(dir.join("core.jsonl"), records).unwrap();
    let mut ood = String::from("review\tsentiment\n");
    for subject in ["picture", "tale"] {
        for (good, bad) in POSITIVE.iter().zip(NEGATIVE) {
            ood.push_str(&format!("a {subject} from that studio, {good}\t1\n"));
            ood.push_str(&format!("a {subject} by that director, {bad}\t0\n"));
        }
    }
    fs::write(dir.join("ood.tsv"), ood).unwrap();
    let config = dir.join("experiment.toml");
    fs::write(
        &config,
        r#"
name = "toy spurious cue"
seeds = [1, 2, 3]
bootstrap_replicates = 2000

[model]
kind = "bow"

[base]
dataset = "base.csv"
limit = 60
seed = 4
id_column = "id"

[[conditions]]
name = "baseline"

[[conditions]]
name = "core"
augment = ["core.jsonl"]

[[conditions]]
name = "core, flipped only"
augment = ["core.jsonl"]
only_flipped = true

[[conditions]]
name = "in-domain control"
in_domain_like = "core"

[[tests]]
name = "in domain"
dataset = "base.csv:test"
id_column = "id"

[[tests]]
name = "out of domain"
dataset = "ood.tsv"
text_column = "review"
label_column = "sentiment"
labels = ["negative", "positive"]
"#,
    )
    .unwrap();
    config
}

/// `flipside experiment CONFIG --out OUT`.
fn experiment(config: &Path, out: &Path) -> Command {
    let mut command = flipside();
    command.arg("experiment").arg(config).arg("--out").arg(out);
    command
}

fn unit_files(out: &Path) -> Vec<(String, SystemTime)> {
    let mut units: Vec<(String, SystemTime)> = fs::read_dir(out.join("units"))
        .map(|dir| {
            dir.map(|entry| {
                let path = entry.unwrap().path().join("unit.json");
                let modified = fs::metadata(&path).unwrap().modified().unwrap();
                (path.display().to_string(), modified)
            })
            .collect()
        })
        .unwrap_or_default();
    units.sort();
    units
}

#[test]
fn a_bag_of_words_experiment_resumes_without_retraining_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_files(dir.path());
    let out = dir.path().join("out");
    let run = |extra: &[&str]| {
        let output = experiment(&config, &out).args(extra).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };

    // Interrupted after 5 of the 12 units (4 conditions × 3 seeds).
    let (stdout, stderr) = run(&["--stop-after-units", "5"]);
    assert!(
        stderr.contains("5 units trained now, 0 finished before; 7 left"),
        "{stderr}"
    );
    assert!(
        stdout.trim().is_empty(),
        "no table before every unit is done: {stdout}"
    );
    let first = unit_files(&out);
    assert_eq!(first.len(), 5);
    assert!(!out.join("results.json").exists());

    // Resumed: the finished units are read, not retrained (their files are untouched).
    let (stdout, stderr) = run(&[]);
    assert!(
        stderr.contains("7 units trained now, 5 finished before"),
        "{stderr}"
    );
    let second = unit_files(&out);
    assert_eq!(second.len(), 12);
    for unit in &first {
        assert!(second.contains(unit), "{unit:?} was rewritten");
    }
    assert!(
        stdout.contains(
            "| condition | train | accuracy | Δ | 95% CI | p | Δ vs control | p vs control | \
             balanced | recall negative | recall positive |"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("paired bootstrap"), "{stdout}");

    let result: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("results.json")).unwrap()).unwrap();
    let conditions = result["conditions"].as_array().unwrap();
    let added: Vec<u64> = conditions
        .iter()
        .map(|c| c["added"].as_u64().unwrap())
        .collect();
    // 60 base examples; of the 40 records, those of base examples (not all 40 are among the
    // seeded 60 of 96) are added, fewer when only flipped ones count; the control adds as many
    // fresh originals as "core" adds counterfactuals.
    assert_eq!(added[0], 0);
    assert!(added[1] > 10 && added[1] < 40, "{added:?}");
    assert!(added[2] < added[1] && added[2] > 0, "{added:?}");
    assert_eq!(added[3], added[1]);
    let inputs = result["inputs"].as_array().unwrap();
    assert!(
        inputs
            .iter()
            .any(|i| i["role"] == "augment: core" && i["sha256"].as_str().unwrap().len() == 64),
        "{inputs:?}"
    );

    // The cue misleads the baseline out of domain; counterfactuals that keep the cue and flip
    // the label teach the adjective instead, and the size-matched control does not.
    let ood = &result["tests"][1];
    assert_eq!(ood["name"], "out of domain");
    let mean = |row: usize| ood["rows"][row]["accuracy"]["mean"].as_f64().unwrap();
    assert!(mean(0) < 0.3, "baseline {}", mean(0));
    assert!(mean(1) > mean(0) + 0.2, "core {} vs {}", mean(1), mean(0));
    assert!(mean(3) < 0.3, "control {}", mean(3));
    // The out-of-domain set has as many of each label: the balanced accuracy is the accuracy,
    // the mean of the two recalls.
    for row in ood["rows"].as_array().unwrap() {
        let recall = |label: usize| row["recalls"][label]["mean"].as_f64().unwrap();
        let balanced = row["balanced_accuracy"]["mean"].as_f64().unwrap();
        let accuracy = row["accuracy"]["mean"].as_f64().unwrap();
        assert!((balanced - accuracy).abs() < 1e-12, "{row}");
        assert!(
            (balanced - (recall(0) + recall(1)) / 2.0).abs() < 1e-12,
            "{row}"
        );
    }
    let versus = &ood["rows"][1]["versus_baseline"];
    assert!(versus["p_value"].as_f64().unwrap() <= 1.0);
    // "core" is also tested against the control made for it: core minus control.
    let versus_control = &ood["rows"][1]["versus_control"];
    assert_eq!(versus_control["control"], "in-domain control");
    let difference = versus_control["difference"].as_f64().unwrap();
    assert!(
        (difference - (mean(1) - mean(3))).abs() < 1e-9,
        "{versus_control}"
    );
    for row in [0, 2, 3] {
        assert!(
            ood["rows"][row].get("versus_control").is_none(),
            "row {row}"
        );
    }
    assert_eq!(ood["rows"][0]["accuracies"].as_array().unwrap().len(), 3);

    let svg = fs::read_to_string(out.join("accuracy.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("out of domain"),
        "{svg}"
    );
    let summary = fs::read_to_string(out.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 1 + 2 * 4, "{summary}");
    let seeds = fs::read_to_string(out.join("seeds.csv")).unwrap();
    assert_eq!(seeds.lines().count(), 1 + 2 * 4 * 3, "{seeds}");

    // A third run trains nothing and prints the same table.
    let (again, stderr) = run(&[]);
    assert!(
        stderr.contains("0 units trained now, 12 finished before"),
        "{stderr}"
    );
    assert_eq!(again, stdout);
}

#[test]
fn experiments_fail_before_training_on_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_files(dir.path());
    let text = fs::read_to_string(&config).unwrap();
    let out = dir.path().join("out");
    let fails_with = |edited: String, expected: &str| {
        let path = dir.path().join("bad.toml");
        fs::write(&path, edited).unwrap();
        let stderr = failure(&mut experiment(&path, &out));
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
        assert!(!out.join("units").exists(), "trained despite: {stderr}");
    };
    fails_with(
        text.replace("core.jsonl", "missing.jsonl"),
        "missing.jsonl does not exist",
    );
    fails_with(
        text.replace("text_column = \"review\"", "text_column = \"body\""),
        "body",
    );
    fails_with(
        text.replace(
            "labels = [\"negative\", \"positive\"]",
            "labels = [\"neg\", \"pos\"]",
        ),
        "which the training set lacks",
    );
    fails_with(
        text.replace("seeds = [1, 2, 3]", "seeds = [1, 1]"),
        "repeat",
    );
    fails_with(
        text.replace("in_domain_like = \"core\"", "in_domain_like = \"cor\""),
        "not a condition",
    );
    fails_with(
        text.replace(
            "in_domain_like = \"core\"",
            "in_domain_like = \"core\"\nbalance_labels = true",
        ),
        "says which records to add",
    );
    fails_with(
        text.replacen(
            "[[tests]]",
            "[[conditions]]\nname = \"second control\"\nin_domain_like = \"core\"\n\n[[tests]]",
            1,
        ),
        "are both size-matched controls of \"core\"",
    );

    // Flags alone: a quick run needs at least a base set and a test set.
    let stderr = failure(flipside().arg("experiment").arg("--model").arg("bow"));
    assert!(stderr.contains("--base"), "{stderr}");
    let stdout = success(
        flipside()
            .current_dir(dir.path())
            .args(["experiment", "--model", "bow", "--out", "quick"])
            .args([
                "--base",
                "base.csv:train",
                "--limit",
                "30",
                "--id-col",
                "id",
            ])
            .args([
                "--augment",
                "core=core.jsonl",
                "--in-domain-control",
                "core",
            ])
            .args(["--test", "base.csv:test"]),
    );
    for condition in ["| baseline |", "| core |", "| in-domain control (core) |"] {
        assert!(stdout.contains(condition), "{condition} not in {stdout}");
    }
    assert!(dir.path().join("quick/accuracy.svg").is_file());

    // The base set can be the items a counterfactual file's run picked: the 40 originals it
    // edits and the 2 whose every attempt failed (its failure sidecar); the control's fresh
    // examples can come from another dataset (as many as the 32 flipped counterfactuals: all of
    // ood.tsv).
    let failures = [("b40", "positive"), ("b41", "negative")].map(|(id, target)| {
        format!(r#"{{"key":"{id}→{target}","attempt":3,"reason":"empty reply"}}"#)
    });
    fs::write(
        dir.path().join("core.jsonl.failures.jsonl"),
        failures.join("\n") + "\n",
    )
    .unwrap();
    let edited = text
        .replace("limit = 60\n", "originals_of = \"core.jsonl\"\n")
        .replace("seeds = [1, 2, 3]", "seeds = [1]")
        .replace(
            "in_domain_like = \"core\"\n",
            "in_domain_like = \"core, flipped only\"\n\n[conditions.in_domain_from]\n\
             dataset = \"ood.tsv\"\ntext_column = \"review\"\nlabel_column = \"sentiment\"\n\
             labels = [\"negative\", \"positive\"]\n",
        );
    let (_, result) = run_variant(dir.path(), "originals", &edited);
    let sizes: Vec<u64> = result["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["train_examples"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [42, 82, 74, 74], "{result}");
    let pool = result["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|input| input["role"] == "in-domain pool of in-domain control")
        .unwrap_or_else(|| panic!("no pool input in {result}"));
    assert_eq!(pool["examples"], 32, "{pool}");

    // A skewed base (LASS's debiasing): 40 examples, 85% positive; records of any original,
    // at most 5 of them, are added.
    let skewed = text
        .replace(
            "limit = 60\n",
            "limit = 40\nlabel_shares = { positive = 0.85, negative = 0.15 }\n",
        )
        .replace("seeds = [1, 2, 3]", "seeds = [1]")
        .replace(
            "augment = [\"core.jsonl\"]\n\n",
            "augment = [\"core.jsonl\"]\nany_original = true\nmax_added = 5\n\n",
        );
    let (stdout, result) = run_variant(dir.path(), "skewed", &skewed);
    let conditions = &result["conditions"];
    assert_eq!(
        conditions[0]["label_counts"],
        serde_json::json!([6, 34]),
        "{result}"
    );
    assert_eq!(conditions[1]["added"], 5, "{result}");
    assert_eq!(conditions[1]["train_examples"], 45, "{result}");
    assert!(stdout.contains("recall negative"), "{stdout}");
    fails_with_shares(&dir.path().join("bad-shares.toml"), &text);

    // Balanced: as many counterfactuals of each target label, and a control of that size.
    let balanced = text.replace("seeds = [1, 2, 3]", "seeds = [1]").replace(
        "augment = [\"core.jsonl\"]\n\n",
        "augment = [\"core.jsonl\"]\nbalance_labels = true\n\n",
    );
    let (_, result) = run_variant(dir.path(), "balanced", &balanced);
    let conditions = result["conditions"].as_array().unwrap();
    let counts = |c: &serde_json::Value| -> Vec<u64> {
        let counts = c["label_counts"].as_array().unwrap();
        counts.iter().map(|n| n.as_u64().unwrap()).collect()
    };
    let (base, core) = (counts(&conditions[0]), counts(&conditions[1]));
    let added = [core[0] - base[0], core[1] - base[1]];
    assert!(added[0] == added[1] && added[0] > 0, "{result}");
    assert_eq!(conditions[1]["added"], added[0] * 2, "{result}");
    assert_eq!(conditions[3]["added"], conditions[1]["added"], "{result}");
}

/// Writes `text` as DIR/NAME.toml and runs it into DIR/NAME: its stdout and results.json.
fn run_variant(dir: &Path, name: &str, text: &str) -> (String, serde_json::Value) {
    let path = dir.join(format!("{name}.toml"));
    fs::write(&path, text).unwrap();
    let stdout = success(&mut experiment(&path, &dir.join(name)));
    let results = fs::read(dir.join(name).join("results.json")).unwrap();
    (stdout, serde_json::from_slice(&results).unwrap())
}

/// `label_shares` that do not sum to 1, or without a `limit`, fail before training.
fn fails_with_shares(path: &Path, text: &str) {
    for (shares, expected) in [
        (
            "limit = 40\nlabel_shares = { positive = 0.8 }\n",
            "sum to 1",
        ),
        (
            "label_shares = { positive = 0.5, negative = 0.5 }\n",
            "need a `limit`",
        ),
    ] {
        fs::write(path, text.replace("limit = 60\n", shares)).unwrap();
        let stderr = failure(flipside().arg("experiment").arg(path));
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
}
