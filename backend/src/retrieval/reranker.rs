//! The cross-encoder re-ranker (CORE §3.1, Appendix A): a binary classifier over (query,
//! candidate) text pairs, trained on the same seed pairs as CF-DPR, whose probability that the
//! candidate is a counterfactual of the query re-orders the bi-encoder's top K.

use std::path::Path;

use anyhow::{Result, bail};
use burn::tensor::backend::Backend;
use flipside_shared::data::{Dataset, Example, Input, LabelVocab};
use flipside_shared::models::classifier::TextClassifier;
use rand::SeedableRng;
use rand::seq::index::sample;

use super::cfdpr::SeedPair;
use super::index::Retrieved;
use crate::compute::{Batches, Compute};
use crate::model_dirs::load_classifier;

/// The model name `--rerank` uses unless told otherwise: what `flipside reranker train` writes
/// for the printed pairs.
pub const DEFAULT_RERANKER: &str = "reranker-printed";

/// The re-ranker's labels: a candidate is unrelated to the query, or its counterfactual.
pub const RERANKER_LABELS: [&str; 2] = ["unrelated", "counterfactual"];

/// What the cross-encoder reads for a query and a candidate: the query (for NLI, premise
/// `[SEP]` hypothesis, as CORE §4.2 writes it) as the first segment, the candidate as the second.
pub fn cross_input(query: &Input, candidate: &str) -> Input {
    let query = match query {
        Input::Text { text } => text.clone(),
        Input::Pair {
            premise,
            hypothesis,
        } => format!("{premise} [SEP] {hypothesis}"),
    };
    Input::Pair {
        premise: query,
        hypothesis: candidate.to_string(),
    }
}

/// The re-ranker's training set: per seed pair, (query, counterfactual) is a positive, and
/// (query, hard negative) — the query's own text and its paraphrase, as for CF-DPR — and
/// (query, another pair's counterfactual) for `random` other pairs chosen with `seed` are
/// negatives.
pub fn reranker_dataset(pairs: &[SeedPair], name: &str, random: usize, seed: u64) -> Dataset {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut examples = Vec::new();
    for (i, pair) in pairs.iter().enumerate() {
        let query = pair.query();
        let id = pair.id.clone().unwrap_or_else(|| i.to_string());
        let mut add = |suffix: String, candidate: &str, label: usize| {
            examples.push(Example {
                id: format!("{id}/{suffix}"),
                input: cross_input(&query, candidate),
                label,
            })
        };
        add("counterfactual".into(), &pair.counterfactual, 1);
        for (j, negative) in pair.hard_negatives(false).into_iter().enumerate() {
            add(format!("hard-{j}"), negative, 0);
        }
        let others = sample(&mut rng, pairs.len(), (random + 1).min(pairs.len()));
        for (j, other) in others
            .into_iter()
            .filter(|&o| o != i)
            .take(random)
            .enumerate()
        {
            add(format!("random-{j}"), &pairs[other].counterfactual, 0);
        }
    }
    Dataset {
        name: name.to_string(),
        labels: LabelVocab::new(RERANKER_LABELS.map(String::from).to_vec()),
        examples,
    }
}

/// A trained re-ranker, ready to score candidates.
pub struct Reranker<B: Backend> {
    classifier: TextClassifier<B>,
    batches: Batches,
}

impl<B: Backend> Reranker<B> {
    /// Loads the re-ranker written by `flipside reranker train` into `dir`.
    pub fn load(compute: &Compute<B>, dir: &Path) -> Result<Self> {
        let classifier = load_classifier::<B>(dir, &compute.device)?;
        if classifier.config.labels != RERANKER_LABELS {
            bail!(
                "{} is a classifier of {:?}, not a re-ranker (train one with `flipside reranker \
                 train`)",
                dir.display(),
                classifier.config.labels
            );
        }
        Ok(Self {
            classifier,
            batches: compute.batches,
        })
    }

    /// The probability that each candidate is a counterfactual of `query`.
    pub fn scores(&self, query: &Input, candidates: &[&str]) -> Result<Vec<f32>> {
        let inputs: Vec<Input> = candidates.iter().map(|c| cross_input(query, c)).collect();
        let probs = self.classifier.predict(
            &inputs.iter().collect::<Vec<_>>(),
            32,
            &self.batches,
            &|_| {},
        )?;
        Ok(probs.into_iter().map(|p| p[1]).collect())
    }

    /// Re-orders the first `k` of `hits` (best first) by the re-ranker's scores, which it
    /// records in each of them; the rest keep their places.
    pub fn rerank<'a>(
        &self,
        query: &Input,
        mut hits: Vec<Retrieved<'a>>,
        k: usize,
    ) -> Result<Vec<Retrieved<'a>>> {
        let k = k.min(hits.len());
        let texts: Vec<&str> = hits[..k].iter().map(|h| h.sentence.text.as_str()).collect();
        let scores = self.scores(query, &texts)?;
        for (hit, score) in hits.iter_mut().zip(scores) {
            hit.rerank_score = Some(score);
        }
        hits[..k].sort_by(|a, b| {
            let score = |hit: &Retrieved| hit.rerank_score.unwrap_or_default();
            score(b).total_cmp(&score(a))
        });
        Ok(hits)
    }
}

/// Re-ranks the top `k` of each query's results with the re-ranker in `dir`.
pub fn rerank_results<'a, B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    queries: &[Input],
    results: Vec<Vec<Retrieved<'a>>>,
    k: usize,
) -> Result<Vec<Vec<Retrieved<'a>>>> {
    let reranker = Reranker::load(&compute, dir)?;
    queries
        .iter()
        .zip(results)
        .map(|(query, hits)| reranker.rerank(query, hits, k))
        .collect()
}

/// The order in which the candidates are ranked when the first `k` by `first_stage` scores are
/// re-ordered by `rescore` (called with their indices): best first.
pub fn reranked_order(
    first_stage: &[f32],
    k: usize,
    rescore: impl FnOnce(&[usize]) -> Result<Vec<f32>>,
) -> Result<Vec<usize>> {
    let mut order: Vec<usize> = (0..first_stage.len()).collect();
    order.sort_by(|&a, &b| first_stage[b].total_cmp(&first_stage[a]));
    let k = k.min(order.len());
    let scores = rescore(&order[..k])?;
    let mut top: Vec<(usize, f32)> = order[..k].iter().copied().zip(scores).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (slot, (index, _)) in order.iter_mut().zip(top) {
        *slot = index;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(id: &str, text: &str, counterfactual: &str) -> SeedPair {
        SeedPair {
            id: Some(id.into()),
            ..SeedPair::new(text, "positive", counterfactual)
        }
    }

    #[test]
    fn nli_queries_put_premise_and_hypothesis_in_the_first_segment() {
        let query = Input::Pair {
            premise: "A man plays guitar.".into(),
            hypothesis: "A man makes music.".into(),
        };
        assert_eq!(
            cross_input(&query, "A man sleeps."),
            Input::Pair {
                premise: "A man plays guitar. [SEP] A man makes music.".into(),
                hypothesis: "A man sleeps.".into(),
            }
        );
    }

    #[test]
    fn training_set_has_a_positive_and_hard_and_random_negatives_per_pair() {
        let mut pairs = vec![
            pair("a", "Superb acting.", "Wooden acting."),
            pair("b", "Lovely music.", "Grating music."),
            pair("c", "A dull script.", "A sharp script."),
        ];
        pairs[0].paraphrase = Some("Brilliant cast.".into());
        let data = reranker_dataset(&pairs, "test", 1, 7);
        assert_eq!(data.labels.names(), RERANKER_LABELS);
        // a: positive, paraphrase, itself, one random; b and c: positive, itself, one random.
        assert_eq!(data.len(), 4 + 3 + 3);
        assert_eq!(data.label_counts(), vec![7, 3]);
        let a: Vec<&Example> = data
            .examples
            .iter()
            .filter(|e| e.id.starts_with("a/"))
            .collect();
        let candidate = |e: &Example| match &e.input {
            Input::Pair { hypothesis, .. } => hypothesis.clone(),
            Input::Text { .. } => unreachable!(),
        };
        assert_eq!(candidate(a[0]), "Wooden acting.");
        assert_eq!(a[0].label, 1);
        assert_eq!(candidate(a[1]), "Brilliant cast.");
        assert_eq!(candidate(a[2]), "Superb acting.");
        let random = candidate(a[3]);
        assert!(
            random == "Grating music." || random == "A sharp script.",
            "{random}"
        );
        assert_eq!(reranker_dataset(&pairs, "test", 1, 7), data, "seeded");
    }

    #[test]
    fn only_the_top_k_are_reordered() {
        let first = [0.9, 0.1, 0.8, 0.7, 0.2];
        let order = reranked_order(&first, 3, |top| {
            assert_eq!(top, [0, 2, 3]);
            Ok(vec![0.1, 0.5, 0.9])
        })
        .unwrap();
        assert_eq!(order, [3, 2, 0, 4, 1]);
    }
}
