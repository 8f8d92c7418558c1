//! `flipside eval cf`: the intrinsic metrics of a file of counterfactuals.

use flipside_shared::metrics::bleu::self_bleu;
use flipside_shared::metrics::distinct::distinct_n;
use flipside_shared::metrics::levenshtein::normalised_levenshtein;
use flipside_shared::metrics::perturbation::{Perturbation, perturbation_types};
use flipside_shared::metrics::zstat::{ZStatistics, z_statistics};
use std::path::Path;

use anyhow::Result;
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;
use serde::Serialize;

use crate::compute::Compute;
use crate::model_dirs::load_classifier;
use flipside_shared::records::Counterfactual;

/// Significance level of the z-statistics test.
pub const Z_ALPHA: f64 = 0.01;
/// Tokens seen in fewer examples are not tested.
pub const Z_MIN_COUNT: usize = 5;

/// The metrics of one file.
#[derive(Debug, Clone, Serialize)]
pub struct CfMetrics {
    pub records: usize,
    /// Share whose classifier prediction is the target label.
    pub flip_rate: f64,
    /// Mean BLEU-4 of each edit against its original.
    pub self_bleu: f64,
    /// Mean normalised token Levenshtein distance to the original.
    pub levenshtein: f64,
    /// Distinct-1 … distinct-4 of the edits.
    pub distinct: [f64; 4],
    /// Mean seconds per counterfactual (retrieval + LLM + classifier).
    pub seconds_per_item: f64,
    /// Counterfactuals per perturbation type (an edit may have several), in Polyjuice's order.
    pub perturbations: Vec<(&'static str, usize)>,
    /// Tokens significantly tied to a label in the originals alone, and with the
    /// counterfactuals added.
    pub z_significant_originals: usize,
    pub z_significant_augmented: usize,
}

/// Computes the metrics of `records` (which must not be empty); also returns the augmented
/// set's z-statistics (originals and edits with their labels).
pub fn cf_metrics(records: &[Counterfactual], labels: &[String]) -> (CfMetrics, ZStatistics) {
    let n = records.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Counterfactual) -> f64| records.iter().map(f).sum::<f64>() / n;
    let edits: Vec<&str> = records.iter().map(|r| r.edited.as_str()).collect();
    let mut perturbations: Vec<(&'static str, usize)> =
        Perturbation::ALL.iter().map(|p| (p.name(), 0)).collect();
    for record in records {
        for kind in perturbation_types(&record.original, &record.edited) {
            perturbations[kind as usize].1 += 1;
        }
    }
    let label_id = |name: &str| labels.iter().position(|l| l == name).unwrap_or(0);
    let mut originals: Vec<&str> = Vec::new();
    let mut original_labels = Vec::new();
    for record in records {
        // A multi-target item has one record per target: count its original once.
        if !originals.contains(&record.original.as_str()) {
            originals.push(&record.original);
            original_labels.push(label_id(&record.label));
        }
    }
    let mut augmented = originals.clone();
    augmented.extend(&edits);
    let mut augmented_labels = original_labels.clone();
    augmented_labels.extend(records.iter().map(|r| label_id(&r.target)));
    let num_labels = labels.len().max(2);
    let z_originals = z_statistics(
        &originals,
        &original_labels,
        num_labels,
        Z_MIN_COUNT,
        Z_ALPHA,
    );
    let z_augmented = z_statistics(
        &augmented,
        &augmented_labels,
        num_labels,
        Z_MIN_COUNT,
        Z_ALPHA,
    );
    let metrics = CfMetrics {
        records: records.len(),
        flip_rate: mean(&|r| f64::from(u8::from(r.flipped))),
        self_bleu: mean(&|r| self_bleu(&r.edited, &r.original)),
        levenshtein: mean(&|r| normalised_levenshtein(&r.edited, &r.original)),
        distinct: [1, 2, 3, 4].map(|k| distinct_n(&edits, k)),
        seconds_per_item: mean(&|r| {
            (r.timing.context_ms + r.timing.edit_ms + r.timing.judge_ms) / 1e3
        }),
        perturbations,
        z_significant_originals: z_originals.significant().len(),
        z_significant_augmented: z_augmented.significant().len(),
    };
    (metrics, z_augmented)
}

/// The share of edits that the classifier in `dir` assigns to their target label: a flip rate
/// that does not depend on the classifier that checked the edits (with `generate --verify`,
/// that one also chose them).
pub fn flip_rate_under<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    records: &[Counterfactual],
) -> Result<f64> {
    let inputs: Vec<Input> = records
        .iter()
        .map(|r| Input::with_premise(r.premise.as_deref(), &r.edited))
        .collect();
    let predicted = predictions_under(compute, dir, &inputs)?;
    let flipped = records
        .iter()
        .zip(&predicted)
        .filter(|(record, label)| **label == record.target)
        .count();
    Ok(flipped as f64 / records.len().max(1) as f64)
}

/// The label the classifier in `dir` predicts for each input.
pub fn predictions_under<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    inputs: &[Input],
) -> Result<Vec<String>> {
    let classifier = load_classifier::<B>(dir, &compute.device)?;
    let refs: Vec<&Input> = inputs.iter().collect();
    let bar = crate::progress::items(inputs.len() as u64, "classifying");
    let probs = classifier.predict(&refs, 32, &compute.batches, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let labels = &classifier.config.labels;
    Ok(probs
        .iter()
        .map(|p| {
            let best = (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b]));
            best.map_or_else(String::new, |i| labels[i].clone())
        })
        .collect())
}

/// The labels named in `records`, sorted (the order of z-statistics labels).
pub fn record_labels(records: &[Counterfactual]) -> Vec<String> {
    let mut labels: Vec<String> = records
        .iter()
        .flat_map(|r| [r.label.clone(), r.target.clone()])
        .collect();
    labels.sort();
    labels.dedup();
    labels
}
