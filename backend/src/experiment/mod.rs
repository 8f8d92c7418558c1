//! `flipside experiment`: does training with counterfactuals make a classifier more robust?
//!
//! One model is trained per condition (no augmentation, counterfactual files, a size-matched
//! in-domain control) and seed, and tested on every test set (in and out of domain). Each
//! condition × seed is a cached unit under `OUT/units/KEY/` (see [`plan::unit_key`]): a killed
//! experiment resumes — a fine-tuning unit from its last checkpoint — and never retrains a
//! finished unit. The summary (mean ± sd over seeds, the difference to the baseline with a
//! paired bootstrap test) is printed and written as JSON, CSV and an SVG figure.

pub mod config;
mod figure;
pub mod plan;
pub mod report;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::compute::DeviceChoice;
use crate::home::Home;
use crate::model_dirs::write_atomic;
use crate::training::baseline::BowLogReg;
use crate::training::classifier::{TrainRun, predict_dir, train_classifier};
use crate::with_backend;
use config::{ExperimentConfig, ModelKind};
use plan::{Plan, Unit, plan};
use report::ExperimentResult;

/// Where and how an experiment runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The experiment's directory: units, results and the configuration as run.
    pub out: PathBuf,
    pub device: DeviceChoice,
    /// Train at most this many units in this invocation; running again continues.
    pub stop_after_units: Option<usize>,
}

/// What a finished unit saved: its model's predictions on each test set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitRecord {
    pub key: String,
    pub condition: String,
    pub seed: u64,
    pub train_examples: usize,
    pub model: ModelKind,
    pub train_seconds: f64,
    /// Test set fingerprint → the predicted label id of each example.
    pub predictions: BTreeMap<String, Vec<usize>>,
}

/// The outcome of [`run_experiment`].
#[derive(Debug)]
pub struct Outcome {
    /// The summary, once every unit is done.
    pub result: Option<ExperimentResult>,
    /// Units trained (or completed) in this invocation.
    pub trained: usize,
    /// Units found finished.
    pub cached: usize,
    /// Units left for a later invocation (`stop_after_units`).
    pub remaining: usize,
}

const UNIT_FILE: &str = "unit.json";

/// Plans the experiment (reading and checking every input first), runs or resumes its units,
/// and — when all are done — writes `results.json`, `summary.csv`, `seeds.csv` and
/// `accuracy.svg` into `options.out`.
pub fn run_experiment(
    home: &Home,
    config: ExperimentConfig,
    options: &RunOptions,
) -> Result<Outcome> {
    let plan = plan(home, config)?;
    fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    write_atomic(
        &options.out.join("experiment.toml"),
        toml::to_string_pretty(&plan.config)?.as_bytes(),
    )?;
    tracing::info!(
        "{} units ({} conditions × {} seeds), {} test sets; results in {}",
        plan.units.len(),
        plan.conditions.len(),
        plan.config.seeds.len(),
        plan.tests.len(),
        options.out.display()
    );

    // The bar counts training examples, so that its ETA weighs big units more.
    let work = |unit: &Unit| plan.conditions[unit.condition].train.len() as u64;
    let bar = crate::progress::items(plan.units.iter().map(work).sum(), "experiment");
    let mut outcome = Outcome {
        result: None,
        trained: 0,
        cached: 0,
        remaining: 0,
    };
    let mut records = Vec::new();
    for unit in &plan.units {
        let dir = unit_dir(&options.out, unit);
        let saved = read_unit(&dir)?;
        if let Some(record) = saved.as_ref().filter(|r| complete(r, &plan)) {
            outcome.cached += 1;
            bar.inc(work(unit));
            records.push(record.clone());
            continue;
        }
        if options.stop_after_units == Some(outcome.trained) {
            outcome.remaining += 1;
            continue;
        }
        bar.set_message(format!(
            "{} · seed {}",
            plan.conditions[unit.condition].name, unit.seed
        ));
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let record = run_unit(&plan, unit, &dir, saved, options.device)?;
        write_atomic(&dir.join(UNIT_FILE), &serde_json::to_vec_pretty(&record)?)?;
        records.push(record);
        outcome.trained += 1;
        bar.inc(work(unit));
    }
    bar.finish_and_clear();
    if outcome.remaining > 0 {
        return Ok(outcome);
    }
    let result = report::summarise(&plan, &records);
    report::write(&options.out, &result)?;
    outcome.result = Some(result);
    Ok(outcome)
}

fn unit_dir(out: &Path, unit: &Unit) -> PathBuf {
    out.join("units").join(&unit.key[..16])
}

fn read_unit(dir: &Path) -> Result<Option<UnitRecord>> {
    let path = dir.join(UNIT_FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
            format!("corrupt {}; delete it to redo", path.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Whether a saved unit has predictions for every test set.
fn complete(record: &UnitRecord, plan: &Plan) -> bool {
    plan.tests
        .iter()
        .all(|t| record.predictions.contains_key(&t.fingerprint))
}

/// Trains (or resumes, or reuses) one unit's model and predicts the test sets it lacks.
fn run_unit(
    plan: &Plan,
    unit: &Unit,
    dir: &Path,
    saved: Option<UnitRecord>,
    device: DeviceChoice,
) -> Result<UnitRecord> {
    let condition = &plan.conditions[unit.condition];
    let mut record = saved.unwrap_or_else(|| UnitRecord {
        key: unit.key.clone(),
        condition: condition.name.clone(),
        seed: unit.seed,
        train_examples: condition.train.len(),
        model: plan.config.model.kind,
        train_seconds: 0.0,
        predictions: BTreeMap::new(),
    });
    let missing: Vec<_> = plan
        .tests
        .iter()
        .filter(|t| !record.predictions.contains_key(&t.fingerprint))
        .collect();
    let datasets: Vec<_> = missing.iter().map(|t| &t.dataset).collect();
    let predictions = match plan.config.model.kind {
        ModelKind::Bow => {
            let started = Instant::now();
            let model = BowLogReg::fit_grouped(&condition.train, unit.seed, plan::original_id);
            record.train_seconds = started.elapsed().as_secs_f64();
            datasets.iter().map(|d| model.predict(d)).collect()
        }
        ModelKind::FineTune => {
            let model_dir = dir.join("model");
            let run = TrainRun {
                train: &condition.train,
                encoder_dir: plan.encoder.as_deref().expect("planned with an encoder"),
                out: &model_dir,
                config: plan.config.model.train_config(unit.seed),
                pause_after: None,
            };
            let outcome = with_backend!(device, train_classifier(&run))?;
            record.train_seconds = outcome.record.train_seconds;
            with_backend!(device, predict_dir(&model_dir, &datasets, 32))?
        }
    };
    for (test, predicted) in missing.iter().zip(predictions) {
        record
            .predictions
            .insert(test.fingerprint.clone(), predicted);
    }
    Ok(record)
}
