//! ROUGE-1, ROUGE-2 and ROUGE-L (Lin 2004) of a text against one reference: LASS's
//! counterfactual reconstruction score (Table 4).
//!
//! Unlike the other text metrics, ROUGE tokenises as Google's `rouge-score` package does by
//! default (the implementation papers report): lower-case, every run of characters other than
//! ASCII letters and digits is a separator, no stemming. ROUGE-N counts clipped n-gram matches;
//! ROUGE-L is the longest common subsequence of the two token lists. The unit tests reproduce
//! `rouge-score` 0.1.2's values.

use super::bleu::clipped_matches;

/// Precision, recall and F1 of one ROUGE variant.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RougeScore {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

impl RougeScore {
    fn new(matches: usize, hypothesis: usize, reference: usize) -> Self {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (precision, recall) = (ratio(matches, hypothesis), ratio(matches, reference));
        let f1 = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        Self {
            precision,
            recall,
            f1,
        }
    }
}

/// ROUGE-1, ROUGE-2 and ROUGE-L of one hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rouge {
    pub rouge1: RougeScore,
    pub rouge2: RougeScore,
    pub rouge_l: RougeScore,
}

/// `rouge-score`'s default tokens of `text`.
pub fn rouge_tokens(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_string)
        .collect()
}

/// ROUGE-1, -2 and -L of `hypothesis` against `reference`.
pub fn rouge(hypothesis: &str, reference: &str) -> Rouge {
    let (hypothesis, reference) = (rouge_tokens(hypothesis), rouge_tokens(reference));
    Rouge {
        rouge1: rouge_n(&hypothesis, &reference, 1),
        rouge2: rouge_n(&hypothesis, &reference, 2),
        rouge_l: RougeScore::new(
            longest_common_subsequence(&hypothesis, &reference),
            hypothesis.len(),
            reference.len(),
        ),
    }
}

/// ROUGE-N of token lists: hypothesis n-grams found in the reference, each counted at most as
/// often as it occurs in both.
pub fn rouge_n(hypothesis: &[String], reference: &[String], n: usize) -> RougeScore {
    let (matches, hypothesis_grams) = clipped_matches(hypothesis, reference, n);
    RougeScore::new(
        matches,
        hypothesis_grams,
        reference.len().saturating_sub(n - 1),
    )
}

/// Length of the longest common subsequence of `a` and `b` (one row of the table at a time).
fn longest_common_subsequence<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (precision, recall, F1) of ROUGE-1, -2, -L from `rouge-score` 0.1.2's
    /// `RougeScorer(["rouge1", "rouge2", "rougeL"]).score(reference, hypothesis)`.
    #[allow(clippy::type_complexity)]
    const REFERENCE: &[(&str, &str, [(f64, f64, f64); 3])] = &[
        (
            "the acting was wooden .",
            "the acting was superb .",
            [
                (0.75, 0.75, 0.75),
                (2.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0),
                (0.75, 0.75, 0.75),
            ],
        ),
        (
            "Maybe one of the most boring Ninja-movies ever made.",
            "Maybe one of the most entertaining Ninja-movies ever made.",
            [
                (0.9, 0.9, 0.9),
                (7.0 / 9.0, 7.0 / 9.0, 7.0 / 9.0),
                (0.9, 0.9, 0.9),
            ],
        ),
        (
            "the the the cat",
            "the cat sat on the mat",
            [
                (0.75, 0.5, 0.6),
                (1.0 / 3.0, 0.2, 0.25),
                (0.5, 1.0 / 3.0, 0.4),
            ],
        ),
        (
            "Café au lait, 10/10!",
            "cafe au lait 10 10",
            [(0.8, 0.8, 0.8), (0.75, 0.75, 0.75), (0.8, 0.8, 0.8)],
        ),
        ("", "something", [(0.0, 0.0, 0.0); 3]),
        (
            "a b c d e f",
            "f e d c b a",
            [
                (1.0, 1.0, 1.0),
                (0.0, 0.0, 0.0),
                (1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0),
            ],
        ),
    ];

    #[test]
    fn reproduces_rouge_score() {
        for (hypothesis, reference, expected) in REFERENCE {
            let got = rouge(hypothesis, reference);
            for (score, (p, r, f)) in [got.rouge1, got.rouge2, got.rouge_l].iter().zip(expected) {
                let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
                assert!(
                    close(score.precision, *p) && close(score.recall, *r) && close(score.f1, *f),
                    "{hypothesis:?} vs {reference:?}: {score:?}, expected ({p}, {r}, {f})"
                );
            }
        }
    }

    #[test]
    fn tokenises_as_rouge_score() {
        assert_eq!(
            rouge_tokens("Café au lait, 10/10! Don't"),
            ["caf", "au", "lait", "10", "10", "don", "t"]
        );
    }
}
