//! Summaries over training seeds and the paired bootstrap test used to compare two training
//! conditions evaluated on the same test examples.
//!
//! The test resamples *both* sources of variation a downstream result has: the test examples
//! (drawn with replacement, the same draw for both conditions: paired) and the training seeds
//! (drawn with replacement; seed `s` of one condition is paired with seed `s` of the other).
//! Each replicate's statistic is the mean over the drawn seeds of the accuracy difference on the
//! drawn examples. The two-sided p-value is `2 · min(P*(Δ ≤ 0), P*(Δ ≥ 0))` with the add-one
//! correction `(count + 1) / (B + 1)`, capped at 1; the interval is the percentile interval.
//! (Efron & Tibshirani 1993, ch. 16; the example resampling is Koehn 2004's paired bootstrap.)

use crate::random::SplitMix64;
use serde::{Deserialize, Serialize};

/// Mean and sample standard deviation (divisor `n − 1`; 0 for fewer than two values).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanSd {
    pub mean: f64,
    pub sd: f64,
    pub n: usize,
}

/// The mean and sample standard deviation of `values` (mean 0 for none).
pub fn mean_sd(values: &[f64]) -> MeanSd {
    let n = values.len();
    if n == 0 {
        return MeanSd {
            mean: 0.0,
            sd: 0.0,
            n,
        };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = if n < 2 {
        0.0
    } else {
        let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (squares / (n - 1) as f64).sqrt()
    };
    MeanSd { mean, sd, n }
}

/// The result of [`paired_bootstrap`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedTest {
    /// The observed difference: mean over seeds of (accuracy of `treatment` − of `control`).
    pub difference: f64,
    /// 95% percentile interval of the difference.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Two-sided p-value of "no difference".
    pub p_value: f64,
    /// Bootstrap replicates drawn.
    pub replicates: usize,
}

/// Paired bootstrap over test examples and seeds.
///
/// `control[s][i]` and `treatment[s][i]` say whether seed `s`'s model got test example `i`
/// right. Both need the same number of seeds and examples. Deterministic for a given `seed`.
pub fn paired_bootstrap(
    control: &[Vec<bool>],
    treatment: &[Vec<bool>],
    replicates: usize,
    seed: u64,
) -> PairedTest {
    assert_eq!(control.len(), treatment.len(), "one run per seed in both");
    assert!(!control.is_empty(), "at least one seed");
    let examples = control[0].len();
    assert!(
        control
            .iter()
            .chain(treatment)
            .all(|run| run.len() == examples),
        "every run covers the same test examples"
    );
    // Per seed and example: +1, 0 or −1 (treatment right and control wrong, …).
    let differences: Vec<Vec<i8>> = control
        .iter()
        .zip(treatment)
        .map(|(c, t)| c.iter().zip(t).map(|(&c, &t)| t as i8 - c as i8).collect())
        .collect();
    let seeds = differences.len();
    let observed = differences
        .iter()
        .map(|d| d.iter().map(|&x| f64::from(x)).sum::<f64>() / examples.max(1) as f64)
        .sum::<f64>()
        / seeds as f64;

    let mut rng = SplitMix64(seed);
    let mut draws = Vec::with_capacity(replicates);
    let mut drawn_seeds = vec![0; seeds];
    for _ in 0..replicates {
        for s in drawn_seeds.iter_mut() {
            *s = rng.below(seeds);
        }
        let mut total = 0i64;
        for _ in 0..examples {
            let i = rng.below(examples);
            total += drawn_seeds
                .iter()
                .map(|&s| i64::from(differences[s][i]))
                .sum::<i64>();
        }
        draws.push(total as f64 / (examples.max(1) * seeds) as f64);
    }
    draws.sort_by(f64::total_cmp);
    let at_most_zero = draws.iter().filter(|&&d| d <= 0.0).count();
    let at_least_zero = draws.iter().filter(|&&d| d >= 0.0).count();
    let tail = |count: usize| (count + 1) as f64 / (replicates + 1) as f64;
    let p_value = (2.0 * tail(at_most_zero).min(tail(at_least_zero))).min(1.0);
    let quantile = |q: f64| {
        if draws.is_empty() {
            observed
        } else {
            draws[((q * draws.len() as f64) as usize).min(draws.len() - 1)]
        }
    };
    PairedTest {
        difference: observed,
        ci_low: quantile(0.025),
        ci_high: quantile(0.975),
        p_value,
        replicates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd_by_hand() {
        // mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5; 5 / 3 = 1.6667.
        let s = mean_sd(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.mean, 2.5);
        assert!((s.sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12, "{s:?}");
        assert_eq!(mean_sd(&[0.7]).sd, 0.0);
        assert_eq!(mean_sd(&[]).mean, 0.0);
        // Three seeds' accuracies: 0.80, 0.82, 0.84 → mean 0.82, sd 0.02.
        let s = mean_sd(&[0.80, 0.82, 0.84]);
        assert!((s.mean - 0.82).abs() < 1e-12 && (s.sd - 0.02).abs() < 1e-12);
    }

    fn runs(pattern: &[&str]) -> Vec<Vec<bool>> {
        pattern
            .iter()
            .map(|p| p.chars().map(|c| c == '1').collect())
            .collect()
    }

    #[test]
    fn identical_predictions_have_no_difference() {
        let a = runs(&["1100101", "1010101", "0110011"]);
        let test = paired_bootstrap(&a, &a, 999, 1);
        assert_eq!(test.difference, 0.0);
        assert_eq!((test.ci_low, test.ci_high), (0.0, 0.0));
        assert_eq!(test.p_value, 1.0);
    }

    #[test]
    fn a_uniformly_better_treatment_is_significant_at_the_floor() {
        // The treatment is right wherever the control is, and on 2 more of 10 per seed: every
        // replicate's difference is ≥ 0, so P*(Δ ≤ 0) counts only replicates that drew none of
        // the 2 examples. Each replicate draws 10 examples; P(none of 2 of 10) = 0.8^10 ≈ 0.107.
        let control = runs(&["1111100000", "1111100000", "1111100000"]);
        let treatment = runs(&["1111111000", "1111111000", "1111111000"]);
        let test = paired_bootstrap(&control, &treatment, 20_000, 7);
        assert!((test.difference - 0.2).abs() < 1e-12);
        let expected_p = 2.0 * 0.8f64.powi(10);
        assert!(
            (test.p_value - expected_p).abs() < 0.02,
            "p {} vs {expected_p}",
            test.p_value
        );
        assert!(test.ci_low >= 0.0 && test.ci_high <= 0.6, "{test:?}");
        // Swapping the roles mirrors the difference and keeps the p-value.
        let mirrored = paired_bootstrap(&treatment, &control, 20_000, 7);
        assert!((mirrored.difference + 0.2).abs() < 1e-12);
        assert!((mirrored.p_value - test.p_value).abs() < 0.02);
    }

    #[test]
    fn large_consistent_gains_reach_tiny_p_values_and_seeds_matter() {
        // 200 examples, the treatment fixes 40 per seed: p is at its floor 2/(B+1).
        let control: Vec<Vec<bool>> = (0..3)
            .map(|_| (0..200).map(|i| i < 100).collect())
            .collect();
        let treatment: Vec<Vec<bool>> = (0..3)
            .map(|_| (0..200).map(|i| i < 140).collect())
            .collect();
        let test = paired_bootstrap(&control, &treatment, 999, 3);
        assert!((test.p_value - 2.0 / 1000.0).abs() < 1e-12, "{test:?}");
        // One seed gains as much as another loses: no evidence either way.
        let mixed = paired_bootstrap(
            &runs(&["1111100000", "1111111000"]),
            &runs(&["1111111000", "1111100000"]),
            4_000,
            5,
        );
        assert_eq!(mixed.difference, 0.0);
        assert!(mixed.p_value > 0.5, "{mixed:?}");
        // Deterministic for a seed.
        assert_eq!(test, paired_bootstrap(&control, &treatment, 999, 3));
    }
}
