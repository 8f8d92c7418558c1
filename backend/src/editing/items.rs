//! Which items a generation run edits: one per example and target label, optionally only the
//! short examples, or from each review the one sentence that carries its label; and every
//! sentence of each example, as training text.

use anyhow::{Result, bail};
use flipside_shared::data::{Dataset, Example, Input};
use flipside_shared::sentences::split_sentences;
use serde::Serialize;

use super::keywords::{Lexicons, labelled_sentence};
use super::prompts::Task;
use crate::pipeline::Item;

/// The part of each example that is edited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    #[default]
    Text,
    Sentence,
}

impl Unit {
    /// Whether whole texts are edited (the default).
    pub fn is_text(&self) -> bool {
        *self == Unit::Text
    }
}

/// Word counts of the sentences [`Unit::Sentence`] edits: shorter ones rarely carry an opinion
/// the label is about.
const SENTENCE_WORDS: (usize, usize) = (6, 40);

/// How items are picked from a dataset.
#[derive(Debug, Clone)]
pub struct Selection {
    /// A label, or "flip": the other label of a binary task, each other label otherwise.
    pub target: String,
    /// Only the first N usable examples (after the seeded shuffle).
    pub limit: Option<usize>,
    /// Skip texts with more words (with [`Unit::Sentence`]: the longest sentence kept).
    pub max_words: Option<usize>,
    pub unit: Unit,
    pub seed: u64,
}

/// What the items are: NLI pairs when any has a premise, else sentiment texts.
pub fn task_of(items: &[Item]) -> Task {
    if items.iter().any(|item| item.premise.is_some()) {
        Task::Nli
    } else {
        Task::Sentiment
    }
}

/// One item per example (its first target), in a seeded order: training data, where each
/// example counts once with its own label.
pub fn select_examples(
    dataset: &Dataset,
    selection: &Selection,
    lexicons: &Lexicons,
) -> Result<Vec<Item>> {
    let mut items = select_items(dataset, selection, lexicons)?;
    let mut seen = std::collections::HashSet::new();
    items.retain(|item| seen.insert(item.id.clone()));
    Ok(items)
}

/// Each example reduced to the sentence that carries its label ([`Unit::Sentence`]'s choice: the
/// one whose opinion words lean furthest toward it), with the example's id and label; examples
/// without such a sentence are left out. Sentence-level training and test data from reviews.
pub fn label_sentences(
    dataset: &Dataset,
    lexicons: &Lexicons,
    max_words: Option<usize>,
) -> Result<Dataset> {
    let names = dataset.labels.names();
    if names != ["negative", "positive"] {
        bail!(
            "a review's label-carrying sentence needs sentiment data labelled negative/positive; \
             {} has {}",
            dataset.name,
            names.join(", ")
        );
    }
    let selection = Selection {
        target: "flip".into(),
        limit: None,
        max_words,
        unit: Unit::Sentence,
        seed: 0,
    };
    let mut examples: Vec<Example> = select_examples(dataset, &selection, lexicons)?
        .into_iter()
        .map(|item| Example {
            label: names
                .iter()
                .position(|name| *name == item.label)
                .unwrap_or(0),
            id: item.id,
            input: Input::Text { text: item.text },
        })
        .collect();
    examples.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Dataset {
        name: format!("{} (sentences)", dataset.name),
        labels: dataset.labels.clone(),
        examples,
    })
}

/// Every sentence of `SENTENCE_WORDS` words (at most `max_words`) of each example, with the
/// example's label, examples in a seeded order: training text for an autoencoder, more of it
/// than [`Unit::Sentence`]'s one sentence per review, with noisier labels. At most `limit`
/// sentences (none: all).
pub fn every_sentence(
    dataset: &Dataset,
    max_words: Option<usize>,
    limit: Option<usize>,
    seed: u64,
) -> Vec<(String, String)> {
    let words = SENTENCE_WORDS.0..=max_words.unwrap_or(SENTENCE_WORDS.1);
    let names = dataset.labels.names();
    let mut sentences = Vec::new();
    for example in &dataset.sample(dataset.len(), seed).examples {
        let text = example.input.texts().last().copied().unwrap_or_default();
        for sentence in split_sentences(text) {
            if limit.is_some_and(|limit| sentences.len() >= limit) {
                return sentences;
            }
            if words.contains(&sentence.split_whitespace().count()) {
                sentences.push((sentence.trim().to_string(), names[example.label].clone()));
            }
        }
    }
    sentences
}

/// One item per example and target label, in a seeded order.
pub fn select_items(
    dataset: &Dataset,
    selection: &Selection,
    lexicons: &Lexicons,
) -> Result<Vec<Item>> {
    let names = dataset.labels.names();
    if selection.unit == Unit::Sentence && names != ["negative", "positive"] {
        bail!(
            "editing sentences needs sentiment data labelled negative/positive; {} has {}",
            dataset.name,
            names.join(", ")
        );
    }
    if selection.target != "flip" && !names.contains(&selection.target) {
        bail!(
            "--target {:?} is not a label of {} ({})",
            selection.target,
            dataset.name,
            names.join(", ")
        );
    }
    let sample = dataset.sample(dataset.len(), selection.seed);
    let mut items = Vec::new();
    let mut examples = 0;
    for example in &sample.examples {
        if selection.limit.is_some_and(|limit| examples >= limit) {
            break;
        }
        let (text, premise) = match &example.input {
            // Trimmed as the demo trims what a user types, so both make the same edit.
            Input::Text { text } => (text.trim().to_string(), None),
            Input::Pair {
                premise,
                hypothesis,
            } => (
                hypothesis.trim().to_string(),
                Some(premise.trim().to_string()),
            ),
        };
        let label = names[example.label].clone();
        let text = match selection.unit {
            Unit::Text => {
                if selection
                    .max_words
                    .is_some_and(|max| text.split_whitespace().count() > max)
                {
                    continue;
                }
                text
            }
            Unit::Sentence => {
                let sign = if label == "positive" { 1 } else { -1 };
                let words = SENTENCE_WORDS.0..=selection.max_words.unwrap_or(SENTENCE_WORDS.1);
                match labelled_sentence(&text, lexicons, sign, words) {
                    Some(sentence) => sentence.to_string(),
                    None => continue,
                }
            }
        };
        let targets: Vec<&String> = if selection.target == "flip" {
            names.iter().filter(|n| **n != label).collect()
        } else if selection.target != label {
            vec![&selection.target]
        } else {
            Vec::new()
        };
        if targets.is_empty() {
            continue;
        }
        examples += 1;
        for target in targets {
            items.push(Item {
                id: example.id.clone(),
                text: text.clone(),
                premise: premise.clone(),
                label: label.clone(),
                target: target.clone(),
            });
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use flipside_shared::data::{Example, LabelVocab};

    use super::*;

    /// Reviews labelled negative (0) or positive (1).
    fn reviews(examples: &[(&str, &str, usize)]) -> Dataset {
        Dataset {
            name: "toy".into(),
            labels: LabelVocab::new(vec!["negative".into(), "positive".into()]),
            examples: examples
                .iter()
                .map(|&(id, text, label)| Example {
                    id: id.into(),
                    input: Input::Text { text: text.into() },
                    label,
                })
                .collect(),
        }
    }

    #[test]
    fn label_sentences_keeps_each_reviews_sentence_that_carries_its_label() {
        let lexicons = Lexicons::of_opinions(&["superb", "great"], &["dull", "wooden"]);
        let dataset = reviews(&[
            (
                "a",
                "The plot was dull in places, I admit. But the acting was superb and great all \
                 the way through.",
                1,
            ),
            ("b", "The acting was wooden from the first scene on.", 0),
            // No sentence leans toward its label: left out.
            ("c", "A superb cast in a great big production.", 0),
        ]);
        let sentences = label_sentences(&dataset, &lexicons, None).unwrap();
        let got: Vec<(&str, &str, usize)> = sentences
            .examples
            .iter()
            .map(|e| (e.id.as_str(), e.input.texts()[0], e.label))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "a",
                    "But the acting was superb and great all the way through.",
                    1
                ),
                ("b", "The acting was wooden from the first scene on.", 0),
            ]
        );
        assert_eq!(sentences.labels.names(), ["negative", "positive"]);
    }

    #[test]
    fn every_sentence_keeps_each_sentence_of_six_to_forty_words_with_its_label() {
        let dataset = reviews(&[
            (
                "a",
                "The acting was superb from start to finish. Loved it! I would watch it again \
                 with all of my friends.",
                1,
            ),
            ("b", "The plot made no sense at all to me.", 0),
        ]);
        let mut all = every_sentence(&dataset, None, None, 7);
        all.sort();
        let expected = [
            ("I would watch it again with all of my friends.", "positive"),
            ("The acting was superb from start to finish.", "positive"),
            ("The plot made no sense at all to me.", "negative"),
        ];
        let owned: Vec<(String, String)> = expected
            .iter()
            .map(|(s, l)| (s.to_string(), l.to_string()))
            .collect();
        assert_eq!(all, owned);
        // At most 8 words, at most 1 sentence.
        assert_eq!(every_sentence(&dataset, Some(8), None, 7).len(), 1);
        assert_eq!(every_sentence(&dataset, None, Some(1), 7).len(), 1);
    }
}
