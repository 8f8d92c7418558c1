//! How well a Dis-AE rewrites held-out pairs (LASS's Table 4 analogue): each side of a pair
//! (both directions) is decoded three ways with LASS's beam search and scored with ROUGE F1
//! against the side it should become, and the outputs' perplexity is measured under the
//! fluency model.
//!
//! - reconstruction: its own content and sentiment, against itself (the autoencoder);
//! - counterfactual reconstruction: its content with the other side's sentiment, against the
//!   other side (`L_cf`'s task; the paper's Table 4 metric);
//! - label reproduction: its content with the other label's vector, against the other side —
//!   what `generate --method lass` decodes.
//!
//! The baseline a rewrite must beat is the source itself, copied unchanged, against the other
//! side.

use std::path::Path;

use anyhow::Result;
use burn::tensor::backend::Backend;
use flipside_shared::metrics::rouge::{Rouge, rouge};
use flipside_shared::models::dis_ae::reproduce::{
    Reproducer, Reproduction, TargetSentiment, lass_decoding,
};
use serde::Serialize;

use super::model::load_reproducer;
use super::train::LabelledPair;
use crate::compute::Compute;
use crate::llm::{Fluency, SCORED_TOGETHER};

/// Texts decoded together.
const BATCH: usize = 32;
/// Outputs shorter than this many characters get no perplexity (as in LASS's Table 4: the
/// perplexity of very short texts is erratic).
const MIN_PERPLEXITY_CHARS: usize = 10;

/// Mean ROUGE F1 (×100, as papers print it) of one way of decoding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RougeMeans {
    pub rouge1: f64,
    pub rouge2: f64,
    pub rouge_l: f64,
}

impl RougeMeans {
    fn of(scores: &[Rouge]) -> Self {
        let mean = |f: fn(&Rouge) -> f64| {
            100.0 * scores.iter().map(f).sum::<f64>() / scores.len().max(1) as f64
        };
        Self {
            rouge1: mean(|r| r.rouge1.f1),
            rouge2: mean(|r| r.rouge2.f1),
            rouge_l: mean(|r| r.rouge_l.f1),
        }
    }
}

/// The perplexities of one way of decoding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerplexitySummary {
    /// Outputs scored (those of at least `MIN_PERPLEXITY_CHARS` characters).
    pub scored: usize,
    pub mean: f64,
    pub quartiles: [f64; 3],
    /// Share of scored outputs at or under the filter's threshold.
    pub passing: f64,
}

impl PerplexitySummary {
    fn of(mut values: Vec<f64>, threshold: f64) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let quantile = |q: f64| {
            let at = q * (n - 1) as f64;
            let (low, high) = (at.floor() as usize, at.ceil() as usize);
            values[low] + (values[high] - values[low]) * (at - low as f64)
        };
        Some(Self {
            scored: n,
            mean: values.iter().sum::<f64>() / n as f64,
            quartiles: [quantile(0.25), quantile(0.5), quantile(0.75)],
            passing: values.iter().filter(|&&v| v <= threshold).count() as f64 / n as f64,
        })
    }
}

/// One way of decoding, scored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodingScores {
    pub rouge: RougeMeans,
    /// Under the fluency model (none without one).
    pub perplexity: Option<PerplexitySummary>,
    /// Decoded texts equal (ignoring case) to the side they should become.
    pub exact: f64,
}

/// What [`evaluate_pairs`] measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairEvaluation {
    pub pairs: usize,
    pub fluency_model: Option<String>,
    pub max_perplexity: f64,
    /// Each side unchanged against the other side.
    pub copy: RougeMeans,
    pub reconstruction: DecodingScores,
    pub counterfactual: DecodingScores,
    pub label: DecodingScores,
}

/// One side of a pair turned into the other: the source's content, the target to become.
struct Case<'a> {
    source: &'a str,
    target: &'a str,
    target_label: &'a str,
}

/// Decodes both directions of every pair three ways (see the module documentation) and scores
/// them; `fluency` adds perplexities and the share under `max_perplexity`. `progress` is told
/// of each text decoded or scored (3 decodings, and 3 perplexities with `fluency`, per side).
pub fn evaluate_pairs<'p, B: Backend>(
    reproducer: &Reproducer<B>,
    pairs: &'p [LabelledPair],
    fluency: Option<&dyn Fluency>,
    max_perplexity: f64,
    progress: &mut dyn FnMut(usize),
) -> Result<PairEvaluation> {
    let cases: Vec<Case<'p>> = pairs
        .iter()
        .flat_map(|p| {
            [
                Case {
                    source: &p.text,
                    target: &p.counterfactual,
                    target_label: &p.counterfactual_label,
                },
                Case {
                    source: &p.counterfactual,
                    target: &p.text,
                    target_label: &p.label,
                },
            ]
        })
        .collect();
    let settings = lass_decoding();
    let (mut reconstructed, mut counterfactual, mut labelled) = (vec![], vec![], vec![]);
    for batch in cases.chunks(BATCH) {
        let sources: Vec<&str> = batch.iter().map(|c| c.source).collect();
        let targets: Vec<&str> = batch.iter().map(|c| c.target).collect();
        let decode = |sentiment| reproducer.reproduce(&sources, sentiment, &settings);
        reconstructed.extend(decode(TargetSentiment::Parents(&sources))?);
        counterfactual.extend(decode(TargetSentiment::Parents(&targets))?);
        labelled.extend(reproduce_with_labels(reproducer, batch)?);
        progress(3 * batch.len());
    }
    let mut score = |outputs: &[Reproduction], against: fn(&Case<'p>) -> &'p str| {
        score_outputs(outputs, &cases, against, fluency, max_perplexity, progress)
    };
    Ok(PairEvaluation {
        pairs: pairs.len(),
        fluency_model: fluency.map(|f| f.model().to_string()),
        max_perplexity,
        copy: RougeMeans::of(
            &cases
                .iter()
                .map(|c| rouge(c.source, c.target))
                .collect::<Vec<_>>(),
        ),
        reconstruction: score(&reconstructed, |c| c.source)?,
        counterfactual: score(&counterfactual, |c| c.target)?,
        label: score(&labelled, |c| c.target)?,
    })
}

/// ROUGE and exact matches of `outputs` (one per case) against `against(case)`, and their
/// perplexities under `fluency`.
fn score_outputs<'p>(
    outputs: &[Reproduction],
    cases: &[Case<'p>],
    against: fn(&Case<'p>) -> &'p str,
    fluency: Option<&dyn Fluency>,
    max_perplexity: f64,
    progress: &mut dyn FnMut(usize),
) -> Result<DecodingScores> {
    let mut rouges = Vec::with_capacity(cases.len());
    let mut exact = 0;
    for (output, case) in outputs.iter().zip(cases) {
        let (text, reference) = (output.text.trim(), against(case).trim());
        rouges.push(rouge(text, reference));
        exact += usize::from(text.to_lowercase() == reference.to_lowercase());
    }
    let perplexity = match fluency {
        Some(fluency) => {
            let mut values = Vec::new();
            for chunk in outputs.chunks(SCORED_TOGETHER) {
                let texts: Vec<&str> = chunk
                    .iter()
                    .map(|output| output.text.trim())
                    .filter(|text| text.chars().count() >= MIN_PERPLEXITY_CHARS)
                    .collect();
                for perplexity in fluency.perplexities(&texts) {
                    values.push(perplexity?);
                }
                progress(chunk.len());
            }
            PerplexitySummary::of(values, max_perplexity)
        }
        None => None,
    };
    Ok(DecodingScores {
        rouge: RougeMeans::of(&rouges),
        perplexity,
        exact: exact as f64 / cases.len().max(1) as f64,
    })
}

/// [`evaluate_pairs`] with the Dis-AE in `dir`, showing progress.
pub fn evaluate_dis_ae<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    pairs: &[LabelledPair],
    fluency: Option<&dyn Fluency>,
    max_perplexity: f64,
) -> Result<PairEvaluation> {
    let reproducer = load_reproducer::<B>(dir, &compute.device)?;
    let per_side = if fluency.is_some() { 6 } else { 3 };
    let bar = crate::progress::items(per_side * 2 * pairs.len() as u64, "texts decoded or scored");
    let evaluation = evaluate_pairs(&reproducer, pairs, fluency, max_perplexity, &mut |n| {
        bar.inc(n as u64)
    });
    bar.finish_and_clear();
    evaluation
}

/// Each case's source content with its target label's vector, in case order (one decoding per
/// label present).
fn reproduce_with_labels<B: Backend>(
    reproducer: &Reproducer<B>,
    cases: &[Case],
) -> Result<Vec<Reproduction>> {
    let mut outputs: Vec<Option<Reproduction>> = vec![None; cases.len()];
    let mut labels: Vec<&str> = cases.iter().map(|c| c.target_label).collect();
    labels.sort_unstable();
    labels.dedup();
    for label in labels {
        let rows: Vec<usize> = (0..cases.len())
            .filter(|&i| cases[i].target_label == label)
            .collect();
        let sources: Vec<&str> = rows.iter().map(|&i| cases[i].source).collect();
        let decoded =
            reproducer.reproduce(&sources, TargetSentiment::Label(label), &lass_decoding())?;
        for (row, output) in rows.into_iter().zip(decoded) {
            outputs[row] = Some(output);
        }
    }
    Ok(outputs
        .into_iter()
        .map(|o| o.expect("every row decoded"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perplexity_summary_has_interpolated_quartiles_and_the_passing_share() {
        let summary =
            PerplexitySummary::of(vec![400.0, 100.0, 50.0, 200.0, 150.0], 125.0).expect("values");
        assert_eq!(summary.scored, 5);
        assert_eq!(summary.quartiles, [100.0, 150.0, 200.0]);
        assert!((summary.mean - 180.0).abs() < 1e-12);
        assert!((summary.passing - 0.4).abs() < 1e-12);
        let even = PerplexitySummary::of(vec![1.0, 2.0, 3.0, 4.0], 0.0).expect("values");
        assert_eq!(even.quartiles, [1.75, 2.5, 3.25]);
        assert_eq!(even.passing, 0.0);
        assert!(PerplexitySummary::of(Vec::new(), 125.0).is_none());
    }
}
