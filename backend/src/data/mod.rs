//! Datasets: built-ins, file readers, and `NAME[:SPLIT]` specifications.

mod builtin;
mod readers;
pub mod tables;

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Result, bail};
use flipside_shared::data::Dataset;

pub use builtin::Builtin;
pub use readers::{BadRow, Columns, Format, ReadOptions, ReadReport, UNLABELLED, read_file};

use crate::home::Home;

/// The seed and fractions with which built-in datasets are split: fixed, so that `imdb:test`
/// is the same 2,500 reviews for every user and run.
pub const BUILTIN_SPLITS: SplitConfig = SplitConfig {
    dev: 0.1,
    test: 0.1,
    seed: 20_260_101,
};

/// How a dataset is divided into train/dev/test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitConfig {
    pub dev: f64,
    pub test: f64,
    pub seed: u64,
}

/// A part of a split dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Dev,
    Test,
}

/// Where a dataset comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Builtin(Builtin),
    /// A file, or a directory of Parquet or Arrow files.
    File(PathBuf),
}

/// `imdb`, `imdb:test`, `reviews.csv`, `reviews.csv:dev`, …
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetSpec {
    pub source: Source,
    pub split: Option<Split>,
}

impl FromStr for DatasetSpec {
    type Err = anyhow::Error;

    fn from_str(spec: &str) -> Result<Self> {
        let (name, split) = match spec.rsplit_once(':') {
            Some((name, part)) if !std::path::Path::new(spec).exists() => {
                let split = match part {
                    "train" => Split::Train,
                    "dev" => Split::Dev,
                    "test" => Split::Test,
                    _ => bail!("unknown split {part:?} in {spec:?}: use :train, :dev or :test"),
                };
                (name, Some(split))
            }
            _ => (spec, None),
        };
        let source = if let Some(builtin) = Builtin::parse(name) {
            Source::Builtin(builtin)
        } else if std::path::Path::new(name).exists() {
            Source::File(name.into())
        } else {
            let builtins: Vec<_> = Builtin::ALL.iter().map(|b| b.name()).collect();
            bail!(
                "{name:?} is neither a file (or a directory of Parquet or Arrow files) nor a \
                 built-in dataset ({})",
                builtins.join(", ")
            )
        };
        Ok(DatasetSpec { source, split })
    }
}

impl DatasetSpec {
    /// Loads the dataset (and its split, if one is named). Built-ins ignore `options` and are
    /// split with [`BUILTIN_SPLITS`]; files use `splits`.
    pub fn load(
        &self,
        home: &Home,
        options: &ReadOptions,
        splits: SplitConfig,
    ) -> Result<ReadReport> {
        let (report, splits) = match &self.source {
            Source::Builtin(builtin) => (
                ReadReport {
                    dataset: builtin.load(home)?,
                    skipped: Vec::new(),
                },
                BUILTIN_SPLITS,
            ),
            Source::File(path) => (read_file(path, options)?, splits),
        };
        let dataset = match self.split {
            None => report.dataset,
            Some(split) => pick(report.dataset, split, splits),
        };
        Ok(ReadReport {
            dataset,
            skipped: report.skipped,
        })
    }
}

fn pick(dataset: Dataset, split: Split, config: SplitConfig) -> Dataset {
    let splits = dataset.split(config.dev, config.test, config.seed);
    match split {
        Split::Train => splits.train,
        Split::Dev => splits.dev,
        Split::Test => splits.test,
    }
}
