//! End-to-end tests of corpus building, indexing and search with the real MiniLM encoder.

use std::path::Path;
use std::process::Command;

use crate::common::{asset, failure, flipside, success};
use flipside_backend::retrieval::index::{encoded_in_int8, index_dir};
use flipside_shared::ops::int8::Kernel;

const REVIEWS: &str = "\
The acting was wooden and the plot made no sense. I walked out after an hour.
What a delight this film is! The cast is superb and the music is lovely.
The acting was superb from start to finish. I would watch it again tomorrow.
A dull, lifeless script. Even the explosions were boring to watch.
The photography is gorgeous. Every frame looks like a painting.
The dialogue was painfully stiff and the actors seemed bored.
Mr. Jones gives the performance of his career. It moved me to tears.
";

/// `flipside COMMAND SUBCOMMAND --corpus CORPUS REST…` (so that a trailing option of `args`
/// can take its value from a following `.arg()`).
fn in_corpus(corpus: &Path, args: &[&str]) -> Command {
    let mut command = flipside();
    command
        .args(&args[..2])
        .arg("--corpus")
        .arg(corpus)
        .args(&args[2..]);
    command
}

/// A corpus of [`REVIEWS`] in `dir`, indexed with MiniLM.
fn indexed_corpus(dir: &Path) -> std::path::PathBuf {
    let reviews = dir.join("reviews.txt");
    std::fs::write(&reviews, REVIEWS).unwrap();
    let corpus = dir.join("corpus");
    success(in_corpus(&corpus, &["corpus", "build"]).arg(&reviews));
    success(&mut in_corpus(&corpus, &["index", "build"]));
    corpus
}

#[test]
fn a_corpus_is_built_indexed_resumed_searched_and_grown() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = dir.path().join("reviews.txt");
    std::fs::write(&reviews, REVIEWS).unwrap();
    let corpus = dir.path().join("corpus");

    let info = success(in_corpus(&corpus, &["corpus", "build"]).arg(&reviews));
    assert!(info.contains("total") && info.contains(" 13"), "{info}");
    // Building again with the same source adds nothing.
    let again = success(in_corpus(&corpus, &["corpus", "build"]).arg(&reviews));
    assert_eq!(again, info);

    // Encode 5 sentences, stop, then finish: the index covers all 13.
    let paused = flipside()
        .args(["index", "build", "--pause-after", "5", "--corpus"])
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(paused.status.success());
    assert!(String::from_utf8_lossy(&paused.stderr).contains("paused after 5 of 13"));
    success(&mut in_corpus(&corpus, &["index", "build"]));
    let again = in_corpus(&corpus, &["index", "build"]).output().unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("is up to date"));

    // `--int8` encodes again with the CPU's int8 kernel and says which in index.json (where
    // `Kernel::best` gives none, e.g. AVX-512 without VNNI, the f32 index stays).
    let int8 = in_corpus(&corpus, &["index", "build", "--int8"])
        .output()
        .unwrap();
    assert!(int8.status.success());
    let stderr = String::from_utf8_lossy(&int8.stderr);
    let kernel = Kernel::best();
    assert_eq!(
        stderr.contains("is up to date"),
        kernel.is_none(),
        "{stderr}"
    );
    let index = index_dir(&corpus, "minilm");
    let meta = std::fs::read(index.join("index.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["int8"], serde_json::json!(kernel), "{stderr}");
    assert_eq!(encoded_in_int8(&index), kernel.is_some());
    if kernel.is_some() {
        // Back to f32, then int8 paused after 5 rows: the f32 index must not stay looking up to
        // date over rows that are now 5 int8 ones.
        let f32s = in_corpus(&corpus, &["index", "build"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&f32s.stderr).contains("is up to date"));
        let paused = in_corpus(&corpus, &["index", "build", "--int8", "--pause-after", "5"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&paused.stderr).contains("paused after 5 of 13"));
        let search = in_corpus(&corpus, &["index", "search", "a film"])
            .output()
            .unwrap();
        assert!(!search.status.success());
        let again = in_corpus(&corpus, &["index", "build"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert!(
            again.status.success() && !stderr.contains("is up to date"),
            "{stderr}"
        );
        assert!(!encoded_in_int8(&index));
    }

    let out = success(&mut in_corpus(
        &corpus,
        &[
            "index",
            "search",
            "the acting was wooden",
            "-k",
            "3",
            "--json",
        ],
    ));
    let record: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let results = record["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(
        results[0]["text"],
        "The acting was wooden and the plot made no sense."
    );
    assert_eq!(results[0]["doc"], "line-1");
    assert!(results[0]["score"].as_f64().unwrap() > results[2]["score"].as_f64().unwrap());

    // A second source appends new sentence ids; the old index warns until it is rebuilt.
    let more = dir.path().join("more.csv");
    std::fs::write(
        &more,
        "text\n\"The soundtrack is haunting and beautiful.\"\n",
    )
    .unwrap();
    success(in_corpus(&corpus, &["corpus", "build"]).arg(&more));
    let stale = flipside()
        .args(["index", "search", "lovely music", "--corpus"])
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("1 sentences the index does not cover")
    );
    success(&mut in_corpus(&corpus, &["index", "build"]));
    let out = success(&mut in_corpus(
        &corpus,
        &["index", "search", "a haunting soundtrack", "-k", "1"],
    ));
    assert!(
        out.contains("The soundtrack is haunting and beautiful."),
        "{out}"
    );
}

/// The ids of `index search … -k 5 --json`'s results for `query`.
fn top_ids(corpus: &Path, query: &str, extra: &[&str]) -> Vec<u64> {
    let mut command = in_corpus(corpus, &["index", "search", query, "-k", "5", "--json"]);
    let out = success(command.args(extra));
    let record: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    record["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn an_index_in_shards_is_built_resumed_and_searched_like_one_graph() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = indexed_corpus(dir.path());
    let index = index_dir(&corpus, "minilm");
    let whole = top_ids(&corpus, "the acting was wooden", &[]);
    assert!(!index.join("graph-1").exists());

    // 13 sentences in shards of 4: four graphs over the rows already encoded.
    let build = |extra: &[&str]| {
        let output = in_corpus(&corpus, &["index", "build"])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr
    };
    let stderr = build(&["--shard-rows", "4"]);
    assert!(stderr.contains("4 shards of up to 4 rows"), "{stderr}");
    let record = |shard: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(index.join(shard).join("shard.json")).unwrap())
            .unwrap()
    };
    assert_eq!(record("graph")["rows"], 4);
    assert_eq!(record("graph-3")["rows"], 1);
    // Each shard of at most 4 rows is searched exhaustively, as the whole graph of 13 was.
    assert_eq!(top_ids(&corpus, "the acting was wooden", &[]), whole);
    assert!(build(&["--shard-rows", "4"]).contains("is up to date"));

    // A build killed after its second shard: the next one builds the last two again only.
    let first = record("graph-1");
    std::fs::remove_dir_all(index.join("graph-2")).unwrap();
    std::fs::remove_file(index.join("graph-3").join("shard.json")).unwrap();
    std::fs::remove_file(index.join("index.json")).unwrap();
    let failed = in_corpus(&corpus, &["index", "search", "a film"])
        .output()
        .unwrap();
    assert!(!failed.status.success());
    build(&["--shard-rows", "4"]);
    assert_eq!(record("graph-1"), first);
    assert_eq!(record("graph-2")["rows"], 4);
    assert_eq!(record("graph-3")["rows"], 1);
    assert_eq!(top_ids(&corpus, "the acting was wooden", &[]), whole);

    // Shards of 5 rows: each shard built again over its new rows (the record says which).
    build(&["--shard-rows", "5"]);
    assert_eq!(record("graph-1")["first"], 5);
    assert_eq!(record("graph-2")["rows"], 3);
    assert!(!index.join("graph-3").exists());
    assert_eq!(top_ids(&corpus, "the acting was wooden", &[]), whole);

    // Back to one graph: the other shards' directories go.
    assert!(!build(&[]).contains("is up to date"));
    assert!(!index.join("graph-1").exists() && !index.join("graph-3").exists());
    assert_eq!(record("graph")["rows"], 13);
    assert_eq!(top_ids(&corpus, "the acting was wooden", &[]), whole);
}

#[test]
fn searching_with_another_encoder_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = indexed_corpus(dir.path());

    // A copy of MiniLM named like it, with one weight changed.
    let other = dir.path().join("other").join("minilm");
    std::fs::create_dir_all(&other).unwrap();
    for file in [
        "config.json",
        "tokenizer.json",
        "sentence_bert_config.json",
        "model.safetensors",
    ] {
        std::fs::copy(asset("minilm").join(file), other.join(file)).unwrap();
    }
    let weights = other.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&weights, bytes).unwrap();

    let error = failure(
        in_corpus(&corpus, &["index", "search", "great film"])
            .arg("--encoder")
            .arg(&other),
    );
    assert!(
        error.contains("was built with encoder \"minilm\"") && error.contains("not comparable"),
        "{error}"
    );
    let error = failure(&mut in_corpus(&corpus, &["index", "search"]));
    assert!(error.contains("no query"), "{error}");
}

#[test]
fn a_trained_retriever_indexes_searches_and_is_evaluated_against_minilm() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = indexed_corpus(dir.path());

    let pairs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/seed_pairs.jsonl");
    let out = dir.path().join("cf-dpr");
    // Paraphrases are mined from the test's corpus (by default they come from the home's).
    let train = |extra: &[&str]| {
        let mut command = in_corpus(&corpus, &["retriever", "train", "--pairs"]);
        command
            .arg(&pairs)
            .arg("--out")
            .arg(&out)
            .args(["--epochs", "2", "--batch-size", "3", "--validation", "0.3"])
            .args(extra);
        command
    };
    success(&mut train(&[]));
    for file in [
        "retriever.json",
        "training.json",
        "query/model.safetensors",
        "document/config.json",
    ] {
        assert!(out.join(file).is_file(), "{file} is missing");
    }
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("training.json")).unwrap()).unwrap();
    let losses = record["losses"].as_array().unwrap();
    assert_eq!(
        losses.len(),
        record["total_steps"].as_u64().unwrap() as usize
    );
    assert!(losses.iter().all(|l| l.as_f64().unwrap().is_finite()));
    // The same job again reuses the model; other hyper-parameters refuse to overwrite it.
    let again = train(&[]).output().unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds this model"));
    let error = failure(&mut train(&["--lr", "1e-3"]));
    assert!(error.contains("different training run"), "{error}");
    // Its negatives are the rest of a shuffled batch: no batches by length.
    let error = failure(&mut train(&["--batch-order", "by-length"]));
    assert!(error.contains("CF-DPR's negatives"), "{error}");

    // The trained document encoder gets its own index; the MiniLM index stays valid.
    success(in_corpus(&corpus, &["index", "build", "--encoder"]).arg(&out));
    let found = success(
        in_corpus(
            &corpus,
            &[
                "index",
                "search",
                "the music is awful",
                "-k",
                "2",
                "--encoder",
            ],
        )
        .arg(&out),
    );
    assert_eq!(
        found.lines().filter(|l| l.contains("reviews.txt")).count(),
        2,
        "{found}"
    );

    let table = success(
        in_corpus(
            &corpus,
            &[
                "retriever",
                "eval",
                "--random",
                "3",
                "--hard",
                "3",
                "--validation",
                "0.3",
                "--retrievers",
            ],
        )
        .arg(format!("minilm,{}", out.display()))
        .arg("--pairs")
        .arg(&pairs),
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(rows[1].starts_with("| minilm |"), "{table}");
}

/// Sentences that are neither a fixture hypothesis nor a counterfactual.
const NLI_DISTRACTORS: &str = "\
A cat is sleeping on a warm windowsill.
The train arrives at the station late at night.
Two women are drinking coffee in a cafe.
A man is fixing the roof of his house.
The students are listening to a long lecture.
";

/// The top-1 hypothesis for `premise` and `hypothesis` under `encoder`.
fn top_hypothesis(corpus: &Path, encoder: &Path, premise: &str, hypothesis: &str) -> String {
    let found = success(
        in_corpus(
            corpus,
            &["index", "search", hypothesis, "-k", "1", "--json"],
        )
        .arg("--premise")
        .arg(premise)
        .arg("--encoder")
        .arg(encoder),
    );
    let record: serde_json::Value = serde_json::from_str(found.trim()).unwrap();
    assert_eq!(record["premise"], premise);
    record["results"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn nli_queries_read_the_premise_and_a_reranker_reorders_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nli_pairs.jsonl");
    let pairs: Vec<serde_json::Value> = std::fs::read_to_string(&fixture)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The corpus holds every hypothesis and counterfactual (candidates are hypotheses, CORE
    // §4.2) and a few distractors.
    let mut hypotheses = String::from(NLI_DISTRACTORS);
    for pair in &pairs {
        for field in ["text", "counterfactual"] {
            hypotheses += pair[field].as_str().unwrap();
            hypotheses += "\n";
        }
    }
    let source = dir.path().join("hypotheses.txt");
    std::fs::write(&source, hypotheses).unwrap();
    let corpus = dir.path().join("corpus");
    success(in_corpus(&corpus, &["corpus", "build"]).arg(&source));
    success(&mut in_corpus(&corpus, &["index", "build"]));

    // Train CF-DPR and the re-ranker on all pairs (the evaluation below is on the same pairs:
    // this checks the plumbing of premise–hypothesis queries, not generalisation).
    let cf_dpr = dir.path().join("cf-dpr");
    let reranker = dir.path().join("reranker");
    let trainings = [
        ("retriever", &cf_dpr, "5", "3e-4"),
        ("reranker", &reranker, "20", "1e-4"),
    ];
    for (command, out, epochs, lr) in trainings {
        success(
            flipside()
                .args([command, "train", "--pairs"])
                .arg(&fixture)
                .args(["--validation", "0", "--paraphrases", "none"])
                .args(["--epochs", epochs, "--batch-size", "4", "--lr", lr])
                .arg("--out")
                .arg(out),
        );
    }
    success(in_corpus(&corpus, &["index", "build", "--encoder"]).arg(&cf_dpr));

    // Untrained MiniLM finds the hypothesis itself; CF-DPR finds its counterfactual.
    let (premise, text, counterfactual) = (
        pairs[0]["premise"].as_str().unwrap(),
        pairs[0]["text"].as_str().unwrap(),
        pairs[0]["counterfactual"].as_str().unwrap(),
    );
    let minilm = Path::new("minilm");
    assert_eq!(top_hypothesis(&corpus, minilm, premise, text), text);
    assert_eq!(
        top_hypothesis(&corpus, &cf_dpr, premise, text),
        counterfactual
    );

    // Re-ranking all of MiniLM's results (whose top 5 miss the counterfactual) with the
    // cross-encoder puts the counterfactual first.
    let reranked = success(
        in_corpus(
            &corpus,
            &["index", "search", text, "-k", "1", "--rerank", "40"],
        )
        .arg("--premise")
        .arg(premise)
        .arg("--reranker")
        .arg(&reranker),
    );
    assert!(reranked.contains(counterfactual), "{reranked}");
    assert!(reranked.contains("re-ranked"), "{reranked}");

    let table = success(
        in_corpus(
            &corpus,
            &[
                "retriever",
                "eval",
                "--validation",
                "1",
                "--random",
                "5",
                "--hard",
                "5",
                "--rerank",
                "5",
                "--retrievers",
            ],
        )
        .arg(format!("minilm,{}", cf_dpr.display()))
        .arg("--pairs")
        .arg(&fixture)
        .arg("--reranker")
        .arg(&reranker),
    );
    let top1: Vec<f64> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| retriever"))
        .map(|l| l.split('|').nth(2).unwrap().trim().parse().unwrap())
        .collect();
    assert_eq!(top1.len(), 4, "{table}");
    assert!(top1[1] > top1[0], "the re-ranker improves MiniLM: {table}");
    assert!(top1[2] >= 0.75, "CF-DPR on its training pairs: {table}");
    assert!(
        top1[3] >= 0.75,
        "CF-DPR + re-ranker on its training pairs: {table}"
    );
}
