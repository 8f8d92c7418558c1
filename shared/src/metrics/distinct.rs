//! Distinct-n (Li et al. 2016; AutoCAD App. A.1): the number of distinct n-grams over all
//! generated texts divided by the total number of n-grams, on
//! [`crate::words::metric_tokens`]. Higher is more diverse.

use std::collections::HashSet;

use crate::words::metric_tokens;

/// Distinct-n of `texts` (0 when they have no n-gram).
pub fn distinct_n<S: AsRef<str>>(texts: &[S], n: usize) -> f64 {
    assert!(n > 0, "n-grams need n ≥ 1");
    let tokenised: Vec<Vec<String>> = texts.iter().map(|t| metric_tokens(t.as_ref())).collect();
    let mut distinct: HashSet<&[String]> = HashSet::new();
    let mut total = 0usize;
    for tokens in &tokenised {
        for gram in tokens.windows(n) {
            distinct.insert(gram);
            total += 1;
        }
    }
    if total == 0 {
        0.0
    } else {
        distinct.len() as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_over_total_by_hand() {
        let texts = ["the film was good", "the film was bad"];
        // Unigrams: 8 in all; distinct: the, film, was, good, bad = 5.
        assert_eq!(distinct_n(&texts, 1), 5.0 / 8.0);
        // Bigrams: 6 in all; distinct: the film, film was, was good, was bad = 4.
        assert_eq!(distinct_n(&texts, 2), 4.0 / 6.0);
        // Trigrams: 4 in all; distinct: the film was, film was good, film was bad = 3.
        assert_eq!(distinct_n(&texts, 3), 3.0 / 4.0);
        assert_eq!(distinct_n(&["one two"], 3), 0.0);
    }
}
