//! A bag-of-words logistic-regression baseline.
//!
//! Features: lower-cased word unigrams and bigrams seen in at least two training examples,
//! binary, each example's vector scaled to unit L2 norm. Model: multinomial logistic regression
//! with an L2 penalty, fitted by full-batch Nesterov accelerated gradient descent (the loss is
//! smooth and convex, so this converges to the unique optimum). The penalty is picked from a
//! small grid by accuracy on a held-out part of the training data, which keeps every example
//! with the counterfactuals made from it (see [`BowLogReg::fit_grouped`]).

use std::collections::HashMap;

use flipside_shared::data::{Dataset, Input, stable_hash};
use flipside_shared::metrics::{accuracy, argmax_rows};

/// One example as sorted feature indices with equal weights `1/sqrt(n)`.
struct SparseRow {
    features: Vec<u32>,
    weight: f32,
}

/// A fitted bag-of-words logistic regression.
pub struct BowLogReg {
    vocabulary: HashMap<String, u32>,
    /// `[features + 1 (bias), labels]`, row-major.
    weights: Vec<f32>,
    labels: usize,
    /// The L2 penalty that was selected.
    pub l2: f32,
}

const L2_GRID: [f32; 4] = [1e-4, 1e-3, 3e-3, 1e-2];
const ITERATIONS: usize = 300;

fn terms(input: &Input) -> Vec<String> {
    let mut terms = Vec::new();
    for text in input.texts() {
        let lower = text.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .filter(|w| !w.is_empty())
            .collect();
        terms.extend(words.iter().map(|w| w.to_string()));
        terms.extend(words.windows(2).map(|p| format!("{} {}", p[0], p[1])));
    }
    terms
}

/// Which examples are held out to select the penalty: a seeded fifth of the groups.
fn held_out_groups(train: &Dataset, seed: u64, group_of: impl Fn(&str) -> &str) -> Vec<bool> {
    train
        .examples
        .iter()
        .map(|e| stable_hash(seed, group_of(&e.id)).is_multiple_of(5))
        .collect()
}

impl BowLogReg {
    /// Fits the model; `seed` chooses the held-out part used to select the penalty.
    pub fn fit(train: &Dataset, seed: u64) -> Self {
        Self::fit_grouped(train, seed, |id| id)
    }

    /// Fits the model, holding out whole groups of examples (`group_of` an example's id) to
    /// select the penalty. An example and its counterfactual belong to one group: split apart,
    /// the held-out one is a near-copy of a training text with the other label, so the held-out
    /// score would favour the penalty that ignores the words.
    pub fn fit_grouped(train: &Dataset, seed: u64, group_of: impl Fn(&str) -> &str) -> Self {
        let labels = train.labels.len();
        let mut document_frequency: HashMap<String, usize> = HashMap::new();
        let train_terms: Vec<Vec<String>> =
            train.examples.iter().map(|e| terms(&e.input)).collect();
        for example_terms in &train_terms {
            let mut unique = example_terms.clone();
            unique.sort();
            unique.dedup();
            for term in unique {
                *document_frequency.entry(term).or_default() += 1;
            }
        }
        let mut kept: Vec<String> = document_frequency
            .into_iter()
            .filter(|(_, df)| *df >= 2)
            .map(|(t, _)| t)
            .collect();
        kept.sort();
        let vocabulary: HashMap<String, u32> = kept
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t, i as u32))
            .collect();
        let rows: Vec<SparseRow> = train_terms
            .iter()
            .map(|t| vectorise(&vocabulary, t))
            .collect();
        let gold: Vec<usize> = train.examples.iter().map(|e| e.label).collect();

        // Select the penalty on a seeded 20% of the training data, then refit on all of it.
        let held_out = held_out_groups(train, seed, group_of);
        let pick = |keep: bool| -> (Vec<&SparseRow>, Vec<usize>) {
            rows.iter()
                .zip(&gold)
                .zip(&held_out)
                .filter(|(_, h)| **h != keep)
                .map(|((r, g), _)| (r, *g))
                .unzip()
        };
        let (fit_rows, fit_gold) = pick(true);
        let (dev_rows, dev_gold) = pick(false);
        let features = vocabulary.len();
        let l2 = if dev_rows.is_empty() || fit_rows.is_empty() {
            L2_GRID[1]
        } else {
            let score = |l2: f32| {
                let w = optimise(&fit_rows, &fit_gold, features, labels, l2);
                accuracy(&predict_rows(&w, &dev_rows, labels), &dev_gold)
            };
            // Ties go to the stronger penalty (the later grid value).
            L2_GRID
                .iter()
                .map(|&l2| (l2, score(l2)))
                .fold((L2_GRID[0], f64::MIN), |best, (l2, acc)| {
                    if acc >= best.1 { (l2, acc) } else { best }
                })
                .0
        };
        let all: Vec<&SparseRow> = rows.iter().collect();
        let weights = optimise(&all, &gold, features, labels, l2);
        BowLogReg {
            vocabulary,
            weights,
            labels,
            l2,
        }
    }

    /// Predicted label ids.
    pub fn predict(&self, dataset: &Dataset) -> Vec<usize> {
        let rows: Vec<SparseRow> = dataset
            .examples
            .iter()
            .map(|e| vectorise(&self.vocabulary, &terms(&e.input)))
            .collect();
        let refs: Vec<&SparseRow> = rows.iter().collect();
        predict_rows(&self.weights, &refs, self.labels)
    }

    /// Accuracy on a dataset with the same labels.
    pub fn accuracy(&self, dataset: &Dataset) -> f64 {
        let gold: Vec<usize> = dataset.examples.iter().map(|e| e.label).collect();
        accuracy(&self.predict(dataset), &gold)
    }

    /// Number of bag-of-words features.
    pub fn features(&self) -> usize {
        self.vocabulary.len()
    }
}

fn vectorise(vocabulary: &HashMap<String, u32>, terms: &[String]) -> SparseRow {
    let mut features: Vec<u32> = terms
        .iter()
        .filter_map(|t| vocabulary.get(t).copied())
        .collect();
    features.sort_unstable();
    features.dedup();
    let weight = 1.0 / (features.len().max(1) as f32).sqrt();
    SparseRow { features, weight }
}

/// Logits `x·W + b` of each row, `[rows, labels]`.
fn logits(weights: &[f32], rows: &[&SparseRow], labels: usize) -> Vec<f32> {
    let bias = &weights[weights.len() - labels..];
    let mut out = Vec::with_capacity(rows.len() * labels);
    for row in rows {
        let mut z = bias.to_vec();
        for &f in &row.features {
            let w = &weights[f as usize * labels..(f as usize + 1) * labels];
            for (zk, wk) in z.iter_mut().zip(w) {
                *zk += row.weight * wk;
            }
        }
        out.extend(z);
    }
    out
}

fn predict_rows(weights: &[f32], rows: &[&SparseRow], labels: usize) -> Vec<usize> {
    argmax_rows(&logits(weights, rows, labels), labels)
}

/// Gradient of mean cross-entropy + `l2/2 ‖W‖²` (bias not penalised).
fn gradient(
    weights: &[f32],
    rows: &[&SparseRow],
    gold: &[usize],
    labels: usize,
    l2: f32,
) -> Vec<f32> {
    let z = logits(weights, rows, labels);
    let probs = flipside_shared::metrics::softmax_rows(&z, labels);
    let n = rows.len().max(1) as f32;
    let bias_start = weights.len() - labels;
    let mut grad: Vec<f32> = weights[..bias_start].iter().map(|w| l2 * w).collect();
    grad.resize(weights.len(), 0.0);
    for ((row, &y), p) in rows.iter().zip(gold).zip(probs.chunks(labels)) {
        for k in 0..labels {
            let residual = (p[k] - (k == y) as u8 as f32) / n;
            for &f in &row.features {
                grad[f as usize * labels + k] += residual * row.weight;
            }
            grad[bias_start + k] += residual;
        }
    }
    grad
}

/// Nesterov accelerated gradient with step `1/L`, where `L = 1 + l2` bounds the Hessian:
/// softmax cross-entropy is ½-smooth in the logits, and each row's features plus the bias
/// input have squared norm 2.
fn optimise(
    rows: &[&SparseRow],
    gold: &[usize],
    features: usize,
    labels: usize,
    l2: f32,
) -> Vec<f32> {
    let size = (features + 1) * labels;
    let step = 1.0 / (1.0 + l2);
    let mut w = vec![0f32; size];
    let mut previous = w.clone();
    for t in 0..ITERATIONS {
        let momentum = t as f32 / (t as f32 + 3.0);
        let look: Vec<f32> = w
            .iter()
            .zip(&previous)
            .map(|(wi, pi)| wi + momentum * (wi - pi))
            .collect();
        let g = gradient(&look, rows, gold, labels, l2);
        previous = std::mem::replace(
            &mut w,
            look.iter().zip(&g).map(|(l, gi)| l - step * gi).collect(),
        );
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use flipside_shared::data::{Example, LabelVocab};

    fn dataset(rows: &[(&str, usize)]) -> Dataset {
        Dataset {
            name: "toy".into(),
            labels: LabelVocab::new(vec!["neg".into(), "pos".into()]),
            examples: rows
                .iter()
                .enumerate()
                .map(|(i, (text, label))| Example {
                    id: i.to_string(),
                    input: Input::Text {
                        text: text.to_string(),
                    },
                    label: *label,
                })
                .collect(),
        }
    }

    #[test]
    fn held_out_examples_keep_their_group() {
        let ids: Vec<String> = (0..200)
            .flat_map(|i| [format!("{i}"), format!("{i}/cf")])
            .collect();
        let rows: Vec<(&str, usize)> = ids.iter().map(|id| (id.as_str(), 0)).collect();
        let mut train = dataset(&rows);
        for (example, id) in train.examples.iter_mut().zip(&ids) {
            example.id = id.clone();
        }
        fn group_of(id: &str) -> &str {
            id.trim_end_matches("/cf")
        }
        let grouped = held_out_groups(&train, 7, group_of);
        assert!(grouped.chunks(2).all(|pair| pair[0] == pair[1]));
        let held = grouped.iter().filter(|&&h| h).count();
        assert!((50..110).contains(&held), "{held} of 400 held out");
        // By id alone, some pairs are split: the leak the groups close.
        let by_id = held_out_groups(&train, 7, |id| id);
        assert!(by_id.chunks(2).any(|pair| pair[0] != pair[1]));
    }

    #[test]
    fn terms_are_lowercased_unigrams_and_bigrams() {
        let input = Input::Text {
            text: "Great film, isn't it".into(),
        };
        assert_eq!(
            terms(&input),
            vec![
                "great",
                "film",
                "isn't",
                "it",
                "great film",
                "film isn't",
                "isn't it"
            ]
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let data = dataset(&[
            ("good good fun", 1),
            ("bad dull", 0),
            ("good dull", 1),
            ("bad fun", 0),
        ]);
        let terms: Vec<Vec<String>> = data.examples.iter().map(|e| terms(&e.input)).collect();
        let vocabulary: HashMap<String, u32> = ["good", "bad", "dull", "fun"]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let rows: Vec<SparseRow> = terms.iter().map(|t| vectorise(&vocabulary, t)).collect();
        let refs: Vec<&SparseRow> = rows.iter().collect();
        let gold = [1, 0, 1, 0];
        let w: Vec<f32> = (0..10).map(|i| (i as f32 * 0.37).sin() * 0.5).collect();
        let loss = |w: &[f32]| -> f64 {
            let z = logits(w, &refs, 2);
            let p = flipside_shared::metrics::softmax_rows(&z, 2);
            let ce: f64 = gold
                .iter()
                .enumerate()
                .map(|(i, &y)| -(p[i * 2 + y] as f64).ln())
                .sum::<f64>()
                / 4.0;
            ce + 0.5 * 0.1 * w[..8].iter().map(|x| (x * x) as f64).sum::<f64>()
        };
        let g = gradient(&w, &refs, &gold, 2, 0.1);
        for i in 0..w.len() {
            let (mut up, mut down) = (w.clone(), w.clone());
            up[i] += 1e-3;
            down[i] -= 1e-3;
            let numeric = (loss(&up) - loss(&down)) / 2e-3;
            assert!(
                (numeric - g[i] as f64).abs() < 1e-3,
                "coordinate {i}: {numeric} vs {}",
                g[i]
            );
        }
    }

    #[test]
    fn learns_a_separable_toy_task() {
        let mut rows = Vec::new();
        for i in 0..40 {
            rows.push((format!("a wonderful film number {i}"), 1));
            rows.push((format!("a terrible film number {i}"), 0));
        }
        let refs: Vec<(&str, usize)> = rows.iter().map(|(t, l)| (t.as_str(), *l)).collect();
        let model = BowLogReg::fit(&dataset(&refs), 0);
        let test = dataset(&[
            ("wonderful", 1),
            ("terrible", 0),
            ("truly wonderful acting", 1),
        ]);
        assert_eq!(model.predict(&test), vec![1, 0, 1]);
    }
}
