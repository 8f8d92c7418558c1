//! Sentence BLEU-4 (Papineni et al. 2002) of an edit against its original: CORE's "self-BLEU"
//! (§5.3), where high means the edit copies the original.
//!
//! Tokens are [`crate::words::metric_tokens`] (lower-cased words and punctuation). Uniform
//! weights over 1- to 4-grams, clipped counts, the brevity penalty, and Chen & Cherry's
//! smoothing method 1 as in NLTK's `sentence_bleu(..., smoothing_function=method1)`: an n-gram
//! precision with no match counts as 0.1 / (number of hypothesis n-grams, at least 1). As in
//! NLTK, no unigram match gives 0. The unit tests reproduce NLTK 3.9's values.

use std::collections::HashMap;

use crate::words::metric_tokens;

const MAX_N: usize = 4;
const EPSILON: f64 = 0.1;

/// BLEU-4 of `hypothesis` against one `reference`, both already tokenised.
pub fn sentence_bleu(hypothesis: &[String], reference: &[String]) -> f64 {
    if hypothesis.is_empty() || reference.is_empty() {
        return 0.0;
    }
    let mut log_sum = 0.0;
    for n in 1..=MAX_N {
        let (matches, total) = clipped_matches(hypothesis, reference, n);
        if n == 1 && matches == 0 {
            return 0.0;
        }
        let precision = if matches == 0 {
            EPSILON / total.max(1) as f64
        } else {
            matches as f64 / total as f64
        };
        log_sum += precision.ln() / MAX_N as f64;
    }
    let (c, r) = (hypothesis.len() as f64, reference.len() as f64);
    let brevity = if c > r { 1.0 } else { (1.0 - r / c).exp() };
    brevity * log_sum.exp()
}

/// BLEU-4 of an edited text against its original text.
pub fn self_bleu(edited: &str, original: &str) -> f64 {
    sentence_bleu(&metric_tokens(edited), &metric_tokens(original))
}

/// Hypothesis n-grams found in the reference (each counted at most as often as it occurs
/// there), and the number of hypothesis n-grams.
pub(super) fn clipped_matches(
    hypothesis: &[String],
    reference: &[String],
    n: usize,
) -> (usize, usize) {
    let reference_counts = ngram_counts(reference, n);
    let hypothesis_counts = ngram_counts(hypothesis, n);
    let matches = hypothesis_counts
        .iter()
        .map(|(gram, &count)| count.min(reference_counts.get(gram).copied().unwrap_or(0)))
        .sum();
    (matches, hypothesis.len().saturating_sub(n - 1))
}

fn ngram_counts(tokens: &[String], n: usize) -> HashMap<&[String], usize> {
    let mut counts: HashMap<&[String], usize> = HashMap::new();
    for gram in tokens.windows(n) {
        *counts.entry(gram).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bleu(hypothesis: &str, reference: &str) -> f64 {
        let split = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        sentence_bleu(&split(hypothesis), &split(reference))
    }

    #[test]
    fn matches_hand_worked_values_and_nltk() {
        // p = 4/5, 2/4, 1/3, (0.1)/2; equal lengths: (0.8·0.5·(1/3)·0.05)^(1/4).
        let value = bleu("the acting was wooden .", "the acting was superb .");
        assert!((value - 0.285_744_042_969_88).abs() < 1e-12, "{value}");
        // p = 3/4, 2/3, 1/2, 0.1; brevity exp(1 − 7/4).
        let value = bleu(
            "the acting was wooden",
            "the acting was really very superb .",
        );
        assert!((value - 0.187_829_646_321_763_1).abs() < 1e-12, "{value}");
        // Shorter than 4 tokens: empty n-gram sets count as 0.1 / 1.
        let value = bleu("a b", "a b c");
        assert!((value - 0.191_801_835_541_645_04).abs() < 1e-12, "{value}");
        assert_eq!(
            bleu("the acting was superb .", "the acting was superb ."),
            1.0
        );
        assert_eq!(bleu("c", "a b"), 0.0);
    }

    #[test]
    fn self_bleu_tokenises_and_lower_cases() {
        let value = self_bleu("The acting was wooden.", "the acting was SUPERB.");
        assert!((value - 0.285_744_042_969_88).abs() < 1e-12, "{value}");
    }
}
