//! LASS from the command line, with a tiny Dis-AE on the toy task: `lass train` (vocabulary,
//! corpus-first stage, pairs stage) resumes to identical weights; `generate --method lass`
//! rewrites toy sentences with the other sentiment in both directions, keeping only what the
//! classifier flips; the perplexity filter (SmolLM2) drops what is above its threshold and its
//! source's; sentiment parents are texts of the target label; outputs keep the items' casing;
//! `eval cf` reads the records; `lass evaluate` scores the rewrites of pairs.

use std::path::Path;

use serde_json::Value;

use crate::common::{
    TINY_DIS_AE_SIZES, assert_same_file, failure, flipside, success, tiny_dis_ae, toy_classifier,
    toy_sentiment_csv,
};

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn lass_trains_resumes_and_reproduces_both_directions_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (data, classifier) = toy_classifier(root);

    let trained = tiny_dis_ae(root, "dis-ae", &[]);
    assert!(
        trained.contains("data        48 texts, 24 pairs"),
        "{trained}"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(root.join("dis-ae/lass.json")).unwrap()).unwrap();
    assert_eq!(
        report["labels"],
        serde_json::json!(["negative", "positive"])
    );
    let losses = |stage: &str| -> Vec<f64> {
        report[stage]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_f64().unwrap())
            .collect()
    };
    let corpus = losses("corpus_losses");
    assert_eq!(corpus.len(), 20);
    assert!(corpus[19] < corpus[0] / 2.0, "{corpus:?}");
    assert_eq!(losses("pair_losses").len(), 60);
    assert_eq!(
        report["sentiment_parents"]["negative"]
            .as_array()
            .unwrap()
            .len(),
        24
    );

    // `lass evaluate` on the pairs it learnt: it reconstructs them and rewrites each side into
    // the other, from the other side's sentiment and from the other label's vector.
    let evaluated = success(
        flipside()
            .args(["lass", "evaluate", "--max-perplexity", "0", "--pairs"])
            .arg(root.join("pairs.jsonl"))
            .arg("--dis-ae")
            .arg(root.join("dis-ae"))
            .arg("--json")
            .arg(root.join("evaluation.json")),
    );
    assert!(
        evaluated.contains("24 pairs, both directions"),
        "{evaluated}"
    );
    let evaluation: Value =
        serde_json::from_slice(&std::fs::read(root.join("evaluation.json")).unwrap()).unwrap();
    assert_eq!(evaluation["pairs"], 24);
    // Each toy pair differs in its last word of nine: copying a side scores 8/9 against the
    // other.
    let copied = evaluation["copy"]["rouge_l"].as_f64().unwrap();
    assert!((copied - 800.0 / 9.0).abs() < 1e-9, "{evaluation}");
    for decoding in ["reconstruction", "counterfactual", "label"] {
        let scores = &evaluation[decoding];
        let rouge_l = scores["rouge"]["rouge_l"].as_f64().unwrap();
        assert!(rouge_l > 60.0 && rouge_l <= 100.0, "{decoding}: {scores}");
        assert!(scores["perplexity"].is_null(), "{scores}");
    }

    // Paused in the corpus stage, then resumed through both stages: the same weights.
    let paused = tiny_dis_ae(root, "resumed", &["--pause-after", "30"]);
    assert!(paused.contains("paused after step 30/120"), "{paused}");
    assert!(paused.contains("(stage: corpus)"), "{paused}");
    tiny_dis_ae(root, "resumed", &[]);
    assert_same_file(
        &root.join("dis-ae/model.safetensors"),
        &root.join("resumed/model.safetensors"),
        "a resumed run must end with the same weights",
    );

    // Trained further on the pairs alone (`--from`): the trained Dis-AE's vocabulary and sizes
    // carry over, and its first pass over the pairs costs less than a fresh model's.
    let on_pairs = |out: &str, extra: &[&str]| {
        success(
            flipside()
                .args(["lass", "train", "--data", "none", "--pairs"])
                .arg(root.join("pairs.jsonl"))
                .arg("--out")
                .arg(root.join(out))
                .args(TINY_DIS_AE_SIZES)
                .args(["--ramp-steps", "4"])
                .args(["--pair-epochs", "3", "--batch-size", "8", "--lr", "1e-2"])
                .args(extra),
        );
        let report: Value =
            serde_json::from_slice(&std::fs::read(root.join(out).join("lass.json")).unwrap())
                .unwrap();
        report["pair_losses"][0].as_f64().unwrap()
    };
    let from = root.join("dis-ae");
    let further = on_pairs("further", &["--from", from.to_str().unwrap()]);
    let fresh = on_pairs("fresh", &["--labels", "negative,positive"]);
    assert!(
        further < fresh / 2.0,
        "from the trained Dis-AE {further}, fresh {fresh}"
    );
    for file in ["tokenizer.json", "config.json"] {
        assert_same_file(
            &root.join("dis-ae").join(file),
            &root.join("further").join(file),
            file,
        );
    }
    let both = failure(
        flipside()
            .args(["lass", "train", "--unit", "text", "--data"])
            .arg(root.join("toy.csv"))
            .arg("--pairs")
            .arg(root.join("pairs.jsonl"))
            .arg("--from")
            .arg(&from)
            .arg("--out")
            .arg(root.join("both")),
    );
    assert!(both.contains("--data none"), "{both}");

    let generate_from = |data: &Path, out: &str, extra: &[&str]| {
        let mut command = flipside();
        command
            .args(["generate", "--method", "lass", "--data"])
            .arg(data)
            .arg("--classifier")
            .arg(&classifier)
            .arg("--dis-ae")
            .arg(root.join("dis-ae"))
            .arg("--out")
            .arg(root.join(out))
            .args(extra);
        command
    };
    let generate = |out: &str, extra: &[&str]| generate_from(&data, out, extra);
    // Without the fluency filter: every record is a flip (LASS always verifies), made by beam
    // search from the item's content and the target label's vector.
    success(&mut generate("label.jsonl", &["--max-perplexity", "0"]));
    let made = records(&root.join("label.jsonl"));
    let failures =
        std::fs::read_to_string(root.join("label.jsonl.failures.jsonl")).unwrap_or_default();
    assert!(
        made.len() >= 36,
        "{} of 48 items reproduced; failures:\n{failures}",
        made.len()
    );
    for target in ["negative", "positive"] {
        assert!(made.iter().any(|r| r["target"] == target), "no {target}");
    }
    for record in &made {
        assert_eq!(record["method"], "lass");
        assert_eq!(record["flipped"], true, "{record}");
        assert_ne!(record["edited"], record["original"]);
        let provenance = &record["provenance"];
        assert_eq!(provenance["kind"], "lass");
        if record["attempt"] == 1 {
            // Without the filter, the best hypothesis that changes the text.
            let search = provenance["search"].as_str().unwrap();
            assert!(search.starts_with("beam 4, hypothesis "), "{record}");
        }
        assert!(provenance.get("perplexity").is_none(), "{record}");
    }
    // The Dis-AE writes lowercased text; the outputs take back the item's casing where they
    // copy it ("The … Day 3 …").
    let cased = root.join("cased.csv");
    let mut csv = String::from("text,label\n");
    for line in toy_sentiment_csv().lines().skip(1).step_by(5) {
        csv.push_str(&format!("T{}\n", line[1..].replace(" day ", " Day ")));
    }
    std::fs::write(&cased, &csv).unwrap();
    success(&mut generate_from(
        &cased,
        "cased.jsonl",
        &["--max-perplexity", "0"],
    ));
    let cased_made = records(&root.join("cased.jsonl"));
    assert!(!cased_made.is_empty(), "{csv}");
    for record in &cased_made {
        let edited = record["edited"].as_str().unwrap();
        assert!(edited.starts_with("The "), "{record}");
        assert!(!edited.contains(" day "), "{record}");
    }
    assert!(
        cased_made
            .iter()
            .any(|r| r["edited"].as_str().unwrap().contains(" Day ")),
        "{cased_made:?}"
    );

    let evaluated = success(
        flipside()
            .args(["eval", "cf", "--no-ppl"])
            .arg(root.join("label.jsonl")),
    );
    assert!(
        evaluated
            .lines()
            .any(|line| line.starts_with("label.jsonl") && line.contains(&made.len().to_string())),
        "{evaluated}"
    );

    // The fluency filter: past a perplexity of 1, only outputs as fluent as their source pass
    // (and then meet the flip check); a lenient threshold keeps the perplexity in the record.
    // Sentiment parents are the target label's texts.
    success(&mut generate(
        "strict.jsonl",
        &[
            "--max-perplexity",
            "1.01",
            "--limit",
            "3",
            "--max-attempts",
            "1",
        ],
    ));
    let failures = std::fs::read_to_string(root.join("strict.jsonl.failures.jsonl")).unwrap();
    let passed = records(&root.join("strict.jsonl")).len();
    assert_eq!(failures.lines().count() + passed, 3, "{failures}");
    let disfluent = "under smollm2-135m is above 1.01 and the source's";
    assert!(
        failures.lines().any(|line| line.contains(disfluent))
            && failures
                .lines()
                .all(|line| line.contains(disfluent) || line.contains("did not flip")),
        "{failures}"
    );

    success(&mut generate(
        "parents.jsonl",
        &[
            "--max-perplexity",
            "1e9",
            "--sentiment",
            "parent",
            "--limit",
            "8",
        ],
    ));
    let toy = toy_sentiment_csv();
    let parented = records(&root.join("parents.jsonl"));
    assert!(!parented.is_empty());
    for record in &parented {
        let provenance = &record["provenance"];
        assert!(provenance["perplexity"].as_f64().unwrap() > 1.0, "{record}");
        let parent = provenance["sentiment_parent"].as_str().unwrap();
        let line = format!("{parent},{}\n", record["target"].as_str().unwrap());
        assert!(
            toy.contains(&line),
            "{parent:?} is not a {} text",
            record["target"]
        );
    }

    // A run without a Dis-AE says how to make one.
    let missing = failure(
        flipside()
            .args(["generate", "--method", "lass", "--data"])
            .arg(&data)
            .arg("--classifier")
            .arg(&classifier)
            .arg("--dis-ae")
            .arg(root.join("nowhere")),
    );
    assert!(missing.contains("nowhere"), "{missing}");
    let nothing = failure(flipside().args(["lass", "train", "--data", "none"]));
    assert!(nothing.contains("nothing to train on"), "{nothing}");
}
