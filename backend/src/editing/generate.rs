//! `flipside generate`: counterfactuals for a dataset by CORE (retrieve, extract keywords, edit
//! with an LLM), its LLM-only ablation, or its retrieve-only ablation; every edit is checked by
//! a classifier and written with its provenance to a resumable JSON-lines file.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Result, bail, ensure};
use burn::tensor::backend::Backend;
use flipside_shared::classifier::TextClassifier;
use flipside_shared::data::stable_hash;

use super::keywords::{Lexicons, keywords};
use super::prompts::{PromptTemplate, Slots, Task};
use super::records::{Counterfactual, FailedAttempt, PromptRef, RecordStore, Timing};
use super::reply::{copied_demonstration, parse_edit};
use super::retrieve::{Item, Retrieval, RetrievalSetup, Retriever};
use crate::compute::Compute;
use crate::llm::{Editor, FinishReason, Rejected, Request, Sampling};
use crate::models::load_classifier;

/// How counterfactuals are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Retrieve helpers, extract keywords, edit with the LLM (CORE)
    Core,
    /// Edit with the LLM alone: the same prompt without keywords (CORE's GPT-3 ablation)
    LlmOnly,
    /// Replace the polarity-bearing sentences by their top retrieved helpers (CF-DPR ablation)
    RetrieveOnly,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Core => "core",
            Method::LlmOnly => "llm-only",
            Method::RetrieveOnly => "retrieve-only",
        }
    }

    pub fn retrieves(self) -> bool {
        self != Method::LlmOnly
    }
}

/// Everything a generation run needs.
pub struct GenerateJob<'a> {
    pub method: Method,
    pub items: Vec<Item>,
    /// The LLM and its prompt (all methods but retrieve-only).
    pub editor: Option<(&'a dyn Editor, PromptTemplate)>,
    pub retrieval: Option<RetrievalSetup>,
    pub lexicons: Lexicons,
    pub classifier: PathBuf,
    pub sampling: Sampling,
    pub max_keywords: usize,
    /// Tries per item before giving up.
    pub max_attempts: usize,
    /// Count an edit the classifier does not flip as a failed attempt (and retry it).
    pub verify: bool,
    pub concurrency: usize,
    pub seed: u64,
    pub output: PathBuf,
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub jobs: usize,
    /// Jobs with a counterfactual before this run started.
    pub already_done: usize,
    pub written: usize,
    pub flipped: usize,
    pub failed_attempts: usize,
    /// Jobs that used up their attempts without a counterfactual.
    pub given_up: usize,
    /// The caller stopped the run before every job was tried.
    pub stopped: bool,
}

/// What [`generate`] tells its caller after each finished job.
pub struct Progress<'a> {
    /// The run so far.
    pub summary: &'a Summary,
    /// The job's counterfactual; `None` when it was given up.
    pub record: Option<&'a Counterfactual>,
}

/// Runs `job`. `on_job` is called after each finished job; when it breaks, jobs in progress
/// finish and no new one starts (a later run resumes).
pub fn generate<B: Backend>(
    compute: Compute<B>,
    job: &GenerateJob<'_>,
    on_job: &(dyn Fn(Progress<'_>) -> ControlFlow<()> + Sync),
) -> Result<Summary> {
    ensure!(job.max_attempts >= 1, "--max-attempts must be at least 1");
    ensure!(
        job.method == Method::RetrieveOnly || job.editor.is_some(),
        "the {} method needs an LLM",
        job.method.name()
    );
    ensure!(
        !job.method.retrieves() || job.retrieval.is_some(),
        "the {} method needs an index to retrieve from",
        job.method.name()
    );
    let mut store = RecordStore::open(&job.output)?;
    let mut summary = Summary {
        jobs: job.items.len(),
        ..Default::default()
    };
    let pending: Vec<&Item> = job
        .items
        .iter()
        .filter(|item| {
            let key = item.key();
            if store.done.contains(&key) {
                summary.already_done += 1;
                return false;
            }
            store.failed.get(&key).copied().unwrap_or(0) < job.max_attempts
        })
        .collect();
    summary.given_up = job.items.len() - summary.already_done - pending.len();
    if pending.is_empty() {
        return Ok(summary);
    }

    let classifier = load_classifier::<B>(&job.classifier, &compute.device)?;
    for item in &pending {
        if !classifier.config.labels.contains(&item.target) {
            bail!(
                "the classifier at {} knows the labels {:?}, not the target {:?}",
                job.classifier.display(),
                classifier.config.labels,
                item.target
            );
        }
    }
    let retrievals = match (&job.retrieval, job.method.retrieves()) {
        (Some(setup), true) => {
            let owned: Vec<Item> = pending.iter().map(|&i| i.clone()).collect();
            Retriever::open(compute.clone(), setup.clone())?.retrieve(&owned, &job.lexicons)?
        }
        _ => vec![Retrieval::default(); pending.len()],
    };

    let worker = Worker {
        job,
        classifier: Mutex::new(classifier),
        store: Mutex::new(&mut store),
        summary: Mutex::new(summary),
    };
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let outcome: Mutex<Result<()>> = Mutex::new(Ok(()));
    std::thread::scope(|scope| {
        for _ in 0..job.concurrency.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= pending.len()
                        || stop.load(Ordering::SeqCst)
                        || outcome.lock().unwrap().is_err()
                    {
                        break;
                    }
                    let record = match worker.run(pending[i], &retrievals[i]) {
                        Ok(record) => record,
                        Err(error) => {
                            *outcome.lock().unwrap() = Err(error);
                            break;
                        }
                    };
                    let summary = worker.summary.lock().unwrap().clone();
                    let progress = Progress {
                        summary: &summary,
                        record: record.as_ref(),
                    };
                    if on_job(progress).is_break() {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    outcome.into_inner().unwrap()?;
    let mut summary = worker.summary.into_inner().unwrap();
    summary.stopped = stop.into_inner();
    Ok(summary)
}

/// The per-job work, shared by the worker threads.
struct Worker<'a, 'j, B: Backend> {
    job: &'a GenerateJob<'j>,
    classifier: Mutex<TextClassifier<B>>,
    store: Mutex<&'a mut RecordStore>,
    summary: Mutex<Summary>,
}

/// One attempt's result: the edit, or why there is none (and the raw reply).
pub type Attempt = std::result::Result<Edit, (String, Option<String>)>;

/// What the classifier says of an edit.
struct Verdict {
    prediction: String,
    target_probability: f32,
    flipped: bool,
    millis: f64,
}

/// An LLM's edit of an item.
pub struct Edit {
    pub text: String,
    /// The whole reply the edit was read from.
    pub reply: String,
    pub llm_ms: f64,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// One LLM edit of `item` with `template` (CORE's when `keywords` are given). An `Err` outer
/// result is fatal (I/O, a broken engine); an `Err` inner one is a failed attempt.
pub fn edit_once(
    editor: &dyn Editor,
    template: &PromptTemplate,
    item: &Item,
    keywords: Option<&[String]>,
    sampling: Sampling,
) -> Result<Attempt> {
    let slots = Slots {
        text: &item.text,
        premise: item.premise.as_deref().unwrap_or_default(),
        label: &item.label,
        target: &item.target,
        keywords,
    };
    let request = Request {
        prompt: template.chat(&slots),
        sampling,
        stop: template.stop.clone(),
    };
    let started = Instant::now();
    // A rejected request is this item's failure; anything else stops the run (it resumes).
    let completion = match editor.complete(&request) {
        Ok(completion) => completion,
        Err(error) => match error.downcast_ref::<Rejected>() {
            Some(rejected) => return Ok(Err((rejected.to_string(), None))),
            None => return Err(error.context(format!("editing {}", item.key()))),
        },
    };
    let llm_ms = started.elapsed().as_secs_f64() * 1e3;
    let reply = completion.text;
    let parsed = parse_edit(&reply, &template.answer_prefix, &item.text);
    Ok(match parsed {
        Ok(_) if completion.finish_reason == FinishReason::Length && !reply.contains('\n') => {
            Err((
                format!("cut off at max_tokens {}", sampling.max_tokens),
                Some(reply),
            ))
        }
        Ok(text) if copied_demonstration(&text, &template.demonstration_answers()).is_some() => {
            Err(("copied a demonstration's answer".to_string(), Some(reply)))
        }
        Ok(text) => Ok(Edit {
            text,
            reply,
            llm_ms,
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
        }),
        Err(reason) => Err((reason, Some(reply))),
    })
}

impl<B: Backend> Worker<'_, '_, B> {
    /// Edits one item; its counterfactual, or `None` when it was given up.
    fn run(&self, item: &Item, retrieval: &Retrieval) -> Result<Option<Counterfactual>> {
        let key = item.key();
        let keywords = self.keywords(retrieval);
        let tried = self
            .store
            .lock()
            .unwrap()
            .failed
            .get(&key)
            .copied()
            .unwrap_or(0);
        for attempt in tried + 1..=self.job.max_attempts {
            let sampling = Sampling {
                seed: stable_hash(self.job.seed, &format!("{key}#{attempt}")) & 0xffff_ffff,
                ..self.job.sampling
            };
            let (reason, reply) = match self.attempt(item, retrieval, &keywords, sampling)? {
                Err(failure) => failure,
                Ok(edit) => {
                    let verdict = self.classify(item, &edit.text)?;
                    if !self.job.verify || verdict.flipped {
                        let record = (edit, verdict);
                        let record =
                            self.finish(item, retrieval, keywords, sampling, attempt, record)?;
                        return Ok(Some(record));
                    }
                    let reason = format!(
                        "did not flip: the classifier says {} (p({}) = {:.3})",
                        verdict.prediction, item.target, verdict.target_probability
                    );
                    (reason, Some(edit.text))
                }
            };
            let failure = FailedAttempt {
                key: key.clone(),
                attempt,
                reason,
                reply,
            };
            self.store.lock().unwrap().add_failure(&failure)?;
            self.summary.lock().unwrap().failed_attempts += 1;
        }
        self.summary.lock().unwrap().given_up += 1;
        Ok(None)
    }

    fn keywords(&self, retrieval: &Retrieval) -> Vec<String> {
        let task = match &self.job.editor {
            Some((_, template)) => template.task,
            None => Task::Sentiment,
        };
        let excerpts: Vec<&str> = retrieval.excerpts.iter().map(|e| e.text.as_str()).collect();
        keywords(&excerpts, &self.job.lexicons, task, self.job.max_keywords)
    }

    /// One try: an `Err` outer result is fatal (I/O, a broken engine); an `Err` inner one is a
    /// failed attempt to record.
    fn attempt(
        &self,
        item: &Item,
        retrieval: &Retrieval,
        keywords: &[String],
        sampling: Sampling,
    ) -> Result<Attempt> {
        let Some((editor, template)) = &self.job.editor else {
            return Ok(replace_with_retrieved(item, retrieval));
        };
        if self.job.method == Method::Core && keywords.is_empty() {
            return Ok(Err(("retrieval found no keywords".to_string(), None)));
        }
        let keywords = (self.job.method == Method::Core).then_some(keywords);
        edit_once(*editor, template, item, keywords, sampling)
    }

    /// The classifier's verdict on an edit.
    fn classify(&self, item: &Item, edited: &str) -> Result<Verdict> {
        let started = Instant::now();
        let classifier = self.classifier.lock().unwrap();
        let probs = classifier.predict_batch(&[&item.input(edited)])?;
        let labels = &classifier.config.labels;
        let best = flipside_shared::metrics::argmax_rows(&probs, labels.len())[0];
        let target = labels.iter().position(|l| *l == item.target).unwrap_or(0);
        Ok(Verdict {
            flipped: labels[best] == item.target,
            prediction: labels[best].clone(),
            target_probability: probs[target],
            millis: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    fn finish(
        &self,
        item: &Item,
        retrieval: &Retrieval,
        keywords: Vec<String>,
        sampling: Sampling,
        attempt: usize,
        (edit, verdict): (Edit, Verdict),
    ) -> Result<Counterfactual> {
        let Verdict {
            prediction,
            target_probability,
            flipped,
            millis: classify_ms,
        } = verdict;
        let llm = self.job.editor.as_ref();
        let record = Counterfactual {
            key: item.key(),
            item: item.id.clone(),
            method: self.job.method.name().to_string(),
            premise: item.premise.clone(),
            original: item.text.clone(),
            edited: edit.text,
            label: item.label.clone(),
            target: item.target.clone(),
            queries: retrieval.queries.clone(),
            retrieved: retrieval.excerpts.clone(),
            keywords: if self.job.method == Method::LlmOnly {
                Vec::new()
            } else {
                keywords
            },
            prompt: llm.map(|(_, t)| PromptRef {
                id: t.id.clone(),
                hash: t.hash.clone(),
            }),
            model: llm.map(|(e, _)| e.model().to_string()),
            sampling: llm.map(|_| sampling),
            attempt,
            timing: Timing {
                retrieve_ms: retrieval.millis,
                llm_ms: edit.llm_ms,
                classify_ms,
                prompt_tokens: edit.prompt_tokens,
                completion_tokens: edit.completion_tokens,
            },
            prediction,
            target_probability,
            flipped,
        };
        self.store.lock().unwrap().add(&record)?;
        let mut summary = self.summary.lock().unwrap();
        summary.written += 1;
        summary.flipped += usize::from(flipped);
        Ok(record)
    }
}

/// The retrieve-only edit: each query sentence replaced by its best retrieved helper.
fn replace_with_retrieved(item: &Item, retrieval: &Retrieval) -> Attempt {
    let mut text = item.text.clone();
    let mut replaced = false;
    for (q, query) in retrieval.queries.iter().enumerate() {
        if let Some(best) = retrieval.excerpts.iter().find(|e| e.query == q) {
            if item.premise.is_some() || retrieval.queries.len() == 1 && text.trim() == query {
                text = best.text.clone();
            } else {
                text = text.replacen(query.as_str(), &best.text, 1);
            }
            replaced = true;
        }
    }
    if replaced {
        Ok(Edit {
            reply: String::new(),
            text,
            llm_ms: 0.0,
            prompt_tokens: 0,
            completion_tokens: 0,
        })
    } else {
        Err(("nothing was retrieved".to_string(), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::editing::records::Excerpt;

    #[test]
    fn retrieve_only_replaces_each_query_sentence() {
        let item = Item {
            id: "r1".into(),
            text: "I saw it Monday. The plot is dull. It ran long.".into(),
            premise: None,
            label: "negative".into(),
            target: "positive".into(),
        };
        let excerpt = |query, text: &str| Excerpt {
            query,
            id: 0,
            text: text.into(),
            score: 0.5,
            rerank_score: None,
            label: None,
        };
        let retrieval = Retrieval {
            queries: vec!["The plot is dull.".into(), "It ran long.".into()],
            excerpts: vec![
                excerpt(0, "The plot is gripping."),
                excerpt(0, "unused second helper"),
            ],
            millis: 1.0,
        };
        let edit = replace_with_retrieved(&item, &retrieval).ok().unwrap();
        assert_eq!(
            edit.text,
            "I saw it Monday. The plot is gripping. It ran long."
        );
        let nothing = Retrieval {
            queries: vec!["x".into()],
            ..Default::default()
        };
        assert!(replace_with_retrieved(&item, &nothing).is_err());
    }
}
