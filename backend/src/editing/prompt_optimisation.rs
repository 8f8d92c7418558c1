//! LASS's prompt optimisation (its Algorithm 1, App. C): hand-fixed demonstrations are inserted
//! into a prompt one at a time, each at the position that most raises the LLM's success rate on
//! an evaluation set of past failures and successes, until the rate is high enough or an
//! insertion gains too little.
//!
//! Success is the independent check the paper asks a person for: the classifier says the edit
//! has the target label and the edit stays minimal (token Levenshtein distance to the original,
//! over the longer length, at most `max_change`). Every LLM call goes through the `llm-only`
//! method's pipeline with the candidate template, as `flipside generate --prompt FILE` would
//! run it, with the same seed per item for every candidate, so that scores differ by prompt
//! only. Evaluations are saved as they are made: an interrupted run resumes without asking the
//! LLM again.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use flipside_shared::metrics::levenshtein::normalised_levenshtein;
use serde::{Deserialize, Serialize};

use super::prompts::{Demonstrations, PromptTemplate, Slots};
use crate::methods::{self, EditSettings, Models};
use crate::model_dirs::write_atomic;
use crate::pipeline::store::read_repairing;
use crate::pipeline::{Item, Pipeline};
use crate::retrieval::cfdpr::SeedPair;

/// Algorithm 1's parameters (defaults: the m 40, n 10, ε 10%, δ 80%).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OptimisationSettings {
    /// Failures of the starting prompt in the evaluation set (m).
    pub failures: usize,
    /// Successes of the starting prompt in the evaluation set (n).
    pub successes: usize,
    /// Stop when an insertion raises the success rate by less than this (ε).
    pub min_gain: f64,
    /// Stop when the success rate reaches this (δ).
    pub target_rate: f64,
    /// Most token edit distance (normalised) of a successful edit.
    pub max_change: f64,
    /// Seed of every item's sampling.
    pub seed: u64,
}

impl Default for OptimisationSettings {
    fn default() -> Self {
        Self {
            failures: 40,
            successes: 10,
            min_gain: 0.10,
            target_rate: 0.80,
            max_change: 0.5,
            seed: 0,
        }
    }
}

impl Demonstrations {
    /// `example` written as a demonstration: the instance filled with its text and labels,
    /// then its counterfactual.
    pub fn block(&self, template: &PromptTemplate, example: &SeedPair, target: &str) -> String {
        let shown = PromptTemplate {
            text: self.instance.clone(),
            ..template.clone()
        };
        let question = shown.render(&Slots {
            text: &example.text,
            label: &example.label,
            target,
            ..Slots::default()
        });
        format!("{question} {}", example.counterfactual.trim())
    }
}

/// One LLM edit of one evaluation item under one template (a line of `evaluations.jsonl`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Evaluation {
    /// The template's hash.
    pub template: String,
    /// The item's key.
    pub item: String,
    pub success: bool,
    /// The edit, or none when the LLM gave no usable one.
    pub edited: Option<String>,
    /// Why it is not a success.
    pub reason: Option<String>,
}

/// One insertion step of the trace.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    /// The inserted example's text.
    pub example: String,
    /// The success rate with the example at each position (0: before every demonstration).
    pub rates: Vec<f64>,
    /// The best position, and whether the insertion was kept.
    pub position: usize,
    pub kept: bool,
    /// The evaluation items scored (those that are not demonstrations).
    pub scored: usize,
}

/// What a run found: the trace and the template it ends with (`trace.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Trace {
    pub settings: OptimisationSettings,
    pub base_template: String,
    /// Evaluation items: failures and successes of the starting template.
    pub failures: usize,
    pub successes: usize,
    /// Items tried to find them.
    pub scanned: usize,
    /// The success rates: the start's, then after each kept insertion.
    pub rates: Vec<f64>,
    pub steps: Vec<Step>,
    /// Why it stopped.
    pub stopped: String,
    /// The optimised template's file.
    pub template: PathBuf,
}

/// Scores templates with the LLM, remembering every evaluation in `dir/evaluations.jsonl`.
pub struct PromptOptimiser<'a> {
    pub models: &'a Models,
    /// How the LLM edits (its sampling, the task); the template is the candidate's.
    pub edit: EditSettings,
    pub settings: OptimisationSettings,
    pub dir: PathBuf,
    done: HashMap<(String, String), Evaluation>,
}

impl<'a> PromptOptimiser<'a> {
    /// An optimiser writing into `dir` (created), with the evaluations already saved there.
    pub fn new(
        models: &'a Models,
        edit: EditSettings,
        settings: OptimisationSettings,
        dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir.join("templates"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let saved: Vec<Evaluation> = read_repairing(&dir.join("evaluations.jsonl"))?;
        Ok(Self {
            models,
            edit,
            settings,
            dir: dir.to_path_buf(),
            done: saved
                .into_iter()
                .map(|e| ((e.template.clone(), e.item.clone()), e))
                .collect(),
        })
    }

    /// Runs Algorithm 1 from `base` with `examples` inserted in order over `candidates` (items
    /// tried in order until the evaluation set is full). `on_evaluation` hears of each LLM call.
    pub fn optimise(
        &mut self,
        base: &PromptTemplate,
        examples: &[SeedPair],
        candidates: &[Item],
        on_evaluation: &dyn Fn(),
    ) -> Result<Trace> {
        let layout = Demonstrations::of(base)?;
        let target = match candidates.first() {
            Some(item) => item.target.clone(),
            None => bail!("no item to evaluate the prompt on"),
        };
        for example in examples {
            ensure!(
                example.label == candidates[0].label,
                "the examples must go from {} to {target} as the items do; one is labelled {}",
                candidates[0].label,
                example.label
            );
        }
        let (base_file, base_pipeline) = self.candidate(base, &layout, &layout.blocks)?;
        let (mut set, mut scanned, mut failures, mut successes) = (Vec::new(), 0, 0, 0);
        for item in candidates {
            if failures >= self.settings.failures && successes >= self.settings.successes {
                break;
            }
            scanned += 1;
            let success = self.evaluate(&base_pipeline, &base_file.1, item)?.success;
            on_evaluation();
            let wanted = match success {
                true => &mut successes,
                false => &mut failures,
            };
            let limit = match success {
                true => self.settings.successes,
                false => self.settings.failures,
            };
            if *wanted < limit {
                *wanted += 1;
                set.push(item.clone());
            }
        }
        ensure!(!set.is_empty(), "no evaluation item");

        let mut blocks = layout.blocks.clone();
        let mut used: Vec<&str> = Vec::new();
        let mut rate = successes as f64 / set.len() as f64;
        let mut trace = Trace {
            settings: self.settings.clone(),
            base_template: base.id.clone(),
            failures,
            successes,
            scanned,
            rates: vec![rate],
            steps: Vec::new(),
            stopped: String::new(),
            template: base_file.0.clone(),
        };
        let mut stopped = None;
        for example in examples {
            if rate >= self.settings.target_rate {
                break;
            }
            used.push(&example.text);
            let rest: Vec<&Item> = set
                .iter()
                .filter(|item| !used.contains(&item.text.as_str()))
                .collect();
            let block = layout.block(base, example, &target);
            let mut rates = Vec::new();
            let mut files = Vec::new();
            for position in 0..=blocks.len() {
                let mut tried = blocks.clone();
                tried.insert(position, block.clone());
                let (file, pipeline) = self.candidate(base, &layout, &tried)?;
                let mut wins = 0;
                for item in &rest {
                    wins += usize::from(self.evaluate(&pipeline, &file.1, item)?.success);
                    on_evaluation();
                }
                rates.push(wins as f64 / rest.len().max(1) as f64);
                files.push((tried, file.0));
            }
            let position = best_position(&rates);
            let gain = rates[position] - rate;
            let kept = gain >= self.settings.min_gain;
            trace.steps.push(Step {
                example: example.text.clone(),
                rates: rates.clone(),
                position,
                kept,
                scored: rest.len(),
            });
            if !kept {
                stopped = Some(format!(
                    "inserting the next example gained {gain:.3} < ε = {}",
                    self.settings.min_gain
                ));
                break;
            }
            (blocks, trace.template) = files.swap_remove(position);
            rate = rates[position];
            trace.rates.push(rate);
        }
        trace.stopped = stopped.unwrap_or_else(|| match rate >= self.settings.target_rate {
            true => format!(
                "the success rate {rate:.3} reached δ = {}",
                self.settings.target_rate
            ),
            false => "every example was inserted".into(),
        });
        let optimised = self.dir.join("prompt.toml");
        std::fs::copy(&trace.template, &optimised)
            .with_context(|| format!("cannot write {}", optimised.display()))?;
        trace.template = optimised;
        write_atomic(
            &self.dir.join("trace.json"),
            &serde_json::to_vec_pretty(&trace)?,
        )?;
        Ok(trace)
    }

    /// The template with `blocks` as demonstrations, saved under `templates/` (by hash), and
    /// the `llm-only` pipeline that prompts with it.
    fn candidate(
        &self,
        base: &PromptTemplate,
        layout: &Demonstrations,
        blocks: &[String],
    ) -> Result<((PathBuf, String), Pipeline)> {
        let source = base.with_text(
            &format!("{}-optimised", base.id),
            &format!(
                "{} + {} hand-fixed demonstrations (prompt optimisation)",
                base.description,
                blocks.len().saturating_sub(layout.blocks.len())
            ),
            &layout.text_with(blocks),
        )?;
        let hash = PromptTemplate::parse(&source)?.hash;
        let path = self.dir.join("templates").join(format!("{hash}.toml"));
        if !path.exists() {
            write_atomic(&path, source.as_bytes())?;
        }
        let mut edit = self.edit.clone();
        edit.prompts
            .insert("llm-only".into(), path.display().to_string());
        edit.max_attempts = 1;
        edit.verify = false;
        let pipeline = methods::pipeline(methods::method("llm-only")?, self.models, &edit)?;
        Ok(((path, hash), pipeline))
    }

    /// `item` edited under the template `hash` (saved, or made now and saved).
    fn evaluate(&mut self, pipeline: &Pipeline, hash: &str, item: &Item) -> Result<Evaluation> {
        let key = (hash.to_string(), item.key());
        if let Some(done) = self.done.get(&key) {
            return Ok(done.clone());
        }
        let outcome = pipeline.edit_one(item, self.settings.seed)?;
        let evaluation = match outcome.record {
            None => Evaluation {
                template: hash.into(),
                item: item.key(),
                success: false,
                reason: outcome.failures.last().map(|f| f.reason.clone()),
                edited: outcome.failures.last().and_then(|f| f.reply.clone()),
            },
            Some(record) => {
                let change = normalised_levenshtein(&record.edited, &record.original);
                let reason = if !record.flipped {
                    Some(format!(
                        "did not flip: the classifier says {} (p({}) = {:.3})",
                        record.prediction, record.target, record.target_probability
                    ))
                } else if change > self.settings.max_change {
                    Some(format!(
                        "not minimal: changed {change:.2} of the tokens (> {})",
                        self.settings.max_change
                    ))
                } else {
                    None
                };
                Evaluation {
                    template: hash.into(),
                    item: item.key(),
                    success: reason.is_none(),
                    reason,
                    edited: Some(record.edited),
                }
            }
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("evaluations.jsonl"))?;
        let mut line = serde_json::to_vec(&evaluation)?;
        line.push(b'\n');
        file.write_all(&line)?;
        self.done.insert(key, evaluation.clone());
        Ok(evaluation)
    }
}

/// The position with the highest rate; ties go to the latest (nearest the instance, where
/// demonstrations weigh most).
fn best_position(rates: &[f64]) -> usize {
    (0..rates.len())
        .max_by(|&a, &b| rates[a].total_cmp(&rates[b]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(text: &str, counterfactual: &str) -> SeedPair {
        SeedPair::new(text, "positive", counterfactual)
    }

    #[test]
    fn demonstrations_are_found_and_inserted_in_the_template_s_own_format() {
        for id in ["lass-sentiment", "llm-only-sentiment"] {
            let template = PromptTemplate::load(id).unwrap();
            let layout = Demonstrations::of(&template).unwrap();
            assert_eq!(
                layout.blocks.len(),
                template.demonstration_answers().len(),
                "{id}"
            );
            assert_eq!(layout.text_with(&layout.blocks), template.text, "{id}");
            let block = layout.block(&template, &pair("A fine film.", "A dull film."), "negative");
            let mut blocks = layout.blocks.clone();
            blocks.insert(1, block.clone());
            let text = layout.text_with(&blocks);
            let with = PromptTemplate {
                text,
                ..template.clone()
            };
            assert_eq!(
                with.demonstration_answers()[1],
                "A dull film.",
                "{id}: {block}"
            );
            assert_eq!(Demonstrations::of(&with).unwrap().blocks[1], block, "{id}");
        }
        let lass = PromptTemplate::load("lass-sentiment").unwrap();
        let layout = Demonstrations::of(&lass).unwrap();
        assert_eq!(
            layout.block(&lass, &pair("Good.", "Bad."), "negative"),
            "Example: Good.\n\nCounterfactual: Bad."
        );
    }

    #[test]
    fn ties_go_to_the_latest_position() {
        assert_eq!(best_position(&[0.2, 0.5, 0.5, 0.1]), 2);
        assert_eq!(best_position(&[0.7, 0.5]), 0);
        assert_eq!(best_position(&[0.0]), 0);
    }
}
