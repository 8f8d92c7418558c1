//! The counterfactual pipeline every method plugs into:
//!
//! 1. a [`ContextStage`] finds what the editor works from (CORE: label-flipped excerpts
//!    retrieved from a corpus, and their keywords; nothing for LLM-only);
//! 2. an [`Editor`] proposes an edit of the item toward its target label (an LLM prompt, a
//!    retrieved sentence put in place, …), or says why it has none;
//! 3. a [`Judge`] checks the proposal (the classifier's flip check; with `verify`, a proposal it
//!    rejects is a failed attempt, retried with the next attempt's seed);
//! 4. with a [`Ranking`], the editor proposes several candidates an attempt, each judged, and
//!    of those the judge passes (those it passes surely first) the one a language model finds
//!    least perplexing is kept.
//!
//! [`Pipeline::edit_one`] runs them for one item, returning the counterfactual with every
//! intermediate and failed attempt: [`Pipeline::context_for`], then
//! [`Pipeline::edit_in_context`]. `flipside generate` and the server's jobs run those two over a
//! dataset ([`batch::generate`]); `POST /api/edit` runs them once (with the user's keywords in
//! the context, when given). Methods ([`crate::methods`]) only supply the stages.

pub mod batch;
pub mod judge;
pub mod manifest;
pub mod store;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, ensure};
use flipside_shared::data::{Input, stable_hash};
use flipside_shared::infill::Rationale;
use flipside_shared::records::{
    Counterfactual, FailedAttempt, FluencyChoice, PromptRef, Provenance, Retrieval, Timing,
};
use tokio_util::sync::CancellationToken;

use crate::llm::{Abandoned, Fluency};

/// The item id of an output key ([`Item::key`]: `ITEM→TARGET`).
pub fn item_of_key(key: &str) -> &str {
    key.rsplit_once('→').map_or(key, |(item, _)| item)
}

/// What to edit: one example and the label to flip it to.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The example's id in its dataset.
    pub id: String,
    /// The text to edit (the hypothesis for NLI).
    pub text: String,
    pub premise: Option<String>,
    pub label: String,
    pub target: String,
}

impl Item {
    /// `ITEM→TARGET`, the item's key in outputs.
    pub fn key(&self) -> String {
        format!("{}→{}", self.id, self.target)
    }

    /// The classifier input for `text` in this item's place.
    pub fn input(&self, text: &str) -> Input {
        Input::with_premise(self.premise.as_deref(), text)
    }
}

/// What the context stage found for an item.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Retrieved helpers and their keywords (CORE, retrieve-only).
    pub retrieval: Option<Retrieval>,
    /// The masked rationale, or why the item has none, and the rule that chose it (AutoCAD:
    /// `saliency`, `random`, `saliency+opinions`).
    pub rationale: Option<(std::result::Result<Rationale, String>, String)>,
    pub millis: f64,
    /// Cancelled when the caller gives up on the item (a demo client that left or ran out of
    /// time): no further attempt starts, and an LLM editor stops at its next token.
    pub cancel: CancellationToken,
    /// Where an LLM editor hands its reply piece by piece as it is written (the demo shows
    /// it); none: the reply comes whole.
    pub written: Option<WrittenText>,
}

/// A listener for an LLM editor's reply as it is written: called with the attempt's number
/// and each new piece of its text.
#[derive(Clone)]
pub struct WrittenText(pub std::sync::Arc<WrittenPiece>);

/// What [`WrittenText`] calls: the attempt's number and a piece of the reply.
pub type WrittenPiece = dyn Fn(usize, &str) + Send + Sync;

impl std::fmt::Debug for WrittenText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WrittenText")
    }
}

/// Finds what an editor works from.
pub trait ContextStage: Send + Sync {
    fn context(&self, item: &Item) -> Result<Context>;
}

/// A proposed edit.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub text: String,
    /// How the editor made it (recorded with the counterfactual).
    pub provenance: Provenance,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// The judge's verdict on it, when the editor asked the judge itself (LASS: the first of
    /// its beam's hypotheses that passes the flip check and the perplexity filter); none: the
    /// pipeline asks.
    pub verdict: Option<Verdict>,
}

/// Why an attempt has no usable edit.
#[derive(Debug, Clone, PartialEq)]
pub struct NoEdit {
    pub reason: String,
    /// The model's raw reply (or the rejected edit), when there was one.
    pub reply: Option<String>,
    /// Tokens the attempt spent all the same (an LLM's unusable reply).
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// No later attempt can do better (the method has nothing in the item to edit): the item's
    /// attempts stop here.
    pub hopeless: bool,
}

impl NoEdit {
    pub fn new(reason: impl Into<String>, reply: Option<String>) -> Self {
        Self {
            reason: reason.into(),
            reply,
            prompt_tokens: 0,
            completion_tokens: 0,
            hopeless: false,
        }
    }

    /// A failure no later attempt can avoid.
    pub fn hopeless(reason: impl Into<String>) -> Self {
        Self {
            hopeless: true,
            ..Self::new(reason, None)
        }
    }

    /// The same failure, having spent `prompt` and `completion` tokens.
    pub fn spent(self, prompt: usize, completion: usize) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            ..self
        }
    }
}

/// Proposes edits: the method's core.
pub trait Editor: Send + Sync {
    /// The model that edits, recorded with each counterfactual (none for model-free editors).
    fn model(&self) -> Option<&str>;

    /// The prompt template it fills, if it prompts an LLM (saved with a run's settings).
    fn prompt(&self) -> Option<PromptRef> {
        None
    }

    /// One proposal for `item` toward `item.target`, sampled with `attempt.seed`. `Ok(Err(_))`
    /// is a failed attempt (recorded, then retried); `Err(_)` stops the run (I/O, a broken
    /// engine). An editor that ranks several outputs may ask `judge` about them in turn and
    /// propose the first it passes, with its [`Candidate::verdict`].
    fn propose(
        &self,
        item: &Item,
        context: &Context,
        attempt: Attempt,
        judge: &dyn Judge,
    ) -> Result<std::result::Result<Candidate, NoEdit>>;
}

/// Which try at an item a proposal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first try.
    pub number: usize,
    /// The seed its sampling draws from ([`attempt_seed`]).
    pub seed: u64,
}

/// A judge's decision on an edit.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the edit passes (the flip check: the classifier predicts the target label).
    pub passed: bool,
    /// The judge's label for the edit.
    pub label: String,
    /// The judge's probability of the target label.
    pub target_probability: f32,
    /// Every label's probability, in the judge's label order.
    pub probabilities: Vec<f32>,
    pub millis: f64,
}

impl Verdict {
    /// Why an edit of this verdict toward `target` is refused.
    pub fn refusal(&self, target: &str) -> String {
        format!(
            "did not flip: the classifier says {} (p({target}) = {:.3})",
            self.label, self.target_probability
        )
    }
}

/// Checks edits.
pub trait Judge: Send + Sync {
    /// Fails, before any work, when the judge cannot decide on `item` (an unknown target).
    fn check(&self, item: &Item) -> Result<()>;

    fn judge(&self, item: &Item, edited: &str) -> Result<Verdict>;
}

/// A judge for tests: it passes every edit but the texts it lists.
#[cfg(test)]
pub(crate) struct RefusingJudge(pub &'static [&'static str]);

#[cfg(test)]
impl Judge for RefusingJudge {
    fn check(&self, _item: &Item) -> Result<()> {
        Ok(())
    }

    fn judge(&self, item: &Item, edited: &str) -> Result<Verdict> {
        let passed = !self.0.contains(&edited);
        let label = if passed { &item.target } else { &item.label };
        Ok(Verdict {
            passed,
            label: label.clone(),
            target_probability: if passed { 0.9 } else { 0.1 },
            probabilities: vec![0.1, 0.9],
            millis: 1.0,
        })
    }
}

/// A method's stages, composed.
#[derive(Clone)]
pub struct Pipeline {
    /// The method's id, recorded with each counterfactual.
    pub method: &'static str,
    pub context: Option<Arc<dyn ContextStage>>,
    pub editor: Arc<dyn Editor>,
    /// The flip check: its verdict is the record's prediction, target probability and flip.
    pub judge: Arc<dyn Judge>,
    /// Count an edit the judge rejects as a failed attempt (by default it is kept, unflipped).
    pub verify: bool,
    /// Tries per item.
    pub max_attempts: usize,
    /// Several candidates per attempt, the most fluent kept (none: one per attempt).
    pub ranking: Option<Ranking>,
}

/// Everything one item's editing produced.
#[derive(Debug, Clone, Default)]
pub struct EditOutcome {
    pub context: Context,
    /// The counterfactual; `None` when every attempt failed.
    pub record: Option<Counterfactual>,
    /// The judge's verdict on the record's edit.
    pub verdict: Option<Verdict>,
    /// The attempts that made no counterfactual, in order.
    pub failures: Vec<FailedAttempt>,
    /// Time in each stage and tokens spent, over every attempt.
    pub timing: Timing,
}

impl Pipeline {
    /// Fails, before any work, when an item cannot be judged.
    pub fn check(&self, items: &[&Item]) -> Result<()> {
        items.iter().try_for_each(|item| self.judge.check(item))
    }

    /// One counterfactual of `item`: its context, then up to `max_attempts` edits.
    pub fn edit_one(&self, item: &Item, seed: u64) -> Result<EditOutcome> {
        self.judge.check(item)?;
        let context = self.context_for(item)?;
        self.edit_in_context(item, context, seed, 1, &mut |_| Ok(()))
    }

    /// The context stage's output for `item` (empty when the method has none).
    pub fn context_for(&self, item: &Item) -> Result<Context> {
        match &self.context {
            Some(stage) => stage.context(item),
            None => Ok(Context::default()),
        }
    }

    /// Attempts `first_attempt..=max_attempts` (a resumed item starts after its recorded
    /// failures) until one makes a counterfactual or fails hopelessly ([`NoEdit::hopeless`]). Each failed attempt goes to `on_failure` as
    /// it happens (a batch run saves it at once, so an error or a kill in a later attempt
    /// loses nothing), and into the outcome.
    pub fn edit_in_context(
        &self,
        item: &Item,
        context: Context,
        seed: u64,
        first_attempt: usize,
        on_failure: &mut dyn FnMut(&FailedAttempt) -> Result<()>,
    ) -> Result<EditOutcome> {
        let mut outcome = EditOutcome {
            timing: Timing {
                context_ms: context.millis,
                ..Timing::default()
            },
            context,
            ..EditOutcome::default()
        };
        for attempt in first_attempt..=self.max_attempts {
            ensure!(!outcome.context.cancel.is_cancelled(), Abandoned);
            let attempt_seed = attempt_seed(seed, item, attempt);
            let (tried, timing) = self.attempt(item, &outcome.context, attempt, attempt_seed)?;
            outcome.timing.add(&timing);
            match tried {
                Ok(kept) => {
                    let timing = Timing {
                        context_ms: outcome.context.millis,
                        ..timing
                    };
                    outcome.record = Some(self.record(item, &kept, attempt, timing));
                    outcome.verdict = Some(kept.verdict);
                    return Ok(outcome);
                }
                Err(Refused { failure, others }) => {
                    let hopeless = failure.hopeless;
                    let failure = FailedAttempt {
                        key: item.key(),
                        attempt,
                        reason: failure.reason,
                        reply: failure.reply,
                        others,
                    };
                    on_failure(&failure)?;
                    outcome.failures.push(failure);
                    if hopeless {
                        break;
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// One attempt: the editor's candidates (one, or [`Ranking::candidates`]), each judged, and
    /// the edit it keeps (with `verify`, one the judge passes; with a ranking, the most fluent
    /// of those), or why it keeps none and the other usable edits the judge refused. Also
    /// returns the attempt's time (beyond the context's) and tokens.
    fn attempt(
        &self,
        item: &Item,
        context: &Context,
        number: usize,
        seed: u64,
    ) -> Result<(std::result::Result<Kept, Refused>, Timing)> {
        let count = self.ranking.as_ref().map_or(1, |r| r.candidates.max(1));
        let mut timing = Timing::default();
        let mut eligible: Vec<Kept> = Vec::new();
        // Usable edits the judge refused, in the order proposed, and why it refused the first.
        let mut refused: Vec<String> = Vec::new();
        let mut first_refusal: Option<String> = None;
        let mut first_unusable: Option<NoEdit> = None;
        for index in 0..count {
            ensure!(index == 0 || !context.cancel.is_cancelled(), Abandoned);
            let seed = candidate_seed(seed, index);
            let started = Instant::now();
            let proposal =
                self.editor
                    .propose(item, context, Attempt { number, seed }, &*self.judge)?;
            timing.edit_ms += started.elapsed().as_secs_f64() * 1e3;
            let mut candidate = match proposal {
                Ok(candidate) => candidate,
                Err(no_edit) => {
                    timing.prompt_tokens += no_edit.prompt_tokens;
                    timing.completion_tokens += no_edit.completion_tokens;
                    first_unusable.get_or_insert(no_edit);
                    continue;
                }
            };
            timing.prompt_tokens += candidate.prompt_tokens;
            timing.completion_tokens += candidate.completion_tokens;
            let verdict = match candidate.verdict.take() {
                // Timed in the editor's time.
                Some(verdict) => verdict,
                None => {
                    let verdict = self.judge.judge(item, &candidate.text)?;
                    timing.judge_ms += verdict.millis;
                    verdict
                }
            };
            if verdict.passed || !self.verify {
                eligible.push(Kept {
                    candidate,
                    verdict,
                    seed,
                    chosen: None,
                });
                continue;
            }
            first_refusal.get_or_insert_with(|| verdict.refusal(&item.target));
            refused.push(candidate.text);
        }
        if eligible.is_empty() {
            let failure = match first_refusal {
                Some(reason) => {
                    let reply = refused.remove(0);
                    let reason = match count {
                        1 => reason,
                        _ => format!(
                            "{reason} on the first of {} usable candidates of {count}",
                            refused.len() + 1
                        ),
                    };
                    Refused {
                        failure: NoEdit::new(reason, Some(reply)),
                        others: refused,
                    }
                }
                None => {
                    let no_edit = first_unusable.expect("an attempt with no edit has a failure");
                    let no_edit = match count {
                        1 => no_edit,
                        _ => NoEdit {
                            reason: format!(
                                "none of {count} candidates is usable; the first: {}",
                                no_edit.reason
                            ),
                            ..no_edit
                        },
                    };
                    Refused {
                        failure: no_edit,
                        others: Vec::new(),
                    }
                }
            };
            return Ok((Err(failure), timing));
        }
        let kept = match &self.ranking {
            None => eligible.swap_remove(0),
            Some(ranking) => {
                let started = Instant::now();
                let (index, perplexity) = ranking.most_fluent(&eligible);
                timing.judge_ms += started.elapsed().as_secs_f64() * 1e3;
                let count_eligible = eligible.len();
                let mut kept = eligible.remove(index);
                let others = eligible.into_iter().map(|k| k.candidate.text);
                kept.chosen = Some(FluencyChoice {
                    model: ranking.fluency.model().to_string(),
                    perplexity,
                    candidates: count,
                    eligible: count_eligible,
                    others: others.chain(refused).collect(),
                });
                kept
            }
        };
        Ok((Ok(kept), timing))
    }

    fn record(&self, item: &Item, kept: &Kept, attempt: usize, timing: Timing) -> Counterfactual {
        Counterfactual {
            key: item.key(),
            item: item.id.clone(),
            method: self.method.to_string(),
            premise: item.premise.clone(),
            original: item.text.clone(),
            edited: kept.candidate.text.clone(),
            label: item.label.clone(),
            target: item.target.clone(),
            model: self.editor.model().map(str::to_string),
            seed: kept.seed,
            attempt,
            timing,
            prediction: kept.verdict.label.clone(),
            target_probability: kept.verdict.target_probability,
            flipped: kept.verdict.passed,
            provenance: kept.candidate.provenance.clone(),
            chosen: kept.chosen.clone(),
        }
    }
}

/// Why an attempt kept no edit, and its other usable edits the judge refused (beyond the one in
/// `failure`'s reply).
struct Refused {
    failure: NoEdit,
    others: Vec<String>,
}

/// An attempt's edit that may be kept, with its verdict.
struct Kept {
    candidate: Candidate,
    verdict: Verdict,
    /// The seed it was sampled with ([`candidate_seed`]).
    seed: u64,
    /// How it was chosen among the attempt's candidates, when it was.
    chosen: Option<FluencyChoice>,
}

/// Several candidates per attempt, the one a language model finds least perplexing kept (of
/// those the judge flips surely, when there are any): a cheap editor (AutoCAD's infiller)
/// samples a few and keeps its most fluent.
#[derive(Clone)]
pub struct Ranking {
    pub fluency: Arc<dyn Fluency>,
    /// Candidates per attempt.
    pub candidates: usize,
}

/// The judge's probability of the target at which a ranking trusts a flip: candidates it flips
/// at least this surely are preferred to less sure ones, however fluent. On `bench cf`'s items,
/// 41 of 196 AutoCAD edits kept as the most fluent of 4 flipped the filter with p < 0.7, and
/// the independent judge agreed on 54 % of those, on 98 % of the rest.
pub const CONFIDENT_FLIP: f32 = 0.7;

impl Ranking {
    /// Which of `eligible` (non-empty) is the most fluent of those the judge flips with at
    /// least [`CONFIDENT_FLIP`] (of all, when none is), the first on ties, a text the model
    /// cannot score ranking last; and its perplexity.
    fn most_fluent(&self, eligible: &[Kept]) -> (usize, Option<f64>) {
        let sure =
            |kept: &Kept| kept.verdict.passed && kept.verdict.target_probability >= CONFIDENT_FLIP;
        let any_sure = eligible.iter().any(sure);
        // Only the candidates that can win are scored (together).
        let contenders: Vec<usize> = (0..eligible.len())
            .filter(|&index| !any_sure || sure(&eligible[index]))
            .collect();
        let texts: Vec<&str> = contenders
            .iter()
            .map(|&index| eligible[index].candidate.text.as_str())
            .collect();
        let perplexities = self.fluency.perplexities(&texts);
        let scored: Vec<(usize, Option<f64>)> = contenders
            .into_iter()
            .zip(perplexities)
            .map(|(index, perplexity)| (index, perplexity.ok().filter(|p| p.is_finite())))
            .collect();
        let rank = |perplexity: Option<f64>| perplexity.unwrap_or(f64::INFINITY);
        scored
            .into_iter()
            .reduce(|best, next| match rank(next.1) < rank(best.1) {
                true => next,
                false => best,
            })
            .expect("at least one eligible edit")
    }
}

/// The seed of an attempt's candidate `index`: the attempt's own seed for the first, so that one
/// candidate per attempt samples what an attempt without a ranking samples.
pub fn candidate_seed(attempt_seed: u64, index: usize) -> u64 {
    match index {
        0 => attempt_seed,
        _ => stable_hash(attempt_seed, &format!("candidate {index}")) & 0xffff_ffff,
    }
}

/// The seed of one attempt: a function of the run's seed, the item's content and target and
/// the attempt number — not of where the item sits in a dataset — so that `generate`, a job and
/// the demo sample the same edit for the same text.
pub fn attempt_seed(seed: u64, item: &Item, attempt: usize) -> u64 {
    let content = format!(
        "{}\u{1f}{}\u{1f}{}#{attempt}",
        item.premise.as_deref().unwrap_or_default(),
        item.text,
        item.target
    );
    stable_hash(seed, &content) & 0xffff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use flipside_shared::records::CoreProvenance;

    /// Appends the attempt's seed to the text.
    struct SeedEditor;

    impl Editor for SeedEditor {
        fn model(&self) -> Option<&str> {
            Some("seed-editor")
        }

        fn propose(
            &self,
            item: &Item,
            _context: &Context,
            attempt: Attempt,
            _judge: &dyn Judge,
        ) -> Result<std::result::Result<Candidate, NoEdit>> {
            Ok(Ok(Candidate {
                text: format!("{} {}", item.text, attempt.seed),
                provenance: Provenance::Core(CoreProvenance::default()),
                prompt_tokens: 10,
                completion_tokens: 2,
                verdict: None,
            }))
        }
    }

    /// Passes an edit whose last number is even.
    struct EvenJudge;

    impl Judge for EvenJudge {
        fn check(&self, _item: &Item) -> Result<()> {
            Ok(())
        }

        fn judge(&self, item: &Item, edited: &str) -> Result<Verdict> {
            let seed: u64 = edited.rsplit(' ').next().unwrap().parse().unwrap();
            let passed = seed.is_multiple_of(2);
            Ok(Verdict {
                passed,
                label: if passed {
                    item.target.clone()
                } else {
                    item.label.clone()
                },
                target_probability: if passed { 0.9 } else { 0.1 },
                probabilities: vec![0.1, 0.9],
                millis: 1.0,
            })
        }
    }

    fn pipeline(verify: bool) -> Pipeline {
        Pipeline {
            method: "test",
            context: None,
            editor: Arc::new(SeedEditor),
            judge: Arc::new(EvenJudge),
            verify,
            max_attempts: 12,
            ranking: None,
        }
    }

    #[test]
    fn a_hopeless_failure_ends_the_item_s_attempts() {
        let run = Pipeline {
            editor: Arc::new(ScriptedEditor::new(|_| {
                Ok(Err(NoEdit::hopeless("nothing to edit")))
            })),
            ..pipeline(true)
        };
        let outcome = run.edit_one(&item("7", "A film."), 3).unwrap();
        assert!(outcome.record.is_none());
        let reasons: Vec<_> = outcome
            .failures
            .iter()
            .map(|f| (f.attempt, &*f.reason))
            .collect();
        assert_eq!(reasons, [(1, "nothing to edit")]);
    }

    #[test]
    fn an_edit_the_editor_had_judged_is_not_judged_again() {
        /// Asks the judge about "A film. 1" and "A film. 4" in turn and proposes the first it
        /// passes.
        struct JudgingEditor;
        impl Editor for JudgingEditor {
            fn model(&self) -> Option<&str> {
                None
            }
            fn propose(
                &self,
                item: &Item,
                _context: &Context,
                _attempt: Attempt,
                judge: &dyn Judge,
            ) -> Result<std::result::Result<Candidate, NoEdit>> {
                for text in ["A film. 1", "A film. 4"] {
                    let verdict = judge.judge(item, text)?;
                    if verdict.passed {
                        return Ok(Ok(Candidate {
                            text: text.into(),
                            provenance: Provenance::Core(CoreProvenance::default()),
                            prompt_tokens: 3,
                            completion_tokens: 1,
                            verdict: Some(verdict),
                        }));
                    }
                }
                Ok(Err(NoEdit::new("none passes", None)))
            }
        }
        let run = Pipeline {
            editor: Arc::new(JudgingEditor),
            max_attempts: 1,
            ..pipeline(true)
        };
        let record = run
            .edit_one(&item("7", "A film."), 3)
            .unwrap()
            .record
            .unwrap();
        assert_eq!(record.edited, "A film. 4");
        assert!(record.flipped);
        assert_eq!(record.target_probability, 0.9);
        // The editor's judging is its own time, not the pipeline's judging.
        assert_eq!(record.timing.judge_ms, 0.0);
    }

    #[test]
    fn verified_runs_retry_rejected_edits_with_each_attempts_seed() {
        let item = item("7", "A wonderful film.");
        let outcome = pipeline(true).edit_one(&item, 3).unwrap();
        let record = outcome.record.unwrap();
        let attempts = record.attempt;
        assert_eq!(outcome.failures.len(), attempts - 1);
        for (failure, attempt) in outcome.failures.iter().zip(1..) {
            assert_eq!(failure.attempt, attempt);
            assert!(failure.reason.starts_with("did not flip"), "{failure:?}");
            let seed = attempt_seed(3, &item, attempt);
            assert_eq!(failure.reply, Some(format!("A wonderful film. {seed}")));
        }
        assert_eq!(record.seed, attempt_seed(3, &item, attempts));
        assert!(record.seed.is_multiple_of(2));
        assert!(record.flipped);
        assert_eq!(record.key, "7→negative");
        assert_eq!(record.model.as_deref(), Some("seed-editor"));
        assert_eq!(record.timing.prompt_tokens, 10);
        assert_eq!(outcome.timing.prompt_tokens, 10 * attempts);

        // Unverified, the first edit is kept, flipped or not.
        let first = pipeline(false).edit_one(&item, 3).unwrap();
        assert!(first.failures.is_empty());
        assert_eq!(first.record.unwrap().attempt, 1);
        // A resumed item starts after its earlier attempts and gets the same edit.
        let resumed = pipeline(true)
            .edit_in_context(&item, Context::default(), 3, attempts, &mut |_| Ok(()))
            .unwrap();
        assert!(resumed.failures.is_empty());
        assert_eq!(resumed.record.unwrap().edited, record.edited);
    }

    /// Perplexity: the text's last number modulo 1,000.
    struct SeedFluency;

    impl Fluency for SeedFluency {
        fn model(&self) -> &str {
            "seed-fluency"
        }

        fn perplexity(&self, text: &str) -> Result<f64> {
            let seed: u64 = text.rsplit(' ').next().unwrap().parse()?;
            Ok((seed % 1000) as f64)
        }
    }

    #[test]
    fn a_ranking_keeps_the_most_fluent_candidate_that_flips() {
        let item = item("7", "A wonderful film.");
        let ranked = |verify: bool| Pipeline {
            ranking: Some(Ranking {
                fluency: Arc::new(SeedFluency),
                candidates: 6,
            }),
            ..pipeline(verify)
        };
        let outcome = ranked(true).edit_one(&item, 3).unwrap();
        let record = outcome.record.unwrap();
        let seeds = |attempt: usize| -> Vec<u64> {
            let seed = attempt_seed(3, &item, attempt);
            (0..6).map(|index| candidate_seed(seed, index)).collect()
        };
        let flipped: Vec<u64> = seeds(record.attempt)
            .into_iter()
            .filter(|seed| seed.is_multiple_of(2))
            .collect();
        let best = *flipped.iter().min_by_key(|seed| *seed % 1000).unwrap();
        assert_eq!(record.seed, best);
        assert_eq!(record.edited, format!("A wonderful film. {best}"));
        let chosen = record.chosen.unwrap();
        assert_eq!(chosen.model, "seed-fluency");
        assert_eq!(chosen.perplexity, Some((best % 1000) as f64));
        assert_eq!((chosen.candidates, chosen.eligible), (6, flipped.len()));
        // The other five, passed over or refused, are kept for the record.
        let mut proposed: Vec<String> = chosen.others.clone();
        proposed.push(record.edited.clone());
        proposed.sort();
        let mut all: Vec<String> = seeds(record.attempt)
            .iter()
            .map(|seed| format!("A wonderful film. {seed}"))
            .collect();
        all.sort();
        assert_eq!(proposed, all);
        // An attempt before it found none that flips: its refused edits are in its failure.
        for failure in &outcome.failures {
            assert!(failure.reason.starts_with("did not flip"), "{failure:?}");
            assert!(
                failure.reason.ends_with("of 6 usable candidates of 6"),
                "{failure:?}"
            );
            assert_eq!(failure.others.len(), 5);
        }
        // Every candidate was proposed and judged: 10 prompt tokens each.
        assert_eq!(record.timing.prompt_tokens, 60);

        // Unverified, the first attempt's edit: the most fluent of those that flip surely,
        // else of all.
        let unverified = ranked(false).edit_one(&item, 3).unwrap().record.unwrap();
        let flipped = seeds(1).into_iter().filter(|seed| seed.is_multiple_of(2));
        let best = match flipped.min_by_key(|seed| seed % 1000) {
            Some(seed) => seed,
            None => seeds(1).into_iter().min_by_key(|seed| seed % 1000).unwrap(),
        };
        assert_eq!((unverified.attempt, unverified.seed), (1, best));
        // A flip the judge is unsure of (p below CONFIDENT_FLIP) gives way to a surer one.
        let sure = Kept {
            candidate: Candidate {
                text: "sure 999".into(),
                provenance: Provenance::Core(CoreProvenance::default()),
                prompt_tokens: 0,
                completion_tokens: 0,
                verdict: None,
            },
            verdict: Verdict {
                passed: true,
                label: "negative".into(),
                target_probability: CONFIDENT_FLIP,
                probabilities: vec![0.3, 0.7],
                millis: 0.0,
            },
            seed: 999,
            chosen: None,
        };
        let unsure = Kept {
            candidate: Candidate {
                text: "unsure 1".into(),
                ..sure.candidate.clone()
            },
            verdict: Verdict {
                target_probability: 0.6,
                ..sure.verdict.clone()
            },
            seed: 1,
            chosen: None,
        };
        let ranking = Ranking {
            fluency: Arc::new(SeedFluency),
            candidates: 2,
        };
        assert_eq!(ranking.most_fluent(&[unsure, sure]), (1, Some(999.0)));
        // The first candidate is what an attempt without a ranking samples.
        assert_eq!(seeds(1)[0], attempt_seed(3, &item, 1));
    }

    #[test]
    fn a_cancelled_item_starts_no_further_attempt() {
        let item = item("7", "A wonderful film.");
        let context = Context::default();
        context.cancel.cancel();
        let error = pipeline(true)
            .edit_in_context(&item, context, 3, 1, &mut |_| Ok(()))
            .unwrap_err();
        assert!(error.is::<Abandoned>(), "{error:#}");
    }

    /// Proposes what its script says for each call (1, 2, …).
    struct ScriptedEditor {
        calls: std::sync::Mutex<usize>,
        script: Proposal,
    }

    type Proposal = fn(usize) -> Result<std::result::Result<Candidate, NoEdit>>;

    impl ScriptedEditor {
        fn new(script: Proposal) -> Self {
            Self {
                calls: Default::default(),
                script,
            }
        }
    }

    impl Editor for ScriptedEditor {
        fn model(&self) -> Option<&str> {
            None
        }

        fn propose(
            &self,
            _item: &Item,
            _context: &Context,
            _attempt: Attempt,
            _judge: &dyn Judge,
        ) -> Result<std::result::Result<Candidate, NoEdit>> {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            (self.script)(*calls)
        }
    }

    #[test]
    fn each_failed_attempt_is_handed_on_before_a_later_attempt_breaks() {
        let pipeline = Pipeline {
            // Fails its first attempt, then breaks.
            editor: Arc::new(ScriptedEditor::new(|call| match call {
                1 => Ok(Err(
                    NoEdit::new("empty reply", Some(String::new())).spent(40, 0)
                )),
                _ => anyhow::bail!("the engine broke"),
            })),
            ..pipeline(true)
        };
        let mut handed = Vec::new();
        let item = item("7", "A wonderful film.");
        let error = pipeline
            .edit_in_context(&item, Context::default(), 3, 1, &mut |failure| {
                handed.push(failure.clone());
                Ok(())
            })
            .unwrap_err();
        assert_eq!(error.to_string(), "the engine broke");
        assert_eq!(handed.len(), 1);
        assert_eq!(
            (handed[0].attempt, handed[0].reason.as_str()),
            (1, "empty reply")
        );
    }

    fn item(id: &str, text: &str) -> Item {
        Item {
            id: id.into(),
            text: text.into(),
            premise: None,
            label: "positive".into(),
            target: "negative".into(),
        }
    }

    #[test]
    fn attempt_seeds_depend_on_content_not_on_the_item_id() {
        let a = item("17", "A wonderful film.");
        let b = item("demo", "A wonderful film.");
        assert_eq!(attempt_seed(7, &a, 1), attempt_seed(7, &b, 1));
        assert_ne!(attempt_seed(7, &a, 1), attempt_seed(7, &a, 2));
        assert_ne!(attempt_seed(7, &a, 1), attempt_seed(8, &a, 1));
        let other = item("17", "A dreadful film.");
        assert_ne!(attempt_seed(7, &a, 1), attempt_seed(7, &other, 1));
        assert!(attempt_seed(7, &a, 1) <= 0xffff_ffff);
    }
}
