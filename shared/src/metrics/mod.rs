//! Metrics: classification accuracy here; the counterfactual metrics the papers report (BLEU,
//! ROUGE, Levenshtein closeness, distinct-n, token–label z-statistics, perturbation types) and
//! the downstream experiments' seed summaries and significance test in the submodules. Every
//! text metric but ROUGE (which tokenises as `rouge-score` does) uses
//! [`crate::words::metric_tokens`].

pub mod agreement;
pub mod bleu;
pub mod distinct;
pub mod levenshtein;
pub mod perturbation;
pub mod rouge;
pub mod significance;
pub mod zstat;

/// Fraction of positions where `predicted` equals `gold` (0 for empty input).
pub fn accuracy(predicted: &[usize], gold: &[usize]) -> f64 {
    assert_eq!(
        predicted.len(),
        gold.len(),
        "prediction and gold lengths differ"
    );
    if gold.is_empty() {
        return 0.0;
    }
    let correct = predicted.iter().zip(gold).filter(|(p, g)| p == g).count();
    correct as f64 / gold.len() as f64
}

/// Index of the largest value of each row of a row-major `[rows, width]` matrix.
pub fn argmax_rows(values: &[f32], width: usize) -> Vec<usize> {
    values
        .chunks(width)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                    if v > best.1 { (i, v) } else { best }
                })
                .0
        })
        .collect()
}

/// Row-wise softmax of a row-major `[rows, width]` matrix.
pub fn softmax_rows(values: &[f32], width: usize) -> Vec<f32> {
    values
        .chunks(width)
        .flat_map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = row.iter().map(|v| (v - max).exp()).collect();
            let sum: f32 = exps.iter().sum();
            exps.into_iter().map(move |e| e / sum)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_counts_matches() {
        assert_eq!(accuracy(&[0, 1, 1, 0], &[0, 1, 0, 0]), 0.75);
        assert_eq!(accuracy(&[], &[]), 0.0);
    }

    #[test]
    fn argmax_and_softmax_rows() {
        let logits = [1.0, 3.0, 2.0, 0.0, 0.0, -1.0];
        assert_eq!(argmax_rows(&logits, 3), vec![1, 0]);
        let probs = softmax_rows(&[0.0, 0.0, (3.0f32).ln(), 0.0], 2);
        let expected = [0.5, 0.5, 0.75, 0.25];
        for (p, e) in probs.iter().zip(expected) {
            assert!((p - e).abs() < 1e-6, "{p} vs {e}");
        }
    }
}
