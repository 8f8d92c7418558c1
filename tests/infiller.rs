//! The T5 infiller and AutoCAD from the command line, with tiny models: span-corruption
//! pretraining resumes to bit-identical weights, `infiller score` reads what it wrote, and on
//! a toy task `infiller pretrain` → `infiller train` → `generate --method autocad` → `eval cf`
//! makes verified counterfactuals whose records say which words were masked and how they were
//! filled; an infiller trained with retrieved keywords does the same for `--method
//! autocad-retrieval`, whose records also carry the keywords.

use std::path::Path;

use serde_json::Value;

use crate::common::{
    assert_same_file, failure, flipside, success, toy_classifier, toy_sentiment_csv,
};

const TINY: [&str; 10] = [
    "--d-model",
    "32",
    "--d-ff",
    "64",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-kv",
    "16",
];

/// A corpus of the toy sentiment sentences in `dir/corpus`.
fn toy_corpus(dir: &Path) -> std::path::PathBuf {
    let text: String = toy_sentiment_csv()
        .lines()
        .skip(1)
        .map(|line| line.rsplit_once(',').unwrap().0.to_string() + "\n")
        .collect();
    std::fs::write(dir.join("toy.txt"), text).unwrap();
    let corpus = dir.join("corpus");
    success(
        flipside()
            .args(["corpus", "build", "--min-words", "3", "--corpus"])
            .arg(&corpus)
            .arg(dir.join("toy.txt")),
    );
    corpus
}

fn pretrain(corpus: &Path, out: &Path, extra: &[&str]) -> String {
    success(
        flipside()
            .args([
                "infiller",
                "pretrain",
                "--held-out",
                "8",
                "--batch-size",
                "8",
            ])
            .args(["--epochs", "2", "--checkpoint-every", "2", "--corpus"])
            .arg(corpus)
            .arg("--out")
            .arg(out)
            .args(TINY)
            .args(extra),
    )
}

#[test]
fn pretraining_resumes_to_identical_weights_and_scores_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = toy_corpus(dir.path());
    let whole = dir.path().join("whole");
    let out = pretrain(&corpus, &whole, &[]);
    assert!(out.contains("held-out loss"), "{out}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(whole.join("pretrain.json")).unwrap()).unwrap();
    assert_eq!(report["train_sentences"], 40);
    assert!(
        report["held_out_loss"].as_f64().unwrap()
            < report["held_out_loss_initial"].as_f64().unwrap(),
        "{report}"
    );

    let resumed = dir.path().join("resumed");
    let paused = pretrain(&corpus, &resumed, &["--pause-after", "3"]);
    assert!(paused.contains("paused after step 3/10"), "{paused}");
    pretrain(&corpus, &resumed, &[]);
    assert_same_file(
        &whole.join("model.safetensors"),
        &resumed.join("model.safetensors"),
        "a resumed run must end with the same weights",
    );
    // The learning curve: the held-out loss at every checkpoint (every 2 of 10 steps, and the
    // pause at step 3 in the resumed run), ending at the report's final loss.
    let curve = |report: &Value| -> Vec<(u64, f64)> {
        report["held_out_curve"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["step"].as_u64().unwrap(), p["loss"].as_f64().unwrap()))
            .collect()
    };
    let whole_curve = curve(&report);
    let steps: Vec<u64> = whole_curve.iter().map(|p| p.0).collect();
    assert_eq!(steps, [2, 4, 6, 8, 10], "{report}");
    let final_loss = report["held_out_loss"].as_f64().unwrap();
    assert!((whole_curve[4].1 - final_loss).abs() < 1e-3, "{report}");
    let resumed_report: Value =
        serde_json::from_slice(&std::fs::read(resumed.join("pretrain.json")).unwrap()).unwrap();
    let resumed_curve = curve(&resumed_report);
    assert_eq!(resumed_curve.len(), 6, "{resumed_report}");
    assert_eq!(resumed_curve.last(), whole_curve.last());

    let score = |model: &Path| {
        success(
            flipside()
                .args(["infiller", "score", "--model"])
                .arg(model)
                .args([
                    "--input",
                    "the film we saw on day 0 was <extra_id_0> negative",
                ])
                .args(["--target", "<extra_id_0> dreadful"]),
        )
    };
    let scored = score(&whole);
    assert!(scored.starts_with("mean log-likelihood -"), "{scored}");
    assert_eq!(scored, score(&resumed));
}

#[test]
fn autocad_makes_verified_counterfactuals_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let corpus = toy_corpus(root);
    // A classifier confident on the toy task (rationales need p(gold) > 0.8).
    toy_classifier(root);
    pretrain(&corpus, &root.join("pretrained"), &[]);
    let train = |out: &str, extra: &[&str]| {
        success(
            flipside()
                .args(["infiller", "train", "--unit", "text", "--data"])
                .arg(root.join("toy.csv"))
                .arg("--classifier")
                .arg(root.join("classifier"))
                .arg("--base")
                .arg(root.join("pretrained"))
                .arg("--out")
                .arg(root.join(out))
                .args(["--epochs", "12", "--batch-size", "8", "--lr", "3e-3"])
                .args(extra),
        )
    };
    // `generate --verify` of 20 toy items into METHOD-INFILLER[-LABEL_CONTRAST].jsonl.
    let generate_with = |method: &str, infiller: &str, label_contrast: Option<&str>| {
        let mut command = flipside();
        let suffix = label_contrast.map_or(String::new(), |w| format!("-{w}"));
        command
            .args(["generate", "--method", method, "--verify", "--limit", "20"])
            .arg("--data")
            .arg(root.join("toy.csv"))
            .arg("--classifier")
            .arg(root.join("classifier"))
            .arg("--infiller")
            .arg(root.join(infiller))
            .arg("--corpus")
            .arg(&corpus)
            .arg("--out")
            .arg(root.join(format!("{method}-{infiller}{suffix}.jsonl")));
        if let Some(weight) = label_contrast {
            // With the paper's rationales, the classifier's salient words only.
            command.args(["--label-contrast", weight, "--no-opinion-words"]);
        }
        command
    };
    let generate = |method: &str, infiller: &str| generate_with(method, infiller, None);
    let trained = train("infiller", &[]);
    assert!(
        trained.contains("48 of 48 items had rationales"),
        "{trained}"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(root.join("infiller/infill.json")).unwrap()).unwrap();
    assert_eq!(report["alpha"], 0.3);
    assert_eq!(report["validation_losses"].as_array().unwrap().len(), 12);
    assert!(report.get("guidance").is_none(), "{report}");

    success(&mut generate("autocad", "infiller"));
    let out = root.join("autocad-infiller.jsonl");
    for record in verified_autocad_records(&out, "autocad") {
        let provenance = &record["provenance"];
        // The item's own opinion words are masked, and none is written back.
        assert_eq!(provenance["rationales"], "saliency+opinions", "{record}");
        // The toy task's words in Liu & Hu's lexicon ("moving" is not).
        let own: &[&str] = match record["label"].as_str().unwrap() {
            "positive" => &[
                "wonderful",
                "superb",
                "delightful",
                "brilliant",
                "excellent",
            ],
            _ => &["dreadful", "awful", "boring", "terrible", "dull", "painful"],
        };
        let original = record["original"].as_str().unwrap();
        assert!(
            !own.iter()
                .any(|w| original.contains(w) && provenance["masked"].as_str().unwrap().contains(w)),
            "{record}"
        );
        for fill in provenance["fills"].as_array().unwrap() {
            let fill = fill.as_str().unwrap().to_lowercase();
            assert!(
                !own.iter().any(|w| fill.split_whitespace().any(|f| f == *w)),
                "{record}"
            );
        }
        assert!(record["provenance"].get("keywords").is_none(), "{record}");
        assert!(
            record["provenance"].get("label_contrast").is_none(),
            "{record}"
        );
        // The most fluent flipped one of 4 candidates (AutoCAD's default), and the others
        // kept for the record.
        let chosen = &record["chosen"];
        assert_eq!(chosen["candidates"], 4, "{record}");
        let eligible = chosen["eligible"].as_u64().unwrap();
        assert!((1..=4).contains(&eligible), "{record}");
        assert!(chosen["perplexity"].as_f64().unwrap() > 1.0, "{record}");
        assert!(
            chosen["others"].as_array().map_or(0, Vec::len) <= 3,
            "{record}"
        );
    }
    // Label contrast decodes each input beside its contrast: as well formed, and recorded.
    success(&mut generate_with("autocad", "infiller", Some("1")));
    for record in verified_autocad_records(&root.join("autocad-infiller-1.jsonl"), "autocad") {
        assert_eq!(record["provenance"]["label_contrast"], 1.0, "{record}");
        assert_eq!(record["provenance"]["rationales"], "saliency", "{record}");
    }
    let evaluated = success(
        flipside()
            .args(["eval", "cf", "--no-ppl"])
            .arg(&out)
            .arg("--classifier")
            .arg(root.join("classifier")),
    );
    let row = evaluated
        .lines()
        .find(|line| line.starts_with("autocad-infiller.jsonl"))
        .unwrap_or_else(|| panic!("{evaluated}"));
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        fields[1],
        verified_autocad_records(&out, "autocad").len().to_string(),
        "{evaluated}"
    );
    assert_eq!(
        fields[2], "1.000",
        "every verified record flips: {evaluated}"
    );

    // Retrieval-guided infilling: an index of the corpus, an infiller trained with the keywords
    // of retrieved sentences; the plain one is refused for the guided method.
    success(flipside().args(["index", "build", "--corpus"]).arg(&corpus));
    let refused = failure(&mut generate("autocad-retrieval", "infiller"));
    assert!(
        refused.contains("trained without retrieved keywords"),
        "{refused}"
    );
    let trained = train(
        "guided",
        &["--retrieval", "--corpus", corpus.to_str().unwrap()],
    );
    assert!(trained.contains("keywords    retrieved from"), "{trained}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(root.join("guided/infill.json")).unwrap()).unwrap();
    assert!(
        report["guidance"]["with_keywords"].as_u64().unwrap() > 0,
        "{report}"
    );
    // Half the examples (by default) went without keywords, so the guided infiller serves the
    // plain method too.
    let keyword_free = report["guidance"]["keyword_free"].as_u64().unwrap();
    assert!((12..=36).contains(&keyword_free), "{report}");
    success(&mut generate("autocad-retrieval", "guided"));
    success(&mut generate("autocad", "guided"));
    for record in verified_autocad_records(&root.join("autocad-guided.jsonl"), "autocad") {
        assert!(record["provenance"].get("keywords").is_none(), "{record}");
    }
    for record in verified_autocad_records(
        &root.join("autocad-retrieval-guided.jsonl"),
        "autocad-retrieval",
    ) {
        let provenance = &record["provenance"];
        let keywords = provenance["keywords"].as_array().unwrap();
        assert!(!keywords.is_empty() && keywords.len() <= 12, "{record}");
        assert!(
            !provenance["retrieved"].as_array().unwrap().is_empty(),
            "{record}"
        );
    }
}

/// The records of a `generate --verify` run of an AutoCAD method: at least one, each flipped,
/// its edit the masked text with each sentinel replaced by its fill; every failed attempt
/// says why, and none is a malformed reply.
fn verified_autocad_records(out: &Path, method: &str) -> Vec<Value> {
    let records: Vec<Value> = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        !records.is_empty(),
        "no verified counterfactual of 20 items by {method}"
    );
    for record in &records {
        assert_eq!(record["method"], method);
        assert_eq!(
            record["flipped"], true,
            "--verify keeps flips only: {record}"
        );
        let provenance = &record["provenance"];
        assert_eq!(provenance["kind"], "autocad");
        let (masked, fills) = (
            provenance["masked"].as_str().unwrap(),
            provenance["fills"].as_array().unwrap(),
        );
        assert_eq!(fills.len(), provenance["spans"].as_array().unwrap().len());
        let mut rebuilt = masked.to_string();
        for (k, fill) in fills.iter().enumerate() {
            // Worded fills: each starts with a word.
            let first = fill.as_str().unwrap().chars().next();
            assert!(first.is_some_and(char::is_alphanumeric), "{record}");
            rebuilt = rebuilt.replace(&format!("<extra_id_{k}>"), fill.as_str().unwrap());
        }
        let words = |text: &str| {
            text.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            words(&rebuilt),
            words(record["edited"].as_str().unwrap()),
            "{record}"
        );
    }
    let mut failures = out.as_os_str().to_owned();
    failures.push(".failures.jsonl");
    for line in std::fs::read_to_string(failures)
        .unwrap_or_default()
        .lines()
    {
        let failure: Value = serde_json::from_str(line).unwrap();
        let reason = failure["reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "{failure}");
        // Decoding keeps the span format: no reply drops, repeats or reorders a sentinel.
        assert!(
            !reason.contains("sentinel") || reason.contains("sentinels came back (cut off"),
            "{failure}"
        );
    }
    records
}
