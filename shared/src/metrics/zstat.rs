//! Token–label z-statistics (Gardner et al. 2021, "Competency problems"; CORE Fig. 3 and
//! Table 14): in a dataset where no single word is informative about the label, the share of
//! a word's examples that carry a label stays near chance.
//!
//! For each token (lower-cased word of [`crate::words::metric_tokens`], punctuation excluded)
//! seen in `n` examples (presence, not frequency), of which `k` carry label `y`:
//! `p̂ = k / n`, `z = (p̂ − p₀) / sqrt(p₀ (1 − p₀) / n)` with `p₀ = 1 / number of labels`. A
//! token's reported label is the one with the largest `z`. It is significant when `z` exceeds
//! the two-sided Bonferroni threshold `Φ⁻¹(1 − α / (2 m))` over the `m` tokens tested
//! (α = 0.01 by default), i.e. when `p̂` lies above `p₀ + z* sqrt(p₀ (1 − p₀) / n)`: the curve
//! drawn by [`plot_svg`].

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use serde::Serialize;

use crate::words::{is_word, metric_tokens};

/// One token's statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenStat {
    pub token: String,
    /// Examples containing the token.
    pub count: usize,
    /// The label with the largest z.
    pub label: usize,
    /// Share of the token's examples with that label.
    pub p_hat: f64,
    pub z: f64,
    pub significant: bool,
}

/// The statistics of every token and the threshold they were tested against.
#[derive(Debug, Clone, Serialize)]
pub struct ZStatistics {
    pub tokens: Vec<TokenStat>,
    pub labels: usize,
    pub alpha: f64,
    /// `z*`, the Bonferroni-corrected critical value.
    pub threshold: f64,
}

impl ZStatistics {
    /// The `p̂` above which a token seen `count` times is significant.
    pub fn p_hat_threshold(&self, count: usize) -> f64 {
        let p0 = 1.0 / self.labels as f64;
        p0 + self.threshold * (p0 * (1.0 - p0) / count as f64).sqrt()
    }

    /// Tokens over the threshold, most significant first.
    pub fn significant(&self) -> Vec<&TokenStat> {
        let mut tokens: Vec<_> = self.tokens.iter().filter(|t| t.significant).collect();
        tokens.sort_by(|a, b| b.z.total_cmp(&a.z));
        tokens
    }
}

/// z-statistics of the tokens of `texts` with `labels` (ids below `num_labels`), counting tokens
/// seen in at least `min_count` examples.
pub fn z_statistics<S: AsRef<str>>(
    texts: &[S],
    labels: &[usize],
    num_labels: usize,
    min_count: usize,
    alpha: f64,
) -> ZStatistics {
    assert_eq!(texts.len(), labels.len(), "one label per text");
    assert!(num_labels >= 2, "z-statistics need at least two labels");
    let mut counts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (text, &label) in texts.iter().zip(labels) {
        let present: HashSet<String> = metric_tokens(text.as_ref())
            .into_iter()
            .filter(|t| is_word(t))
            .collect();
        for token in present {
            counts.entry(token).or_insert_with(|| vec![0; num_labels])[label] += 1;
        }
    }
    counts.retain(|_, c| c.iter().sum::<usize>() >= min_count.max(1));
    let tests = counts.len().max(1) as f64;
    let threshold = inverse_normal_cdf(1.0 - alpha / (2.0 * tests));
    let p0 = 1.0 / num_labels as f64;
    let tokens = counts
        .into_iter()
        .map(|(token, per_label)| {
            let n: usize = per_label.iter().sum();
            let (label, k) = per_label
                .iter()
                .enumerate()
                .max_by_key(|&(_, k)| *k)
                .map(|(label, &k)| (label, k))
                .unwrap_or_default();
            let p_hat = k as f64 / n as f64;
            let z = (p_hat - p0) / (p0 * (1.0 - p0) / n as f64).sqrt();
            TokenStat {
                token,
                count: n,
                label,
                p_hat,
                z,
                significant: z > threshold,
            }
        })
        .collect();
    ZStatistics {
        tokens,
        labels: num_labels,
        alpha,
        threshold,
    }
}

/// The standard normal CDF, from the complementary error function.
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// `Φ⁻¹(p)` by bisection on [`normal_cdf`] (to 1e-12).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "probability out of (0, 1): {p}");
    let (mut low, mut high) = (-40.0f64, 40.0f64);
    while high - low > 1e-12 {
        let mid = 0.5 * (low + high);
        if normal_cdf(mid) < p {
            low = mid;
        } else {
            high = mid;
        }
    }
    0.5 * (low + high)
}

/// The complementary error function, to about 1e-13 relative error: the everywhere-positive
/// series `erf(x) = 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3···(2n+1))` below 3, and the continued
/// fraction `erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))` above.
fn erfc(x: f64) -> f64 {
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 3.0 {
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= 2.0 * x * x / f64::from(2 * n + 1);
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        return 1.0 - two_over_sqrt_pi * (-x * x).exp() * sum;
    }
    let mut fraction = x;
    for k in (1..=80).rev() {
        fraction = x + f64::from(k) / 2.0 / fraction;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * fraction)
}

/// The plot of CORE's Fig. 3 as SVG: `p̂` against the token count (log scale), the
/// significance curve, and the most significant tokens named. `label_names` names the labels.
pub fn plot_svg(stats: &ZStatistics, label_names: &[String], title: &str) -> String {
    let (width, height, margin) = (720.0, 480.0, 60.0);
    let max_count = stats
        .tokens
        .iter()
        .map(|t| t.count)
        .max()
        .unwrap_or(10)
        .max(10) as f64;
    let log_max = max_count.log10().ceil();
    let p0 = 1.0 / stats.labels as f64;
    let x = |count: f64| margin + (width - 1.5 * margin) * count.max(1.0).log10() / log_max;
    let y = |p: f64| height - margin - (height - 1.8 * margin) * (p - p0) / (1.0 - p0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="24" font-size="14" text-anchor="middle">{}</text>"#,
        width / 2.0,
        crate::svg::escape(title)
    );
    // Axes, ticks and labels.
    let (x0, y0) = (margin, height - margin);
    let _ = writeln!(
        svg,
        r#"<path d="M{x0},{} V{y0} H{}" stroke="black" fill="none"/>"#,
        margin * 0.8,
        width - margin / 2.0
    );
    for decade in 0..=log_max as i32 {
        let count = 10f64.powi(decade);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{count}</text>"#,
            x(count),
            y0 + 16.0
        );
    }
    for step in 0..=4 {
        let p = p0 + (1.0 - p0) * f64::from(step) / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{p:.2}</text>"#,
            x0 - 6.0,
            y(p) + 4.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">examples containing the token (log scale)</text>"#,
        width / 2.0,
        height - 18.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">p̂(label | token)</text>"#,
        height / 2.0
    );
    // The significance curve.
    let mut path = String::new();
    for i in 0..=200 {
        let count = 10f64.powf(log_max * f64::from(i) / 200.0);
        let p = stats.p_hat_threshold(count.ceil() as usize).min(1.0);
        let _ = write!(
            path,
            "{}{:.1},{:.1}",
            if i == 0 { "M" } else { " L" },
            x(count),
            y(p)
        );
    }
    let _ = writeln!(
        svg,
        r##"<path d="{path}" stroke="#1f5fbf" stroke-width="2" fill="none"/>"##
    );
    // Tokens, significant ones in red; the ten most significant are named.
    let named: HashSet<&str> = stats
        .significant()
        .iter()
        .take(10)
        .map(|t| t.token.as_str())
        .collect();
    for token in &stats.tokens {
        let colour = if token.significant {
            "#c0392b"
        } else {
            "#888888"
        };
        let (cx, cy) = (x(token.count as f64), y(token.p_hat));
        let _ = writeln!(
            svg,
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="2.5" fill="{colour}" fill-opacity="0.6"/>"##
        );
        if named.contains(token.token.as_str()) {
            let label = label_names
                .get(token.label)
                .map_or(String::new(), |l| format!(" ({l})"));
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}">{}{}</text>"#,
                cx + 4.0,
                cy - 4.0,
                crate::svg::escape(&token.token),
                crate::svg::escape(&label)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles_match_tables() {
        // Reference values from scipy.stats.norm.
        assert!((inverse_normal_cdf(0.975) - 1.959_963_984_540_054).abs() < 1e-9);
        assert!((inverse_normal_cdf(0.995) - 2.575_829_303_548_900_4).abs() < 1e-9);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-15);
        assert!((normal_cdf(-1.0) - 0.158_655_253_931_457_05).abs() < 1e-13);
        assert!((normal_cdf(-5.0) - 2.866_515_718_791_933e-7).abs() < 1e-18);
        assert!((normal_cdf(4.0) - 0.999_968_328_758_166_9).abs() < 1e-13);
    }

    #[test]
    fn z_values_match_hand_computation() {
        let texts = ["good film", "good plot!", "bad film", "good acting"];
        let stats = z_statistics(&texts, &[1, 1, 0, 0], 2, 1, 0.01);
        let find = |t: &str| stats.tokens.iter().find(|s| s.token == t).unwrap();
        // "good": in 3 examples, 2 positive: p̂ = 2/3, z = (2/3 − 1/2) / sqrt(1/4 / 3) = 1/√3.
        let good = find("good");
        assert_eq!((good.count, good.label), (3, 1));
        assert!((good.z - 1.0 / 3f64.sqrt()).abs() < 1e-12);
        // "film": 1 of 2 each way: z = 0.
        assert_eq!(find("film").z, 0.0);
        // Punctuation is not a token; 5 tokens tested: z* = Φ⁻¹(1 − 0.01 / 10).
        assert!(stats.tokens.iter().all(|t| t.token != "!"));
        assert_eq!(stats.tokens.len(), 5);
        assert!((stats.threshold - inverse_normal_cdf(1.0 - 0.01 / 10.0)).abs() < 1e-12);
        assert!(stats.significant().is_empty());
    }

    #[test]
    fn a_word_always_with_one_label_becomes_significant_with_enough_examples() {
        let mut texts = Vec::new();
        let mut labels = Vec::new();
        for i in 0..60 {
            texts.push(format!("great movie number{i}"));
            labels.push(1);
            texts.push(format!("a movie number{i}"));
            labels.push(0);
        }
        let stats = z_statistics(&texts, &labels, 2, 5, 0.01);
        let significant: Vec<_> = stats
            .significant()
            .iter()
            .map(|t| t.token.clone())
            .collect();
        // "great" (60/60 positive) and "a" (60/60 negative); "movie" is balanced.
        assert_eq!(significant.len(), 2, "{significant:?}");
        let svg = plot_svg(&stats, &["negative".into(), "positive".into()], "test");
        assert!(svg.starts_with("<svg") && svg.contains("great (positive)"));
    }
}
