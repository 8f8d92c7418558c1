//! `flipside experiment`

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};

use super::data::ReadArgs;
use crate::compute::DeviceChoice;
use crate::experiment::config::{
    ConditionConfig, DataConfig, ExperimentConfig, ModelKind, resolve_path, resolve_spec,
};
use crate::experiment::report::markdown;
use crate::experiment::{RunOptions, run_experiment};
use crate::home::Home;

/// Train classifiers with and without counterfactuals and test them in and out of domain.
///
/// Give an experiment file (TOML; see experiments/ in the repository), flags, or both (flags
/// override the file). Each condition × seed is a cached unit: run the same command again to
/// resume; finished units are never retrained.
///
/// Example, quick (bag of words):
///   flipside experiment --model bow --base imdb:train --limit 400 \
///     --augment core=runs/core.jsonl --in-domain-control core \
///     --test imdb:test --test rotten-tomatoes
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ExperimentArgs {
    /// The experiment file (TOML)
    pub config: Option<PathBuf>,
    /// Results directory [default: HOME/experiments/FILE-MODEL, e.g. rt-sentences-fine-tune]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The model every unit trains [default: the file's, else fine-tune]
    #[arg(long, value_enum)]
    pub model: Option<ModelKind>,
    /// Training seeds, e.g. --seeds 1,2,3 [default: the file's, else 1,2,3]
    #[arg(long, value_delimiter = ',', value_name = "S,S,…")]
    pub seeds: Option<Vec<u64>>,
    /// Base training set (replaces the file's)
    #[arg(long, value_name = "DATASET")]
    pub base: Option<String>,
    /// A seeded, label-stratified subset of the base set of this size
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Add a condition: NAME=FILE (a `generate` output), repeatable; without a file, the
    /// conditions are a baseline and these
    #[arg(long, value_name = "NAME=FILE", value_parser = named_file)]
    pub augment: Vec<(String, PathBuf)>,
    /// Only add the records the classifier judged flipped (for --augment conditions)
    #[arg(long)]
    pub only_flipped: bool,
    /// Add the size-matched in-domain control of the named --augment condition
    #[arg(long, value_name = "NAME")]
    pub in_domain_control: Option<String>,
    /// Test set (repeatable; replaces the file's), e.g. --test imdb:test --test yelp=reviews.csv
    /// (NAME=DATASET names it in tables; a file is otherwise named by its stem)
    #[arg(long, value_name = "DATASET")]
    pub test: Vec<String>,
    /// Train at most this many units now; running the same command again continues
    #[arg(long, value_name = "N")]
    pub stop_after_units: Option<usize>,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
    /// How to read the files given by --base and --test (an experiment file says it per set)
    #[command(flatten)]
    pub read: ReadArgs,
}

fn named_file(value: &str) -> Result<(String, PathBuf), String> {
    match value.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE, got {value:?}")),
    }
}

pub fn run(home: &Home, args: ExperimentArgs) -> Result<()> {
    let config = config(home, &args)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(home, &args, &config));
    let options = RunOptions {
        out: out.clone(),
        device: args.device,
        stop_after_units: args.stop_after_units,
    };
    let outcome = run_experiment(home, config, &options)?;
    eprintln!(
        "{} units trained now, {} finished before{}",
        outcome.trained,
        outcome.cached,
        if outcome.remaining > 0 {
            format!(
                "; {} left: run the same command again to continue",
                outcome.remaining
            )
        } else {
            String::new()
        }
    );
    if let Some(result) = outcome.result {
        println!("{}", markdown(&result));
        println!(
            "Differences: {}.\nResults: {} (results.json, summary.csv, seeds.csv, accuracy.svg)",
            result.significance_test,
            out.display()
        );
    }
    Ok(())
}

/// HOME/experiments/NAME-MODEL: NAME is the experiment file's name (else the experiment's
/// title), MODEL the model kind, so that a quick `--model bow` run of a file keeps the file's
/// own results.
fn default_out(home: &Home, args: &ExperimentArgs, config: &ExperimentConfig) -> PathBuf {
    let name = match &args.config {
        Some(file) => file.file_stem().map_or_else(
            || config.name.clone(),
            |stem| stem.to_string_lossy().into_owned(),
        ),
        None => config.name.clone(),
    };
    let kind = config
        .model
        .kind
        .to_possible_value()
        .expect("model kinds have names");
    home.root()
        .join("experiments")
        .join(format!("{}-{}", slug(&name), kind.get_name()))
}

/// Lower-case letters and digits, other runs of characters as one `-`.
fn slug(name: &str) -> String {
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The file's configuration with the flags applied, or one made from the flags alone.
fn config(home: &Home, args: &ExperimentArgs) -> Result<ExperimentConfig> {
    let cwd = std::env::current_dir()?;
    let mut config = match &args.config {
        Some(path) => ExperimentConfig::read(path, home)?,
        None => {
            if args.base.is_none() || args.test.is_empty() {
                bail!("give an experiment file, or at least --base and --test");
            }
            ExperimentConfig {
                name: "experiment".into(),
                seeds: vec![1, 2, 3],
                model: Default::default(),
                base: DataConfig::new(""),
                conditions: vec![ConditionConfig::baseline()],
                baseline: None,
                tests: Vec::new(),
                bootstrap_replicates: 10_000,
            }
        }
    };
    if let Some(model) = args.model {
        config.model.kind = model;
    }
    if let Some(seeds) = &args.seeds {
        config.seeds = seeds.clone();
    }
    if let Some(base) = &args.base {
        config.base = data_config(&resolve_spec(base, &cwd, home), &args.read);
    }
    if args.limit.is_some() {
        config.base.limit = args.limit;
    }
    for (name, file) in &args.augment {
        config.conditions.push(ConditionConfig {
            name: name.clone(),
            augment: vec![resolve_path(&file.display().to_string(), &cwd, home)],
            only_flipped: args.only_flipped,
            ..ConditionConfig::baseline()
        });
    }
    if let Some(like) = &args.in_domain_control {
        config.conditions.push(ConditionConfig {
            name: format!("in-domain control ({like})"),
            in_domain_like: Some(like.clone()),
            ..ConditionConfig::baseline()
        });
    }
    if !args.test.is_empty() {
        config.tests = args
            .test
            .iter()
            .map(|t| match t.split_once('=') {
                Some((name, spec)) if !name.is_empty() && !name.contains('/') => DataConfig {
                    name: Some(name.to_string()),
                    ..data_config(&resolve_spec(spec, &cwd, home), &args.read)
                },
                _ => data_config(&resolve_spec(t, &cwd, home), &args.read),
            })
            .collect();
    }
    Ok(config)
}

/// A dataset named by a flag, read with the reading flags.
fn data_config(dataset: &str, read: &ReadArgs) -> DataConfig {
    DataConfig {
        format: read.format,
        text_column: read.text_col.clone(),
        label_column: read.label_col.clone(),
        id_column: read.id_col.clone(),
        pair_columns: read
            .pair_cols
            .as_ref()
            .and_then(|p| Some((p.first()?.clone(), p.get(1)?.clone()))),
        labels: read.labels.clone(),
        split_seed: read.split_seed,
        ..DataConfig::new(dataset)
    }
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn titles_become_plain_directory_names() {
        assert_eq!(
            slug("CORE counterfactuals, IMDb → Rotten Tomatoes"),
            "core-counterfactuals-imdb-rotten-tomatoes"
        );
        assert_eq!(slug("core-imdb"), "core-imdb");
    }
}
