//! Labelled examples and datasets, with deterministic seeded splits and subsets.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The input of one example: a single text, or a text pair (premise and hypothesis, for NLI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Pair { premise: String, hypothesis: String },
    Text { text: String },
}

impl Input {
    /// `text` alone, or as the hypothesis after `premise`.
    pub fn with_premise(premise: Option<&str>, text: &str) -> Input {
        match premise {
            Some(premise) => Input::Pair {
                premise: premise.to_string(),
                hypothesis: text.to_string(),
            },
            None => Input::Text {
                text: text.to_string(),
            },
        }
    }

    /// The texts of the input: one for a text, two for a pair.
    pub fn texts(&self) -> Vec<&str> {
        match self {
            Input::Text { text } => vec![text],
            Input::Pair {
                premise,
                hypothesis,
            } => vec![premise, hypothesis],
        }
    }
}

/// One labelled example. `label` indexes the owning dataset's [`LabelVocab`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    pub id: String,
    #[serde(flatten)]
    pub input: Input,
    pub label: usize,
}

/// The ordered label names of a dataset; a label id is a position in this list.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LabelVocab {
    names: Vec<String>,
}

impl LabelVocab {
    /// A vocabulary with the given names, in order.
    pub fn new(names: Vec<String>) -> Self {
        Self { names }
    }

    /// The id of `name`, if it is a label of this vocabulary.
    pub fn id(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The name of label `id`.
    pub fn name(&self, id: usize) -> &str {
        &self.names[id]
    }

    /// All label names, in id order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A named collection of examples sharing one label vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dataset {
    pub name: String,
    pub labels: LabelVocab,
    pub examples: Vec<Example>,
}

/// Train, dev and test parts of a dataset.
#[derive(Debug, Clone)]
pub struct Splits {
    pub train: Dataset,
    pub dev: Dataset,
    pub test: Dataset,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }

    /// Number of examples per label id.
    pub fn label_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.labels.len()];
        for example in &self.examples {
            counts[example.label] += 1;
        }
        counts
    }

    /// Splits into train/dev/test by a seeded hash of each example id: an example's part
    /// depends only on its id, the seed and the fractions, never on file order.
    pub fn split(&self, dev_fraction: f64, test_fraction: f64, seed: u64) -> Splits {
        let mut parts = [Vec::new(), Vec::new(), Vec::new()];
        for example in &self.examples {
            let u = unit_hash(seed, &example.id);
            let part = if u < test_fraction {
                2
            } else if u < test_fraction + dev_fraction {
                1
            } else {
                0
            };
            parts[part].push(example.clone());
        }
        let [train, dev, test] = parts;
        Splits {
            train: self.with_examples("train", train),
            dev: self.with_examples("dev", dev),
            test: self.with_examples("test", test),
        }
    }

    /// A label-stratified subset of about `n` examples chosen by a seeded hash of their ids,
    /// in a seeded random order. Returns everything (shuffled) when `n >= len`.
    pub fn sample(&self, n: usize, seed: u64) -> Dataset {
        self.sample_quota(&[], &self.stratified_quota(n), seed, &format!("sample{n}"))
    }

    /// As [`Self::sample`], leaving out the examples `sample(skip, seed)` picks: a second subset
    /// of about `n` examples, disjoint from a first one drawn with the same seed.
    pub fn sample_after(&self, skip: usize, n: usize, seed: u64) -> Dataset {
        let part = format!("sample{n}-after{skip}");
        let skipped = self.stratified_quota(skip);
        self.sample_quota(&skipped, &self.stratified_quota(n), seed, &part)
    }

    /// As [`Self::sample`], with `shares[label]` of the `n` examples of each label (all of a
    /// label's examples when it has fewer): a skewed subset, such as a positive-heavy training
    /// set.
    pub fn sample_shares(&self, n: usize, seed: u64, shares: &[f64]) -> Dataset {
        let quota: Vec<usize> = shares
            .iter()
            .map(|share| (share * n as f64).round() as usize)
            .collect();
        self.sample_quota(&[], &quota, seed, &format!("sample{n}-skewed"))
    }

    /// As many examples of each label as the rarest label has, chosen by a seeded hash of their
    /// ids.
    pub fn balanced(&self, seed: u64) -> Dataset {
        let counts = self.label_counts();
        let fewest = counts.iter().copied().min().unwrap_or(0);
        self.sample_quota(&[], &vec![fewest; counts.len()], seed, "balanced")
    }

    /// How many of `n` examples each label gets in proportion to its share of the dataset.
    fn stratified_quota(&self, n: usize) -> Vec<usize> {
        let total = self.len().max(1);
        self.label_counts()
            .iter()
            .map(|&c| ((c * n) as f64 / total as f64).round() as usize)
            .collect()
    }

    /// Up to `quota[label]` examples of each label, the first by a seeded hash of their ids after
    /// the first `skip[label]` (none where `skip` has no entry).
    fn sample_quota(&self, skip: &[usize], quota: &[usize], seed: u64, part: &str) -> Dataset {
        let mut ranked: Vec<(u64, &Example)> = self
            .examples
            .iter()
            .map(|e| (stable_hash(seed, &e.id), e))
            .collect();
        ranked.sort_by_key(|(h, e)| (*h, e.id.clone()));
        let mut seen = vec![0; self.labels.len()];
        let chosen = ranked
            .into_iter()
            .filter(|(_, e)| {
                let rank = seen[e.label];
                seen[e.label] += 1;
                let first = skip.get(e.label).copied().unwrap_or(0);
                (first..first + quota.get(e.label).copied().unwrap_or(0)).contains(&rank)
            })
            .map(|(_, e)| e.clone())
            .collect();
        self.with_examples(part, chosen)
    }

    /// [`Self::sample`] of `limit` examples when given and smaller than the dataset.
    pub fn limited(self, limit: Option<usize>, seed: u64) -> Dataset {
        match limit {
            Some(n) if n < self.len() => self.sample(n, seed),
            _ => self,
        }
    }

    fn with_examples(&self, part: &str, examples: Vec<Example>) -> Dataset {
        Dataset {
            name: format!("{}:{part}", self.name),
            labels: self.labels.clone(),
            examples,
        }
    }

    /// Checks that ids are unique and labels are in range.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = HashMap::with_capacity(self.len());
        for (index, example) in self.examples.iter().enumerate() {
            if example.label >= self.labels.len() {
                return Err(format!(
                    "example {:?} has label id {} but the dataset has {} labels",
                    example.id,
                    example.label,
                    self.labels.len()
                ));
            }
            if let Some(first) = seen.insert(example.id.as_str(), index) {
                return Err(format!(
                    "duplicate example id {:?} (examples {first} and {index})",
                    example.id
                ));
            }
        }
        Ok(())
    }
}

/// A 64-bit hash of `(seed, text)` that is stable across platforms, Rust versions and runs
/// (FNV-1a followed by the splitmix64 finaliser).
pub fn stable_hash(seed: u64, text: &str) -> u64 {
    stable_hash_bytes(seed, text.as_bytes())
}

/// [`stable_hash`] of any bytes.
pub fn stable_hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &byte in bytes {
        h ^= byte as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// [`stable_hash`] mapped uniformly onto `[0, 1)`.
pub fn unit_hash(seed: u64, text: &str) -> f64 {
    (stable_hash(seed, text) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(n: usize) -> Dataset {
        Dataset {
            name: "toy".into(),
            labels: LabelVocab::new(vec!["neg".into(), "pos".into()]),
            examples: (0..n)
                .map(|i| Example {
                    id: format!("ex{i}"),
                    input: Input::Text {
                        text: format!("text {i}"),
                    },
                    label: i % 2,
                })
                .collect(),
        }
    }

    #[test]
    fn splits_are_disjoint_complete_and_independent_of_order() {
        let data = toy(1000);
        let splits = data.split(0.1, 0.2, 7);
        assert_eq!(
            splits.train.len() + splits.dev.len() + splits.test.len(),
            1000
        );
        assert!(
            (150..250).contains(&splits.test.len()),
            "{}",
            splits.test.len()
        );
        assert!(
            (60..140).contains(&splits.dev.len()),
            "{}",
            splits.dev.len()
        );

        let mut reversed = data.clone();
        reversed.examples.reverse();
        let again = reversed.split(0.1, 0.2, 7);
        let ids = |d: &Dataset| {
            let mut v: Vec<_> = d.examples.iter().map(|e| e.id.clone()).collect();
            v.sort();
            v
        };
        assert_eq!(ids(&splits.test), ids(&again.test));
        assert_ne!(ids(&splits.test), ids(&data.split(0.1, 0.2, 8).test));
    }

    #[test]
    fn sample_shares_skews_the_labels() {
        let data = toy(200);
        let skewed = data.sample_shares(100, 3, &[0.15, 0.85]);
        assert_eq!(skewed.label_counts(), vec![15, 85]);
        // A label's examples run out before its share: all of them.
        assert_eq!(
            data.sample_shares(150, 3, &[0.1, 0.9]).label_counts(),
            vec![15, 100]
        );
        // The proportional shares give the stratified sample.
        let ids = |d: &Dataset| d.examples.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        assert_eq!(
            ids(&data.sample_shares(60, 3, &[0.5, 0.5])),
            ids(&data.sample(60, 3))
        );
    }

    #[test]
    fn sample_is_stratified_and_seeded() {
        let data = toy(1000);
        let sample = data.sample(100, 3);
        assert_eq!(sample.label_counts(), vec![50, 50]);
        assert_eq!(sample.examples, data.sample(100, 3).examples);
        assert_ne!(sample.examples, data.sample(100, 4).examples);
    }

    #[test]
    fn sample_after_is_disjoint_from_the_sample_it_skips() {
        let data = toy(1000);
        let first = data.sample(100, 3);
        let second = data.sample_after(100, 300, 3);
        assert_eq!(second.label_counts(), vec![150, 150]);
        let ids = |d: &Dataset| -> std::collections::HashSet<String> {
            d.examples.iter().map(|e| e.id.clone()).collect()
        };
        assert!(ids(&first).is_disjoint(&ids(&second)));
        // Together they are the larger sample.
        let both: std::collections::HashSet<String> =
            ids(&first).union(&ids(&second)).cloned().collect();
        assert_eq!(both, ids(&data.sample(400, 3)));
        assert_eq!(data.sample_after(0, 100, 3).examples, first.examples);
    }

    #[test]
    fn balanced_keeps_as_many_of_each_label_as_the_rarest_has() {
        let mut data = toy(100);
        data.examples
            .retain(|e| e.label == 1 || e.id.as_str() < "ex3"); // ex0, ex2, ex10..ex28: 12
        let balanced = data.balanced(5);
        assert_eq!(data.label_counts(), vec![12, 50]);
        assert_eq!(balanced.label_counts(), vec![12, 12]);
        assert_eq!(balanced.examples, data.balanced(5).examples);
        assert_ne!(balanced.examples, data.balanced(6).examples);
    }

    #[test]
    fn example_json_round_trips_for_texts_and_pairs() {
        let pair = Example {
            id: "p".into(),
            input: Input::Pair {
                premise: "A man sleeps.".into(),
                hypothesis: "A man is awake.".into(),
            },
            label: 2,
        };
        let json = serde_json::to_string(&pair).unwrap();
        assert_eq!(
            json,
            r#"{"id":"p","premise":"A man sleeps.","hypothesis":"A man is awake.","label":2}"#
        );
        assert_eq!(serde_json::from_str::<Example>(&json).unwrap(), pair);
        let text: Example = serde_json::from_str(r#"{"id":"t","text":"fine","label":0}"#).unwrap();
        assert_eq!(text.input.texts(), vec!["fine"]);
    }

    #[test]
    fn validate_rejects_duplicates_and_bad_labels() {
        let mut data = toy(3);
        assert!(data.validate().is_ok());
        data.examples[2].id = "ex0".into();
        assert!(data.validate().unwrap_err().contains("duplicate"));
        data.examples[2].id = "ex2".into();
        data.examples[2].label = 5;
        assert!(data.validate().unwrap_err().contains("label id 5"));
    }

    #[test]
    fn stable_hash_is_pinned() {
        // Pinned so that splits never change silently between versions.
        assert_eq!(stable_hash(0, ""), stable_hash(0, ""));
        assert_eq!(format!("{:016x}", stable_hash(42, "imdb-0")), PINNED_HASH);
    }

    // Computed independently with Python integers.
    const PINNED_HASH: &str = "775c755ab15c3d7b";
}
