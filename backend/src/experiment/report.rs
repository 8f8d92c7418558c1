//! An experiment's summary: accuracy per test set and condition over seeds, the difference to
//! the baseline (and to a condition's size-matched control) with its paired bootstrap test, each
//! label's recall and the balanced accuracy (their mean, what a skewed training set hurts), and
//! the files it is saved as.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use flipside_shared::metrics::significance::{MeanSd, PairedTest, mean_sd, paired_bootstrap};
use serde::{Deserialize, Serialize};

use super::UnitRecord;
use super::config::ModelConfig;
use super::plan::{InputFingerprint, Plan};
use crate::model_dirs::write_atomic;

/// How the differences are tested, as the results say it.
pub const SIGNIFICANCE_TEST: &str = "paired bootstrap over test examples and training seeds \
    (both resampled with replacement; two-sided, add-one p-value; 95% percentile interval)";

/// Everything an experiment measured, with what it was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub name: String,
    pub flipside_version: String,
    pub model: ModelConfig,
    pub seeds: Vec<u64>,
    pub baseline: String,
    /// Label names, in the order of each row's `recalls`.
    #[serde(default)]
    pub labels: Vec<String>,
    pub significance_test: String,
    pub bootstrap_replicates: usize,
    pub inputs: Vec<InputFingerprint>,
    pub conditions: Vec<ConditionSummary>,
    pub tests: Vec<TestResult>,
}

/// A condition's training set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConditionSummary {
    pub name: String,
    pub train_examples: usize,
    /// Training examples of each label, in `labels` order.
    #[serde(default)]
    pub label_counts: Vec<usize>,
    /// Examples added to the base set.
    pub added: usize,
}

/// The results on one test set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    pub name: String,
    pub examples: usize,
    pub rows: Vec<Row>,
}

/// One condition on one test set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub condition: String,
    /// Accuracy of each seed's model, in seed order.
    pub accuracies: Vec<SeedAccuracy>,
    pub accuracy: MeanSd,
    /// Each label's recall (share of its test examples predicted right), over seeds.
    #[serde(default)]
    pub recalls: Vec<MeanSd>,
    /// The mean of the recalls of the labels the test set has, over seeds.
    pub balanced_accuracy: MeanSd,
    /// Against the baseline (none for the baseline itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_baseline: Option<PairedTest>,
    /// Against the size-matched in-domain control made for this condition (the condition whose
    /// `in_domain_like` names it), if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_control: Option<ControlTest>,
}

/// A condition against its size-matched control: this condition minus the control.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlTest {
    pub control: String,
    #[serde(flatten)]
    pub test: PairedTest,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedAccuracy {
    pub seed: u64,
    pub accuracy: f64,
}

/// Summarises finished units (one per condition and seed).
pub fn summarise(plan: &Plan, records: &[UnitRecord]) -> ExperimentResult {
    let config = &plan.config;
    let baseline = config.baseline_index();
    let control_of = |name: &str| {
        config
            .conditions
            .iter()
            .position(|c| c.in_domain_like.as_deref() == Some(name))
    };
    // correct[condition][seed][example] for one test set.
    let correctness = |fingerprint: &str, gold: &[usize]| -> Vec<Vec<Vec<bool>>> {
        plan.conditions
            .iter()
            .enumerate()
            .map(|(c, _)| {
                config
                    .seeds
                    .iter()
                    .map(|&seed| {
                        let unit = plan
                            .units
                            .iter()
                            .find(|u| u.condition == c && u.seed == seed)
                            .expect("a unit per condition and seed");
                        let record = records
                            .iter()
                            .find(|r| r.key == unit.key)
                            .expect("every unit finished");
                        record.predictions[fingerprint]
                            .iter()
                            .zip(gold)
                            .map(|(p, g)| p == g)
                            .collect()
                    })
                    .collect()
            })
            .collect()
    };
    let tests = plan
        .tests
        .iter()
        .map(|test| {
            let gold: Vec<usize> = test.dataset.examples.iter().map(|e| e.label).collect();
            let correct = correctness(&test.fingerprint, &gold);
            let rows = plan
                .conditions
                .iter()
                .enumerate()
                .map(|(c, condition)| {
                    let accuracies: Vec<SeedAccuracy> = config
                        .seeds
                        .iter()
                        .zip(&correct[c])
                        .map(|(&seed, right)| SeedAccuracy {
                            seed,
                            accuracy: right.iter().filter(|&&r| r).count() as f64
                                / right.len().max(1) as f64,
                        })
                        .collect();
                    let values: Vec<f64> = accuracies.iter().map(|a| a.accuracy).collect();
                    let recalls: Vec<Vec<Option<f64>>> = correct[c]
                        .iter()
                        .map(|right| label_recalls(right, &gold, plan.labels.len()))
                        .collect();
                    let balanced: Vec<f64> = recalls
                        .iter()
                        .map(|seed| {
                            let present: Vec<f64> = seed.iter().flatten().copied().collect();
                            present.iter().sum::<f64>() / present.len().max(1) as f64
                        })
                        .collect();
                    Row {
                        condition: condition.name.clone(),
                        accuracy: mean_sd(&values),
                        recalls: (0..plan.labels.len())
                            .map(|label| {
                                let values: Vec<f64> =
                                    recalls.iter().filter_map(|seed| seed[label]).collect();
                                mean_sd(&values)
                            })
                            .collect(),
                        balanced_accuracy: mean_sd(&balanced),
                        accuracies,
                        versus_baseline: (c != baseline).then(|| {
                            paired_bootstrap(
                                &correct[baseline],
                                &correct[c],
                                config.bootstrap_replicates,
                                0,
                            )
                        }),
                        versus_control: control_of(&condition.name).map(|control| ControlTest {
                            control: plan.conditions[control].name.clone(),
                            test: paired_bootstrap(
                                &correct[control],
                                &correct[c],
                                config.bootstrap_replicates,
                                0,
                            ),
                        }),
                    }
                })
                .collect();
            TestResult {
                name: test.name.clone(),
                examples: test.dataset.len(),
                rows,
            }
        })
        .collect();
    ExperimentResult {
        name: config.name.clone(),
        flipside_version: env!("CARGO_PKG_VERSION").into(),
        model: config.model.clone(),
        seeds: config.seeds.clone(),
        baseline: config.conditions[baseline].name.clone(),
        labels: plan.labels.clone(),
        significance_test: SIGNIFICANCE_TEST.into(),
        bootstrap_replicates: config.bootstrap_replicates,
        inputs: plan.inputs.clone(),
        conditions: plan
            .conditions
            .iter()
            .map(|c| ConditionSummary {
                name: c.name.clone(),
                train_examples: c.train.len(),
                label_counts: c.train.label_counts(),
                added: c.added,
            })
            .collect(),
        tests,
    }
}

/// Each label's recall given which predictions were `right` for the `gold` labels (none for a
/// label the test set lacks).
fn label_recalls(right: &[bool], gold: &[usize], labels: usize) -> Vec<Option<f64>> {
    (0..labels)
        .map(|label| {
            let of_label: Vec<bool> = right
                .iter()
                .zip(gold)
                .filter(|&(_, &g)| g == label)
                .map(|(&r, _)| r)
                .collect();
            (!of_label.is_empty())
                .then(|| of_label.iter().filter(|&&r| r).count() as f64 / of_label.len() as f64)
        })
        .collect()
}

/// Writes `results.json`, `summary.csv`, `seeds.csv` and `accuracy.svg` into `out`.
pub fn write(out: &Path, result: &ExperimentResult) -> Result<()> {
    write_atomic(
        &out.join("results.json"),
        &serde_json::to_vec_pretty(result)?,
    )?;
    let mut summary = csv::Writer::from_writer(Vec::new());
    summary.write_record([
        "test",
        "condition",
        "train_examples",
        "seeds",
        "accuracy_mean",
        "accuracy_sd",
        "difference",
        "ci_low",
        "ci_high",
        "p_value",
        "control",
        "difference_vs_control",
        "ci_low_vs_control",
        "ci_high_vs_control",
        "p_value_vs_control",
        "balanced_accuracy_mean",
        "balanced_accuracy_sd",
    ])?;
    let mut seeds = csv::Writer::from_writer(Vec::new());
    seeds.write_record(["test", "condition", "seed", "accuracy"])?;
    for test in &result.tests {
        for (row, condition) in test.rows.iter().zip(&result.conditions) {
            let versus = |f: fn(&PairedTest) -> f64| {
                row.versus_baseline
                    .as_ref()
                    .map(|t| format!("{:.6}", f(t)))
                    .unwrap_or_default()
            };
            let control = |f: fn(&ControlTest) -> String| {
                row.versus_control.as_ref().map(f).unwrap_or_default()
            };
            summary.write_record([
                test.name.clone(),
                row.condition.clone(),
                condition.train_examples.to_string(),
                row.accuracy.n.to_string(),
                format!("{:.6}", row.accuracy.mean),
                format!("{:.6}", row.accuracy.sd),
                versus(|t| t.difference),
                versus(|t| t.ci_low),
                versus(|t| t.ci_high),
                versus(|t| t.p_value),
                control(|c| c.control.clone()),
                control(|c| format!("{:.6}", c.test.difference)),
                control(|c| format!("{:.6}", c.test.ci_low)),
                control(|c| format!("{:.6}", c.test.ci_high)),
                control(|c| format!("{:.6}", c.test.p_value)),
                format!("{:.6}", row.balanced_accuracy.mean),
                format!("{:.6}", row.balanced_accuracy.sd),
            ])?;
            for seed in &row.accuracies {
                seeds.write_record([
                    test.name.clone(),
                    row.condition.clone(),
                    seed.seed.to_string(),
                    format!("{:.6}", seed.accuracy),
                ])?;
            }
        }
    }
    write_atomic(&out.join("summary.csv"), &summary.into_inner()?)?;
    write_atomic(&out.join("seeds.csv"), &seeds.into_inner()?)?;
    write_atomic(
        &out.join("accuracy.svg"),
        super::figure::accuracy_svg(result).as_bytes(),
    )?;
    Ok(())
}

/// The summary as Markdown tables, one per test set, accuracies in percent.
pub fn markdown(result: &ExperimentResult) -> String {
    let mut text = String::new();
    for test in &result.tests {
        let controlled = test.rows.iter().any(|row| row.versus_control.is_some());
        let _ = writeln!(
            text,
            "\n{} — {} examples; accuracy % over {} seeds; Δ vs {}{}",
            test.name,
            test.examples,
            result.seeds.len(),
            result.baseline,
            if controlled {
                "; Δ vs control: against the size-matched control made for the condition"
            } else {
                ""
            }
        );
        let recall_headers: String = result
            .labels
            .iter()
            .map(|label| format!(" recall {label} |"))
            .collect();
        let control_headers = if controlled {
            " Δ vs control | p vs control |"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "| condition | train | accuracy | Δ | 95% CI | p |{control_headers} balanced \
             |{recall_headers}"
        );
        let _ = writeln!(
            text,
            "|---|---:|---:|---:|---:|---:|{}",
            "---:|".repeat(1 + result.labels.len() + 2 * usize::from(controlled))
        );
        for (row, condition) in test.rows.iter().zip(&result.conditions) {
            let (difference, interval, p) = match &row.versus_baseline {
                Some(t) => (
                    format!("{:+.2}", 100.0 * t.difference),
                    format!("[{:+.2}, {:+.2}]", 100.0 * t.ci_low, 100.0 * t.ci_high),
                    format_p(t.p_value),
                ),
                None => Default::default(),
            };
            let versus_control = match (&row.versus_control, controlled) {
                (Some(c), _) => format!(
                    " {:+.2} | {} |",
                    100.0 * c.test.difference,
                    format_p(c.test.p_value)
                ),
                (None, true) => "  |  |".into(),
                (None, false) => String::new(),
            };
            let percent = |m: &MeanSd| format!("{:.2} ± {:.2}", 100.0 * m.mean, 100.0 * m.sd);
            let balanced = percent(&row.balanced_accuracy);
            let recalls: String = row
                .recalls
                .iter()
                .map(|recall| format!(" {} |", percent(recall)))
                .collect();
            let _ = writeln!(
                text,
                "| {} | {} | {} | {difference} | {interval} | {p} |{versus_control} {balanced} \
                 |{recalls}",
                row.condition,
                condition.train_examples,
                percent(&row.accuracy),
            );
        }
    }
    text
}

fn format_p(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".into()
    } else {
        format!("{p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result of one test set whose conditions are `(name, control)`, control being the
    /// name of the condition's size-matched control if it has one.
    fn result(conditions: &[(&str, Option<&str>)]) -> ExperimentResult {
        let spread = serde_json::json!({"mean": 0.7, "sd": 0.01, "n": 2});
        let paired = serde_json::json!({
            "difference": 0.05, "ci_low": 0.01, "ci_high": 0.09, "p_value": 0.02,
            "replicates": 100
        });
        let rows: Vec<_> = conditions
            .iter()
            .enumerate()
            .map(|(i, (name, control))| {
                let mut row = serde_json::json!({
                    "condition": name, "accuracies": [], "accuracy": spread,
                    "recalls": [spread, spread], "balanced_accuracy": spread,
                });
                if i > 0 {
                    row["versus_baseline"] = paired.clone();
                }
                if let Some(control) = control {
                    let mut test = paired.clone();
                    test["control"] = (*control).into();
                    row["versus_control"] = test;
                }
                row
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "name": "toy", "flipside_version": "0", "model": {}, "seeds": [1, 2],
            "baseline": conditions[0].0, "labels": ["negative", "positive"],
            "significance_test": "", "bootstrap_replicates": 100, "inputs": [],
            "conditions": conditions.iter().map(|(name, _)| serde_json::json!({
                "name": name, "train_examples": 10, "added": 0
            })).collect::<Vec<_>>(),
            "tests": [{"name": "ood", "examples": 50, "rows": rows}],
        }))
        .unwrap()
    }

    #[test]
    fn every_table_line_has_as_many_cells_with_or_without_a_control() {
        let plain = markdown(&result(&[("base", None), ("+ cf", None)]));
        let controlled = markdown(&result(&[
            ("base", None),
            ("+ cf", Some("control")),
            ("control", None),
        ]));
        for (text, cells) in [(&plain, 9), (&controlled, 11)] {
            let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
            assert!(lines.len() >= 4, "{text}");
            for line in lines {
                assert_eq!(line.matches('|').count(), cells + 1, "{line}");
            }
        }
        assert!(!plain.contains("vs control"), "{plain}");
        assert!(
            controlled.contains("| + cf | 10 | 70.00 ± 1.00 | +5.00 |"),
            "{controlled}"
        );
        assert!(
            controlled.contains("| +5.00 | 0.020 | 70.00 ± 1.00 |"),
            "{controlled}"
        );
    }
}
