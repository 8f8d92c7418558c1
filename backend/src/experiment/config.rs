//! The experiment file (TOML): the base training set, the conditions, the test sets, the seeds
//! and the model. Relative paths are read from the file's directory; `{home}` in a path is the
//! Flipside home.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::data::{Builtin, Columns, Format, ReadOptions};
use crate::home::Home;
use crate::model_dirs::DEFAULT_ENCODER;
use crate::training::classifier::TrainConfig;

/// A whole experiment: train one model per condition and seed, test each on every test set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    /// A title for tables and the figure.
    #[serde(default = "default_name")]
    pub name: String,
    /// Training seeds: every condition is trained once per seed (at least 3 for a test).
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    #[serde(default)]
    pub model: ModelConfig,
    /// The training set every condition starts from.
    pub base: DataConfig,
    /// The first is the baseline the others are compared with (unless `baseline` names one).
    pub conditions: Vec<ConditionConfig>,
    /// The condition the others are compared with [default: the first].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    pub tests: Vec<DataConfig>,
    /// Bootstrap replicates of the significance test.
    #[serde(default = "default_replicates")]
    pub bootstrap_replicates: usize,
}

fn default_name() -> String {
    "experiment".into()
}
fn default_seeds() -> Vec<u64> {
    vec![1, 2, 3]
}
fn default_replicates() -> usize {
    10_000
}

/// Which classifier each unit trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Bag-of-words logistic regression: seconds per unit, for quick runs.
    Bow,
    /// A fine-tuned encoder (MiniLM by default), as `flipside classifier train`.
    #[default]
    FineTune,
}

/// The model and its training hyper-parameters (those of `classifier train`, with its
/// defaults; each unit's seed comes from `seeds`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    pub kind: ModelKind,
    /// Starting encoder for `fine-tune`: an asset name, a model name or a directory.
    pub encoder: String,
    #[serde(flatten)]
    pub train: TrainConfig,
    /// Keys that are none of the above (refused by [`ModelConfig::check`]: a misspelt option
    /// would otherwise be ignored).
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, toml::Value>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            kind: ModelKind::default(),
            encoder: DEFAULT_ENCODER.into(),
            train: TrainConfig::default(),
            unknown: BTreeMap::new(),
        }
    }
}

impl ModelConfig {
    /// Refuses keys that are not options of the model.
    pub fn check(&self) -> Result<()> {
        if !self.unknown.is_empty() {
            let keys: Vec<&str> = self.unknown.keys().map(String::as_str).collect();
            bail!(
                "[model] has unknown keys {keys:?}: its keys are `kind`, `encoder` and \
                 `classifier train`'s options in snake_case (e.g. max_len, batch_order)"
            );
        }
        Ok(())
    }

    /// The training hyper-parameters of one seed's unit.
    pub fn train_config(&self, seed: u64) -> TrainConfig {
        TrainConfig {
            seed,
            ..self.train.clone()
        }
    }
}

/// A dataset: a built-in or a file (with its columns), optionally a seeded subset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// A name for tables [default: the dataset spec].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `imdb:train`, `rotten-tomatoes`, `reviews.csv`, `reviews.csv:test`, …
    pub dataset: String,
    /// A label-stratified subset of this many examples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Seed of the subset.
    #[serde(default)]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    #[serde(default = "default_text_column")]
    pub text_column: String,
    #[serde(default = "default_label_column")]
    pub label_column: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_column: Option<String>,
    /// Premise and hypothesis columns of text-pair data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_columns: Option<(String, String)>,
    /// Label names in id order (integer label cells are ids into this list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// Seed of the 80/10/10 split of a file (`FILE:train`, …).
    #[serde(default)]
    pub split_seed: u64,
    /// Base set only: keep just the items `generate` picked for this counterfactual file (those
    /// it edits, and those in its failure sidecar), so that the base set is what was edited,
    /// as in CORE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub originals_of: Option<PathBuf>,
    /// Base set only: each label's share of the `limit` examples, e.g. `{ positive = 0.85,
    /// negative = 0.15 }` — a skewed training set, as in LASS's debiasing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_shares: Option<BTreeMap<String, f64>>,
}

fn default_text_column() -> String {
    Columns::default().text
}
fn default_label_column() -> String {
    Columns::default().label
}

impl DataConfig {
    /// A built-in or file dataset with default columns.
    pub fn new(dataset: &str) -> Self {
        Self {
            name: None,
            dataset: dataset.into(),
            limit: None,
            seed: 0,
            format: None,
            text_column: default_text_column(),
            label_column: default_label_column(),
            id_column: None,
            pair_columns: None,
            labels: None,
            split_seed: 0,
            originals_of: None,
            label_shares: None,
        }
    }

    /// The name tables and figures use: the `name` given, else the dataset as
    /// [`short_dataset_name`] shortens it, with the subset's size.
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let dataset = short_dataset_name(&self.dataset);
            match self.limit {
                Some(n) => format!("{dataset} ({n})"),
                None => dataset,
            }
        })
    }

    /// How to read the file (built-ins ignore it).
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions {
            format: self.format,
            columns: Columns {
                text: self.text_column.clone(),
                label: self.label_column.clone(),
                pair: self.pair_columns.clone(),
                id: self.id_column.clone(),
            },
            labels: self.labels.clone(),
            ..ReadOptions::default()
        }
    }
}

/// One way of building the training set from the base set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    pub name: String,
    /// Counterfactual files from `flipside generate`: each record whose original is a base
    /// example is added with its target label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub augment: Vec<PathBuf>,
    /// Add only the records the classifier judged flipped.
    #[serde(default)]
    pub only_flipped: bool,
    /// The size-matched in-domain control: add as many fresh originals (base-set examples not
    /// in the base subset, no longer than its longest example) as the named condition adds
    /// counterfactuals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_domain_like: Option<String>,
    /// Where the in-domain control's fresh examples come from [default: the base dataset]: a
    /// dataset of the same labels, for when the base set is all of its dataset (CORE added
    /// 1.7k other movie reviews to all of IMDb's training set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_domain_from: Option<DataConfig>,
    /// Also add records whose original is not a base example: synthetic examples of any text,
    /// as LASS's debiasing adds negatives made from other positive reviews.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_original: bool,
    /// Add at most this many records of each file (the first, in file order): the same number
    /// for every generator compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_added: Option<usize>,
    /// Keep as many counterfactuals of each target label as there are of the rarest (a draw
    /// seeded by the base set's seed, after `max_added`), so that they do not shift the labels'
    /// shares: an editor that flips one direction more often than the other otherwise teaches
    /// that label.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balance_labels: bool,
}

impl ConditionConfig {
    /// The condition that trains on the base set alone.
    pub fn baseline() -> Self {
        Self {
            name: "baseline".into(),
            augment: Vec::new(),
            only_flipped: false,
            in_domain_like: None,
            in_domain_from: None,
            any_original: false,
            max_added: None,
            balance_labels: false,
        }
    }
}

impl ExperimentConfig {
    /// Reads an experiment file; its relative paths and `{home}` are resolved.
    pub fn read(path: &Path, home: &Home) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the experiment file {}", path.display()))?;
        let mut config: Self =
            toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
        let path = path.canonicalize()?;
        config.resolve_paths(path.parent().unwrap_or(Path::new("/")), home);
        Ok(config)
    }

    /// Makes file paths absolute (relative ones from `dir`) and replaces `{home}`.
    pub fn resolve_paths(&mut self, dir: &Path, home: &Home) {
        self.base.dataset = resolve_spec(&self.base.dataset, dir, home);
        if let Some(file) = &mut self.base.originals_of {
            *file = resolve_path(&file.display().to_string(), dir, home);
        }
        for test in &mut self.tests {
            test.dataset = resolve_spec(&test.dataset, dir, home);
        }
        for condition in &mut self.conditions {
            for file in &mut condition.augment {
                *file = resolve_path(&file.display().to_string(), dir, home);
            }
            if let Some(pool) = &mut condition.in_domain_from {
                pool.dataset = resolve_spec(&pool.dataset, dir, home);
            }
        }
    }

    /// Checks what can be checked without reading data.
    pub fn validate(&self) -> Result<()> {
        self.model.check()?;
        if self.seeds.is_empty() {
            bail!("no seeds: give at least one (three or more for a significance test)");
        }
        if self.seeds.iter().collect::<BTreeSet<_>>().len() != self.seeds.len() {
            bail!("the seeds {:?} repeat a value", self.seeds);
        }
        if self.conditions.is_empty() {
            bail!("no conditions: give at least the baseline");
        }
        if self.tests.is_empty() {
            bail!("no test sets");
        }
        let mut names = BTreeSet::new();
        for condition in &self.conditions {
            if !names.insert(condition.name.as_str()) {
                bail!("two conditions are named {:?}", condition.name);
            }
        }
        if let Some(shares) = &self.base.label_shares {
            if self.base.limit.is_none() {
                bail!("the base set's `label_shares` need a `limit`: the subset's size");
            }
            let total: f64 = shares.values().sum();
            if shares.values().any(|&share| !(0.0..=1.0).contains(&share))
                || (total - 1.0).abs() > 1e-6
            {
                bail!("the base set's `label_shares` {shares:?} must be in [0, 1] and sum to 1");
            }
        }
        let mut test_names = BTreeSet::new();
        for test in &self.tests {
            if test.label_shares.is_some() {
                bail!(
                    "`label_shares` skews the base set; the test set {} cannot use it",
                    test.display_name()
                );
            }
            if test.originals_of.is_some() {
                bail!(
                    "`originals_of` selects the base set; the test set {} cannot use it",
                    test.display_name()
                );
            }
            if !test_names.insert(test.display_name()) {
                bail!(
                    "two test sets are named {:?}: give one a `name`",
                    test.display_name()
                );
            }
        }
        for condition in &self.conditions {
            if condition.in_domain_from.is_some() && condition.in_domain_like.is_none() {
                bail!(
                    "condition {:?} says where in-domain examples come from (`in_domain_from`) \
                     but not which condition's size to match (`in_domain_like`)",
                    condition.name
                );
            }
            if let Some(like) = &condition.in_domain_like {
                if !condition.augment.is_empty() {
                    bail!(
                        "condition {:?} both augments and is an in-domain control; make them two \
                         conditions",
                        condition.name
                    );
                }
                if let Some(other) = self
                    .conditions
                    .iter()
                    .find(|c| c.name != condition.name && c.in_domain_like.as_ref() == Some(like))
                {
                    bail!(
                        "conditions {:?} and {:?} are both size-matched controls of {like:?}; a \
                         condition has one control to be tested against",
                        condition.name,
                        other.name
                    );
                }
                let matched = self.conditions.iter().find(|c| &c.name == like);
                match matched {
                    Some(c) if !c.augment.is_empty() => {}
                    Some(_) => bail!(
                        "condition {:?} matches the size of {like:?}, which adds no \
                         counterfactuals",
                        condition.name
                    ),
                    None => bail!(
                        "condition {:?} matches the size of {like:?}, which is not a condition \
                         (there are: {})",
                        condition.name,
                        self.condition_names().join(", ")
                    ),
                }
            }
            if (condition.any_original || condition.max_added.is_some() || condition.balance_labels)
                && condition.augment.is_empty()
            {
                bail!(
                    "condition {:?} says which records to add (`any_original`, `max_added`, \
                     `balance_labels`) but adds no file",
                    condition.name
                );
            }
            if condition.only_flipped && condition.augment.is_empty() {
                bail!(
                    "condition {:?} keeps only flipped records but adds no file",
                    condition.name
                );
            }
        }
        if let Some(baseline) = &self.baseline
            && !names.contains(baseline.as_str())
        {
            bail!(
                "the baseline {baseline:?} is not a condition (there are: {})",
                self.condition_names().join(", ")
            );
        }
        if self.bootstrap_replicates < 100 {
            bail!(
                "bootstrap_replicates {} is too few for a p-value (use ≥ 1000)",
                self.bootstrap_replicates
            );
        }
        Ok(())
    }

    fn condition_names(&self) -> Vec<String> {
        self.conditions.iter().map(|c| c.name.clone()).collect()
    }

    /// The index of the baseline condition.
    pub fn baseline_index(&self) -> usize {
        self.baseline
            .as_ref()
            .and_then(|b| self.conditions.iter().position(|c| &c.name == b))
            .unwrap_or(0)
    }
}

/// `path` with `{home}` replaced, relative to `dir` unless absolute.
pub fn resolve_path(path: &str, dir: &Path, home: &Home) -> PathBuf {
    let path = PathBuf::from(path.replace("{home}", &home.root().display().to_string()));
    if path.is_absolute() {
        path
    } else {
        dir.join(path)
    }
}

/// A dataset spec with its file path resolved by [`resolve_path`] (built-ins unchanged).
pub fn resolve_spec(spec: &str, dir: &Path, home: &Home) -> String {
    let (name, split) = match spec.rsplit_once(':') {
        Some((name, split)) if ["train", "dev", "test"].contains(&split) => (name, Some(split)),
        _ => (spec, None),
    };
    if Builtin::parse(name).is_some() {
        return spec.to_string();
    }
    let path = resolve_path(name, dir, home).display().to_string();
    match split {
        Some(split) => format!("{path}:{split}"),
        None => path,
    }
}

/// A dataset spec as tables show it: a built-in as it is (`imdb:test`), a file by its stem and
/// split (`/data/reviews.jsonl:test` → `reviews:test`).
pub fn short_dataset_name(spec: &str) -> String {
    let (file, split) = match spec.rsplit_once(':') {
        Some((file, split)) if ["train", "dev", "test"].contains(&split) => (file, Some(split)),
        _ => (spec, None),
    };
    let path = std::path::Path::new(file);
    if !file.contains(['/', '.']) {
        return spec.to_string();
    }
    let stem = path
        .file_stem()
        .map_or_else(|| file.to_string(), |s| s.to_string_lossy().into_owned());
    match split {
        Some(split) => format!("{stem}:{split}"),
        None => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_by_their_stem_and_built_ins_as_they_are() {
        assert_eq!(short_dataset_name("imdb:test"), "imdb:test");
        assert_eq!(short_dataset_name("rotten-tomatoes"), "rotten-tomatoes");
        assert_eq!(short_dataset_name("/data/yelp/reviews.jsonl"), "reviews");
        assert_eq!(short_dataset_name("/data/reviews.csv:test"), "reviews:test");
        assert_eq!(short_dataset_name("base.csv:train"), "base:train");
    }

    #[test]
    fn the_shipped_experiment_files_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let config: ExperimentConfig =
                    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                config
                    .validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                checked += 1;
            }
        }
        assert!(checked >= 3, "{checked} files in {}", dir.display());
    }

    #[test]
    fn the_batch_order_is_shuffled_unless_the_model_table_says_by_length() {
        use crate::training::classifier::BatchOrder;
        let model = |text: &str| {
            toml::from_str::<ModelConfig>(text)
                .unwrap()
                .train
                .batch_order
        };
        assert_eq!(model("kind = \"fine-tune\""), BatchOrder::Shuffled);
        let by_length = "kind = \"fine-tune\"\nbatch_order = \"by-length\"";
        assert_eq!(model(by_length), BatchOrder::ByLength);
        assert!(toml::from_str::<ModelConfig>("batch_order = \"sorted\"").is_err());
        // The CLI's spelling is not a key: refused, not ignored.
        let misspelt: ModelConfig = toml::from_str("batch-order = \"by-length\"").unwrap();
        let message = misspelt.check().unwrap_err().to_string();
        assert!(message.contains("batch-order"), "{message}");
        assert!(
            toml::from_str::<ModelConfig>(by_length)
                .unwrap()
                .check()
                .is_ok()
        );
    }
}
