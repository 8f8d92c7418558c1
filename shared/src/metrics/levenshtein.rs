//! Closeness of an edit to its original: token-level Levenshtein distance (insertions,
//! deletions and substitutions of [`crate::words::metric_tokens`], each costing 1) divided by
//! the longer of the two token sequences, so 0 is identical and 1 shares nothing in place.
//! CORE Table 6 and MiCE report this kind of normalised distance (lower is closer).

use crate::words::metric_tokens;

/// The edit distance between two token sequences.
pub fn levenshtein<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(x != y);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// Token Levenshtein distance between `edited` and `original`, over the longer length.
pub fn normalised_levenshtein(edited: &str, original: &str) -> f64 {
    let (a, b) = (metric_tokens(edited), metric_tokens(original));
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 0.0;
    }
    levenshtein(&a, &b) as f64 / longest as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_edits_by_hand() {
        assert_eq!(levenshtein(b"kitten", b"sitting"), 3);
        assert_eq!(levenshtein(b"", b"abc"), 3);
        assert_eq!(levenshtein(b"flaw", b"lawn"), 2);
        assert_eq!(levenshtein::<u8>(&[], &[]), 0);
    }

    #[test]
    fn normalises_by_the_longer_text() {
        // 5 tokens each, one substitution.
        assert_eq!(
            normalised_levenshtein("The acting was wooden.", "the acting was superb."),
            0.2
        );
        // "the film was not good ." vs "the film was good ." : one insertion over 6 tokens.
        let value = normalised_levenshtein("The film was not good.", "The film was good.");
        assert!((value - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(normalised_levenshtein("", ""), 0.0);
        assert_eq!(normalised_levenshtein("a b", "c d"), 1.0);
    }
}
