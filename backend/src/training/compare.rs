//! The classifier experiment: fine-tuned encoder vs bag of words, in and out of domain.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use flipside_shared::data::Dataset;
use serde::Serialize;

use crate::compute::DeviceChoice;
use crate::data::{BUILTIN_SPLITS, DatasetSpec, ReadOptions};
use crate::home::Home;
use crate::model_dirs::{resolve_model_dir, write_atomic};
use crate::training::baseline::BowLogReg;
use crate::training::classifier::{
    Evaluation, TrainConfig, TrainRun, evaluate_dir, train_classifier,
};
use crate::with_backend;

/// The classifier comparison: sizes, encoder, output and training settings.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// IMDb training reviews (a label-stratified seeded subset of imdb:train).
    pub train_size: usize,
    /// IMDb test reviews to evaluate on (all when `None`).
    pub test_size: Option<usize>,
    /// Rotten Tomatoes sentences to evaluate on (all when `None`).
    pub ood_size: Option<usize>,
    pub encoder: String,
    /// Where the trained classifier goes [default: HOME/models/imdb-TRAIN_SIZE].
    pub out: Option<PathBuf>,
    pub device: DeviceChoice,
    pub config: TrainConfig,
}

/// One row of the comparison table.
#[derive(Debug, Serialize)]
pub struct CompareRow {
    pub model: String,
    pub train_examples: usize,
    pub in_domain: Evaluation,
    pub out_of_domain: Evaluation,
    pub train_seconds: f64,
}

/// Trains the MiniLM classifier and the bag-of-words baseline on the same IMDb subset and
/// evaluates both on IMDb test and Rotten Tomatoes; saves the rows as `compare.json` beside the model.
pub fn compare(home: &Home, args: &CompareConfig) -> Result<Vec<CompareRow>> {
    let seed = args.config.seed;
    let builtin = |spec: &str, limit: Option<usize>| -> Result<Dataset> {
        let spec: DatasetSpec = spec.parse()?;
        let dataset = spec
            .load(home, &ReadOptions::default(), BUILTIN_SPLITS)?
            .dataset;
        Ok(dataset.limited(limit, seed))
    };
    let train = builtin("imdb:train", Some(args.train_size))?;
    let test = builtin("imdb:test", args.test_size)?;
    let ood = builtin("rotten-tomatoes", args.ood_size)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| home.models().join(format!("imdb-{}", args.train_size)));

    tracing::info!("bag-of-words baseline on {} reviews", train.len());
    let started = Instant::now();
    let spinner = crate::progress::spinner("fitting the bag-of-words baseline");
    let bow = BowLogReg::fit(&train, seed);
    spinner.finish_and_clear();
    let bow_seconds = started.elapsed().as_secs_f64();
    let bow_eval = |dataset: &Dataset| {
        let started = Instant::now();
        Evaluation {
            dataset: dataset.name.clone(),
            examples: dataset.len(),
            accuracy: bow.accuracy(dataset),
            seconds: started.elapsed().as_secs_f64(),
        }
    };
    let mut rows = vec![CompareRow {
        model: format!(
            "bag-of-words logistic regression (uni+bigrams, L2 {})",
            bow.l2
        ),
        train_examples: train.len(),
        in_domain: bow_eval(&test),
        out_of_domain: bow_eval(&ood),
        train_seconds: bow_seconds,
    }];

    let encoder_dir = resolve_model_dir(home, &args.encoder)?;
    tracing::info!(
        "fine-tuning {} on {} reviews into {}",
        args.encoder,
        train.len(),
        out.display()
    );
    let run = TrainRun {
        train: &train,
        encoder_dir: &encoder_dir,
        out: &out,
        config: args.config.clone(),
        pause_after: None,
    };
    let outcome = with_backend!(args.device, train_classifier(&run))?;
    let in_domain = with_backend!(args.device, evaluate_dir(&out, &test, 32, false, None))?;
    let out_of_domain = with_backend!(args.device, evaluate_dir(&out, &ood, 32, false, None))?;
    rows.push(CompareRow {
        model: format!(
            "{} fine-tuned ({} epochs, max_len {})",
            args.encoder, args.config.epochs, args.config.max_len
        ),
        train_examples: train.len(),
        in_domain,
        out_of_domain,
        train_seconds: outcome.record.train_seconds,
    });

    let results = out.join("compare.json");
    write_atomic(&results, &serde_json::to_vec_pretty(&rows)?)?;
    tracing::info!("results saved to {}", results.display());
    Ok(rows)
}

/// Prints the rows as a Markdown table.
pub fn print_table(rows: &[CompareRow]) {
    println!();
    println!("| model | train | IMDb test acc (n) | Rotten Tomatoes acc (n) | train s | eval s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {:.4} ({}) | {:.4} ({}) | {:.0} | {:.0} |",
            row.model,
            row.train_examples,
            row.in_domain.accuracy,
            row.in_domain.examples,
            row.out_of_domain.accuracy,
            row.out_of_domain.examples,
            row.train_seconds,
            row.in_domain.seconds + row.out_of_domain.seconds
        );
    }
}
