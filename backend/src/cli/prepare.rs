//! First-run preparation shared by `quickstart` and `serve`: fetch assets, build and index a
//! corpus, train the default classifier. Each step is skipped when its result is there.

use std::path::PathBuf;

use anyhow::Result;

use super::corpus::CorpusArg;
use crate::assets::{Clients, FetchOutcome};
use crate::data::{DatasetSpec, ReadOptions};
use crate::home::Home;
use crate::models::{DEFAULT_ENCODER, resolve_model_dir};
use crate::train::{TrainConfig, TrainJob, train_classifier};
use crate::with_backend;

/// The small retrieval corpus: Rotten Tomatoes (8,942 sentences, indexed in under a minute).
pub const SMALL_CORPUS: &str = "rt";

/// The training settings of the default classifiers: about three minutes for 400 reviews on
/// 2 CPU cores, and better than bag of words.
pub fn default_train_config() -> TrainConfig {
    TrainConfig {
        epochs: 3,
        lr: 1e-4,
        max_len: 128,
        ..TrainConfig::default()
    }
}

/// Fetches the named assets, printing a line for each.
pub fn fetch_assets(home: &Home, names: &[&str]) -> Result<()> {
    let cache = home.asset_cache();
    let clients = Clients::from_env();
    for name in names {
        let asset = home.manifest().get(name)?;
        let what = match cache.fetch(asset, &clients, false)? {
            FetchOutcome::AlreadyPresent => "present".to_string(),
            FetchOutcome::Fetched { bytes } => format!("fetched {:.1} MB", bytes as f64 / 1e6),
        };
        println!("   {name:<20} {what}");
    }
    Ok(())
}

/// Builds the corpus `name` from `sources` and its MiniLM index, unless they exist.
pub fn corpus_with_index(home: &Home, name: &str, sources: &[&str]) -> Result<CorpusArg> {
    let corpus = CorpusArg {
        corpus: name.to_string(),
    };
    let mut corpus_args: super::corpus::BuildArgs = super::defaults();
    corpus_args.sources = sources.iter().map(|s| s.to_string()).collect();
    corpus_args.corpus = corpus.clone();
    super::corpus::build(home, corpus_args)?;
    let mut index_args: super::index::BuildArgs = super::defaults();
    index_args.index.corpus = corpus.clone();
    super::index::build(home, index_args)?;
    Ok(corpus)
}

/// The classifier `imdb-N` (MiniLM fine-tuned on N IMDb training reviews), trained now if it
/// is not in the home yet.
pub fn imdb_classifier(home: &Home, train_size: usize) -> Result<PathBuf> {
    let name = format!("imdb-{train_size}");
    let out = home.models().join(&name);
    // A finished training saves its weights last (an interrupted one resumes).
    if out.join("model.safetensors").exists() {
        return Ok(out);
    }
    let config = default_train_config();
    let spec: DatasetSpec = "imdb:train".parse()?;
    let train = spec
        .load(home, &ReadOptions::default(), crate::data::BUILTIN_SPLITS)?
        .dataset
        .limited(Some(train_size), config.seed);
    println!(
        "   training {name}: {DEFAULT_ENCODER} on {} IMDb reviews, {} epochs",
        train.len(),
        config.epochs
    );
    let encoder_dir = resolve_model_dir(home, DEFAULT_ENCODER)?;
    let job = TrainJob {
        train: &train,
        encoder_dir: &encoder_dir,
        out: &out,
        config,
        pause_after: None,
    };
    with_backend!(crate::compute::DeviceChoice::Cpu, train_classifier(&job))?;
    Ok(out)
}
