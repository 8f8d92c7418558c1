//! Everything an experiment reads, read and checked before any training: the base set, each
//! condition's training set (counterfactuals paired with their base originals, or fresh
//! in-domain originals), the test sets with their labels mapped to the training labels, the
//! fingerprints of every input, and the cache key of every unit.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use flipside_shared::data::{Dataset, Example, Input, LabelVocab, stable_hash};
use flipside_shared::records::{Counterfactual, FailedAttempt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::config::{ConditionConfig, DataConfig, ExperimentConfig, ModelKind};
use crate::data::{DatasetSpec, SplitConfig};
use crate::home::Home;
use crate::model_dirs::{file_sha256, resolve_model_dir};
use crate::pipeline::item_of_key;
use crate::pipeline::store::{failures_path, read_repairing};

/// An input of the experiment, named so that the result can be re-run and checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputFingerprint {
    /// What it is used as: `base`, `test: NAME`, `augment: CONDITION`, `encoder`.
    pub role: String,
    /// The dataset spec or path as resolved.
    pub source: String,
    /// sha256 of the file (of `config.json` + `model.safetensors` for an encoder); none for
    /// built-ins, whose content is pinned by the asset's checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Examples or records used.
    pub examples: usize,
    /// sha256 of the examples used (ids, labels and texts, in order).
    pub content: String,
}

/// One condition's training set.
#[derive(Debug, Clone)]
pub struct ConditionData {
    pub name: String,
    pub train: Dataset,
    /// Examples added to the base set.
    pub added: usize,
}

/// A test set, its labels mapped to the training labels.
#[derive(Debug, Clone)]
pub struct TestData {
    pub name: String,
    pub dataset: Dataset,
    /// [`content_fingerprint`] of the examples: the key of cached predictions.
    pub fingerprint: String,
}

/// One model to train: a condition and a seed.
#[derive(Debug, Clone)]
pub struct Unit {
    pub condition: usize,
    pub seed: u64,
    /// sha256 of everything the trained model depends on.
    pub key: String,
}

/// The checked inputs of an experiment and its units.
#[derive(Debug)]
pub struct Plan {
    pub config: ExperimentConfig,
    pub labels: Vec<String>,
    pub conditions: Vec<ConditionData>,
    pub tests: Vec<TestData>,
    pub inputs: Vec<InputFingerprint>,
    /// The starting encoder's directory (fine-tuned models only).
    pub encoder: Option<PathBuf>,
    /// Seed-major: every condition of the first seed, then of the next.
    pub units: Vec<Unit>,
}

/// Bump when what a unit computes changes, so that old cached units are not reused.
const UNIT_FORMAT: u32 = 2;

/// Reads and checks every input of `config` and lists its units.
pub fn plan(home: &Home, config: ExperimentConfig) -> Result<Plan> {
    config.validate()?;
    let mut inputs = Vec::new();

    let full = load(home, &config.base)?;
    let base = match &config.base.originals_of {
        Some(file) => picked_examples(&full, file)?,
        None => full.clone(),
    };
    let base = match (&config.base.label_shares, config.base.limit) {
        (Some(shares), Some(limit)) => {
            let mut by_label = vec![0.0; base.labels.len()];
            for (label, share) in shares {
                let Some(id) = base.labels.id(label) else {
                    bail!(
                        "`label_shares` names {label:?}, which the base set lacks ({:?})",
                        base.labels.names()
                    );
                };
                by_label[id] = *share;
            }
            base.sample_shares(limit, config.base.seed, &by_label)
        }
        _ => base.limited(config.base.limit, config.base.seed),
    };
    if base.labels.len() < 2 {
        bail!(
            "the base set {} has fewer than two labels: {:?}",
            config.base.dataset,
            base.labels.names()
        );
    }
    inputs.push(fingerprint_input("base", &config.base.dataset, &base)?);
    let labels = base.labels.names().to_vec();

    let mut conditions = Vec::new();
    for condition in &config.conditions {
        let mut added = Vec::new();
        for (file_index, file) in condition.augment.iter().enumerate() {
            let pairs = counterfactuals_of(&base, file, condition.into())?;
            let records = pairs.len();
            added.extend(pairs.into_iter().map(|mut example| {
                example.id = counterfactual_id(file_index, &example.id);
                example
            }));
            let mut input = fingerprint_input(
                &format!("augment: {}", condition.name),
                &file.display().to_string(),
                &Dataset {
                    name: file.display().to_string(),
                    labels: base.labels.clone(),
                    examples: added[added.len() - records..].to_vec(),
                },
            )?;
            input.sha256 = Some(file_sha256(file)?);
            inputs.push(input);
        }
        if condition.balance_labels {
            let all = added.len();
            added = Dataset {
                name: condition.name.clone(),
                labels: base.labels.clone(),
                examples: added,
            }
            .balanced(config.base.seed)
            .examples;
            ensure!(
                !added.is_empty(),
                "condition {:?}: balancing its {all} counterfactuals leaves none, for a target \
                 label has none",
                condition.name
            );
        }
        conditions.push((condition, added));
    }
    let mut built = Vec::new();
    for (condition, mut added) in conditions.iter().cloned() {
        if let Some(like) = &condition.in_domain_like {
            let n = conditions
                .iter()
                .find(|(c, _)| &c.name == like)
                .map(|(_, added)| added.len())
                .expect("validated");
            let other_pool;
            let pool = match &condition.in_domain_from {
                Some(pool) => {
                    let name = format!("in-domain pool of {}", condition.name);
                    other_pool = map_labels(load(home, pool)?, &base.labels, &name)?
                        .limited(pool.limit, pool.seed);
                    inputs.push(fingerprint_input(&name, &pool.dataset, &other_pool)?);
                    &other_pool
                }
                None => &full,
            };
            added = fresh_originals(pool, &base, n, config.base.seed).with_context(|| {
                format!(
                    "condition {:?} (size-matched to {like:?}) needs {n} fresh originals",
                    condition.name
                )
            })?;
        }
        let mut train = base.clone();
        train.name = format!("{} + {}", base.name, condition.name);
        let count = added.len();
        train.examples.extend(added);
        built.push(ConditionData {
            name: condition.name.clone(),
            train,
            added: count,
        });
    }

    let mut tests = Vec::new();
    let training_texts: HashSet<Vec<&str>> =
        base.examples.iter().map(|e| e.input.texts()).collect();
    for test in &config.tests {
        let name = test.display_name();
        let dataset = map_labels(load(home, test)?, &base.labels, &name)?;
        let dataset = dataset.limited(test.limit, test.seed);
        let leaked = dataset
            .examples
            .iter()
            .filter(|e| training_texts.contains(&e.input.texts()))
            .count();
        if leaked > 0 {
            tracing::warn!("{leaked} examples of the test set {name} are also in the base set");
        }
        let input = fingerprint_input(&format!("test: {name}"), &test.dataset, &dataset)?;
        tests.push(TestData {
            name,
            fingerprint: input.content.clone(),
            dataset,
        });
        inputs.push(input);
    }

    let encoder = match config.model.kind {
        ModelKind::Bow => None,
        ModelKind::FineTune => {
            let dir = resolve_model_dir(home, &config.model.encoder)?;
            inputs.push(InputFingerprint {
                role: "encoder".into(),
                source: dir.display().to_string(),
                sha256: Some(encoder_sha256(&dir)?),
                examples: 0,
                content: String::new(),
            });
            Some(dir)
        }
    };
    let encoder_hash = inputs
        .iter()
        .find(|i| i.role == "encoder")
        .and_then(|i| i.sha256.clone());
    let mut units = Vec::new();
    for &seed in &config.seeds {
        for (index, condition) in built.iter().enumerate() {
            units.push(Unit {
                condition: index,
                seed,
                key: unit_key(&config, &condition.train, seed, encoder_hash.as_deref())?,
            });
        }
    }
    Ok(Plan {
        config,
        labels,
        conditions: built,
        tests,
        inputs,
        encoder,
        units,
    })
}

/// A counterfactual's id in a condition's training set: `cfN:KEY`, the condition's N-th file's
/// record `KEY` (`ITEM→TARGET`).
fn counterfactual_id(file_index: usize, key: &str) -> String {
    format!("cf{file_index}:{key}")
}

/// The base example a training example comes from: a counterfactual's original, otherwise the
/// example itself. Models that hold out part of their training set keep these groups whole.
pub fn original_id(id: &str) -> &str {
    match id.strip_prefix("cf").and_then(|rest| rest.split_once(':')) {
        Some((file, key)) if !file.is_empty() && file.bytes().all(|b| b.is_ascii_digit()) => {
            item_of_key(key)
        }
        _ => id,
    }
}

/// The cache key of one unit: the model's settings, the encoder, the seed and the content of
/// the training set. The condition's name is not part of it: renaming a condition reuses its
/// models.
pub fn unit_key(
    config: &ExperimentConfig,
    train: &Dataset,
    seed: u64,
    encoder_sha256: Option<&str>,
) -> Result<String> {
    let described = serde_json::json!({
        "format": UNIT_FORMAT,
        "model": config.model,
        "encoder": encoder_sha256,
        "seed": seed,
        "train": content_fingerprint(train),
    });
    Ok(hex::encode(Sha256::digest(serde_json::to_vec(&described)?)))
}

fn load(home: &Home, data: &DataConfig) -> Result<Dataset> {
    let spec: DatasetSpec = data.dataset.parse()?;
    let splits = SplitConfig {
        dev: 0.1,
        test: 0.1,
        seed: data.split_seed,
    };
    let report = spec
        .load(home, &data.read_options(), splits)
        .with_context(|| format!("reading {}", data.dataset))?;
    let mut dataset = report.dataset;
    if dataset.is_empty() {
        bail!("{} has no examples", data.dataset);
    }
    dataset.name = data.display_name();
    Ok(dataset)
}

/// Which records of a counterfactual file a condition adds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecordFilter {
    /// Only the records the classifier judged flipped.
    pub only_flipped: bool,
    /// Also records whose original is not a base example.
    pub any_original: bool,
    /// At most this many records (the first, in file order).
    pub max_added: Option<usize>,
}

impl From<&ConditionConfig> for RecordFilter {
    fn from(condition: &ConditionConfig) -> Self {
        Self {
            only_flipped: condition.only_flipped,
            any_original: condition.any_original,
            max_added: condition.max_added,
        }
    }
}

/// The records of `file` whose original is an example of `base` (or any, with
/// `filter.any_original`), as training examples: the edited text with the target label, id
/// `KEY`. Fails on a record whose target is not a base label, or whose original is not (part of)
/// its base example's text — a file made from other data.
pub fn counterfactuals_of(
    base: &Dataset,
    file: &Path,
    filter: RecordFilter,
) -> Result<Vec<Example>> {
    if !file.is_file() {
        bail!(
            "the counterfactual file {} does not exist (make it with `flipside generate`)",
            file.display()
        );
    }
    let records: Vec<Counterfactual> = read_repairing(file)?;
    let by_id: HashMap<&str, &Example> = base.examples.iter().map(|e| (e.id.as_str(), e)).collect();
    let mut examples = Vec::new();
    let mut outside = 0;
    for record in &records {
        if filter.max_added.is_some_and(|max| examples.len() >= max) {
            break;
        }
        match by_id.get(record.item.as_str()) {
            None if filter.any_original => {}
            None => {
                outside += 1;
                continue;
            }
            Some(original) => {
                let text = original.input.texts().last().copied().unwrap_or_default();
                if !text.contains(record.original.trim()) {
                    bail!(
                        "{}: record {:?} edits {:?}, but base example {:?} reads {:?}: the file \
                         was made from other data than the base set",
                        file.display(),
                        record.key,
                        preview(&record.original),
                        record.item,
                        preview(text)
                    );
                }
            }
        }
        let Some(label) = base.labels.id(&record.target) else {
            bail!(
                "{}: record {:?} has the target label {:?}, which the base set lacks ({:?})",
                file.display(),
                record.key,
                record.target,
                base.labels.names()
            );
        };
        if filter.only_flipped && !record.flipped {
            continue;
        }
        examples.push(Example {
            id: record.key.clone(),
            input: Input::with_premise(record.premise.as_deref(), &record.edited),
            label,
        });
    }
    if outside > 0 {
        tracing::warn!(
            "{}: {outside} of {} records edit examples outside the base set; they are not used",
            file.display(),
            records.len()
        );
    }
    if examples.is_empty() {
        bail!(
            "{}: none of its {} records is a{} counterfactual of a base example (is the base \
             set the one the file was generated from, with the same --limit and seed?)",
            file.display(),
            records.len(),
            if filter.only_flipped { " flipped" } else { "" }
        );
    }
    Ok(examples)
}

/// The examples of `dataset` that `generate` picked for `file`: those its records edit and
/// those its failure sidecar names, in dataset order.
fn picked_examples(dataset: &Dataset, file: &Path) -> Result<Dataset> {
    if !file.is_file() {
        bail!(
            "the base set is the originals of {}, which does not exist (make it with \
             `flipside generate`)",
            file.display()
        );
    }
    let records: Vec<Counterfactual> = read_repairing(file)?;
    // Items whose every attempt failed are in the failure sidecar, keyed `ITEM→TARGET`.
    let failures: Vec<FailedAttempt> = read_repairing(&failures_path(file))?;
    let items: HashSet<&str> = records
        .iter()
        .map(|r| r.item.as_str())
        .chain(failures.iter().map(|f| item_of_key(&f.key)))
        .collect();
    let mut base = dataset.clone();
    base.examples.retain(|e| items.contains(e.id.as_str()));
    if base.is_empty() {
        bail!(
            "none of the {} records and {} failed attempts of {} is about an example of {} (was \
             it generated from it?)",
            records.len(),
            failures.len(),
            file.display(),
            dataset.name
        );
    }
    base.name = format!("{} (originals of {})", dataset.name, file.display());
    Ok(base)
}

/// Whitespace-separated words over all of an example's texts.
fn words(example: &Example) -> usize {
    example
        .input
        .texts()
        .iter()
        .map(|text| text.split_whitespace().count())
        .sum()
}

fn preview(text: &str) -> String {
    let mut preview: String = text.chars().take(60).collect();
    if preview.len() < text.len() {
        preview.push('…');
    }
    preview
}

/// `n` examples of `full` that are not in `base` and no longer (in words) than its longest
/// example, in a seeded random order: a length filter that chose the base set (`generate
/// --max-words`) holds for the control too, so that it adds no more text per example.
pub fn fresh_originals(
    full: &Dataset,
    base: &Dataset,
    n: usize,
    seed: u64,
) -> Result<Vec<Example>> {
    let used: HashSet<&str> = base.examples.iter().map(|e| e.id.as_str()).collect();
    let longest = base.examples.iter().map(words).max().unwrap_or(0);
    let mut pool: Vec<(u64, &Example)> = full
        .examples
        .iter()
        .filter(|e| !used.contains(e.id.as_str()) && words(e) <= longest)
        .map(|e| (stable_hash(seed ^ 0x696e_646f_6d61_696e, &e.id), e))
        .collect();
    if pool.len() < n {
        bail!(
            "the base dataset has only {} examples outside the base subset and no longer than \
             its longest example ({longest} words)",
            pool.len()
        );
    }
    pool.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
    Ok(pool
        .into_iter()
        .take(n)
        .map(|(_, e)| {
            let mut e = e.clone();
            e.id = format!("fresh:{}", e.id);
            e
        })
        .collect())
}

/// `dataset` with its label ids renumbered to `labels`; fails when it has a label `labels` lacks.
fn map_labels(dataset: Dataset, labels: &LabelVocab, name: &str) -> Result<Dataset> {
    let missing: Vec<&String> = dataset
        .labels
        .names()
        .iter()
        .filter(|l| labels.id(l).is_none())
        .collect();
    if !missing.is_empty() {
        bail!(
            "the test set {name} has the labels {missing:?}, which the training set lacks \
             (training labels: {:?}; for a file with integer labels give `labels`)",
            labels.names()
        );
    }
    let map: Vec<usize> = dataset
        .labels
        .names()
        .iter()
        .map(|l| labels.id(l).expect("checked"))
        .collect();
    Ok(Dataset {
        name: dataset.name,
        labels: labels.clone(),
        examples: dataset
            .examples
            .into_iter()
            .map(|mut e| {
                e.label = map[e.label];
                e
            })
            .collect(),
    })
}

/// sha256 of a dataset's examples: ids, label names and texts, in order.
pub fn content_fingerprint(dataset: &Dataset) -> String {
    let mut hash = Sha256::new();
    for example in &dataset.examples {
        hash.update(example.id.as_bytes());
        hash.update([0x1f]);
        hash.update(dataset.labels.name(example.label).as_bytes());
        for text in example.input.texts() {
            hash.update([0x1f]);
            hash.update(text.as_bytes());
        }
        hash.update([0x1e]);
    }
    hex::encode(hash.finalize())
}

fn fingerprint_input(role: &str, source: &str, dataset: &Dataset) -> Result<InputFingerprint> {
    let path = source
        .rsplit_once(':')
        .filter(|(_, split)| ["train", "dev", "test"].contains(split))
        .map_or(source, |(path, _)| path);
    let sha256 = Path::new(path)
        .is_file()
        .then(|| file_sha256(Path::new(path)))
        .transpose()?;
    Ok(InputFingerprint {
        role: role.into(),
        source: source.into(),
        sha256,
        examples: dataset.len(),
        content: content_fingerprint(dataset),
    })
}

fn encoder_sha256(dir: &Path) -> Result<String> {
    let mut hash = Sha256::new();
    for name in ["config.json", "model.safetensors"] {
        hash.update(file_sha256(&dir.join(name))?.as_bytes());
    }
    Ok(hex::encode(hash.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::config::ConditionConfig;

    fn dataset(examples: &[(&str, &str, usize)]) -> Dataset {
        Dataset {
            name: "toy".into(),
            labels: LabelVocab::new(vec!["negative".into(), "positive".into()]),
            examples: examples
                .iter()
                .map(|(id, text, label)| Example {
                    id: id.to_string(),
                    input: Input::Text {
                        text: text.to_string(),
                    },
                    label: *label,
                })
                .collect(),
        }
    }

    fn record(item: &str, original: &str, edited: &str, target: &str, flipped: bool) -> String {
        serde_json::json!({
            "key": format!("{item}→{target}"), "item": item, "method": "core",
            "original": original, "edited": edited, "label": "x", "target": target,
            "seed": 1, "attempt": 1, "prediction": target,
            "timing": {"context_ms": 0, "edit_ms": 0, "judge_ms": 0},
            "target_probability": 0.9, "flipped": flipped,
            "provenance": {"kind": "core"}
        })
        .to_string()
    }

    #[test]
    fn counterfactuals_are_paired_with_their_base_originals() {
        let base = dataset(&[("a", "the film was superb", 1), ("b", "a dull plot", 0)]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cf.jsonl");
        let lines = [
            record(
                "a",
                "the film was superb",
                "the film was wooden",
                "negative",
                true,
            ),
            record("b", "a dull plot", "a gripping plot", "positive", false),
            // An example outside the base set (another --limit): not used.
            record("z", "elsewhere", "elsewhere too", "positive", true),
        ];
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();

        let all = counterfactuals_of(&base, &file, RecordFilter::default()).unwrap();
        let got: Vec<(&str, &str, usize)> = all
            .iter()
            .map(|e| (e.id.as_str(), e.input.texts()[0], e.label))
            .collect();
        assert_eq!(
            got,
            [
                ("a→negative", "the film was wooden", 0),
                ("b→positive", "a gripping plot", 1)
            ]
        );
        let only_flipped = RecordFilter {
            only_flipped: true,
            ..RecordFilter::default()
        };
        let flipped = counterfactuals_of(&base, &file, only_flipped).unwrap();
        assert_eq!(flipped.len(), 1);
        assert_eq!(flipped[0].id, "a→negative");
        // Records of any original, at most two: the first two in file order.
        let any = RecordFilter {
            any_original: true,
            max_added: Some(2),
            ..RecordFilter::default()
        };
        let ids = |examples: Vec<Example>| examples.into_iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(
            ids(counterfactuals_of(&base, &file, any).unwrap()),
            ["a→negative", "b→positive"]
        );
        let all_of_any = RecordFilter {
            max_added: None,
            ..any
        };
        assert_eq!(
            ids(counterfactuals_of(&base, &file, all_of_any).unwrap()),
            ["a→negative", "b→positive", "z→positive"]
        );

        // A file made from other data: the same ids, other texts.
        let other = dataset(&[("a", "something else entirely", 1)]);
        let error = counterfactuals_of(&other, &file, RecordFilter::default()).unwrap_err();
        assert!(
            error.to_string().contains("made from other data"),
            "{error}"
        );
        // A target label the base set lacks.
        std::fs::write(
            &file,
            record("a", "the film was superb", "meh", "neutral", true) + "\n",
        )
        .unwrap();
        let error = counterfactuals_of(&base, &file, RecordFilter::default()).unwrap_err();
        assert!(error.to_string().contains("\"neutral\""), "{error}");
    }

    #[test]
    fn fresh_originals_exclude_the_base_and_are_seeded() {
        let full = dataset(&[
            ("a", "1", 0),
            ("b", "2", 1),
            ("c", "3", 0),
            ("d", "4", 1),
            ("e", "5", 0),
            ("f", "longer than any base text", 1),
        ]);
        let base = dataset(&[("a", "1", 0), ("b", "2", 1)]);
        let fresh = fresh_originals(&full, &base, 3, 9).unwrap();
        assert_eq!(fresh.len(), 3);
        assert!(
            fresh
                .iter()
                .all(|e| !["fresh:a", "fresh:b", "fresh:f"].contains(&e.id.as_str()))
        );
        let ids = |f: &[Example]| f.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        assert_eq!(
            ids(&fresh),
            ids(&fresh_originals(&full, &base, 3, 9).unwrap())
        );
        assert!(fresh_originals(&full, &base, 4, 9).is_err());
    }

    #[test]
    fn a_counterfactual_belongs_to_its_original() {
        let id = counterfactual_id(3, "rt-7→negative");
        assert_eq!(original_id(&id), "rt-7");
        assert_eq!(original_id("rt-7"), "rt-7");
        assert_eq!(original_id("fresh:rt-9"), "fresh:rt-9");
        assert_eq!(original_id("cfx:a→b"), "cfx:a→b");
    }

    #[test]
    fn unit_keys_change_with_every_input() {
        let config = ExperimentConfig {
            name: "t".into(),
            seeds: vec![1, 2, 3],
            model: Default::default(),
            base: DataConfig::new("imdb:train"),
            conditions: vec![ConditionConfig::baseline()],
            baseline: None,
            tests: vec![DataConfig::new("imdb:test")],
            bootstrap_replicates: 1000,
        };
        let train = dataset(&[("a", "good", 1), ("b", "bad", 0)]);
        let key = unit_key(&config, &train, 1, Some("enc")).unwrap();
        assert_eq!(key, unit_key(&config, &train, 1, Some("enc")).unwrap());
        let mut changed = vec![
            unit_key(&config, &train, 2, Some("enc")).unwrap(),
            unit_key(&config, &train, 1, Some("other encoder")).unwrap(),
        ];
        let mut relabelled = train.clone();
        relabelled.examples[0].label = 0;
        changed.push(unit_key(&config, &relabelled, 1, Some("enc")).unwrap());
        let mut edited = train.clone();
        edited.examples[1].input = Input::Text {
            text: "bad!".into(),
        };
        changed.push(unit_key(&config, &edited, 1, Some("enc")).unwrap());
        let mut more = train.clone();
        more.examples.push(train.examples[0].clone());
        changed.push(unit_key(&config, &more, 1, Some("enc")).unwrap());
        let mut lr = config.clone();
        lr.model.train.lr = 1e-4;
        changed.push(unit_key(&lr, &train, 1, Some("enc")).unwrap());
        let mut kind = config.clone();
        kind.model.kind = ModelKind::Bow;
        changed.push(unit_key(&kind, &train, 1, Some("enc")).unwrap());
        let mut grouped = config.clone();
        grouped.model.train.batch_order = crate::training::classifier::BatchOrder::ByLength;
        changed.push(unit_key(&grouped, &train, 1, Some("enc")).unwrap());
        for other in &changed {
            assert_ne!(&key, other);
        }
        // The test sets and the condition's name are not part of a model's key.
        let mut renamed = config.clone();
        renamed.tests.push(DataConfig::new("rotten-tomatoes"));
        renamed.conditions[0].name = "plain".into();
        assert_eq!(key, unit_key(&renamed, &train, 1, Some("enc")).unwrap());
    }
}
