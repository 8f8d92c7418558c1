//! First-run preparation shared by `quickstart` and `serve`: fetch assets, build and index a
//! corpus, train the default classifier. Each step is skipped when its result is there.

use std::path::PathBuf;

use anyhow::Result;

use crate::assets::{Clients, FetchOutcome};
use crate::compute::DeviceChoice;
use crate::data::{BUILTIN_SPLITS, DatasetSpec, ReadOptions};
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, resolve_model_dir};
use crate::retrieval::corpus::{
    Corpus, SentenceFilter, build_corpus, corpus_dir, dataset_documents,
};
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::{BuildOptions, build_index, encoded_in_int8, index_dir};
use crate::training::classifier::{TrainConfig, TrainRun, train_classifier};
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

/// Builds the corpus `name` from built-in `sources` and its MiniLM index, unless they exist;
/// returns the corpus directory.
pub fn corpus_with_index(home: &Home, name: &str, sources: &[&str]) -> Result<PathBuf> {
    let dir = corpus_dir(home, name);
    let sources: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    let corpus = build_corpus(&dir, &sources, SentenceFilter::default(), |source| {
        let dataset = source
            .parse::<DatasetSpec>()?
            .load(home, &ReadOptions::default(), BUILTIN_SPLITS)?
            .dataset;
        dataset_documents(&dataset, source)
    })?;
    index(home, &corpus)?;
    Ok(dir)
}

/// The MiniLM index of `corpus`, built (or finished) now if needed.
fn index(home: &Home, corpus: &Corpus) -> Result<()> {
    let encoders = RetrieverEncoders::resolve(home, DEFAULT_ENCODER)?;
    let dir = index_dir(corpus.dir(), DEFAULT_ENCODER);
    let options = BuildOptions {
        int8: encoded_in_int8(&dir),
        ..BuildOptions::default()
    };
    with_backend!(
        DeviceChoice::Cpu,
        build_index(corpus, &encoders, &dir, &options)
    )?;
    Ok(())
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
        .load(home, &ReadOptions::default(), BUILTIN_SPLITS)?
        .dataset
        .limited(Some(train_size), config.seed);
    println!(
        "   training {name}: {DEFAULT_ENCODER} on {} IMDb reviews, {} epochs",
        train.len(),
        config.epochs
    );
    let encoder_dir = resolve_model_dir(home, DEFAULT_ENCODER)?;
    let run = TrainRun {
        train: &train,
        encoder_dir: &encoder_dir,
        out: &out,
        config,
        pause_after: None,
    };
    with_backend!(DeviceChoice::Cpu, train_classifier(&run))?;
    Ok(out)
}
