//! LASS (Zhang et al., COLING 2025) reproduction: the Dis-AE recombines the content of the item
//! (the content parent) with the target label's sentiment — its learnt label vector, or the
//! sentiment of a text with that label (a sentiment parent) — and decodes a new text. Outputs
//! the fluency model finds too perplexing are failed attempts (the paper's perplexity filter,
//! which also passes an output as fluent as its source); the pipeline's flip check is the
//! paper's sentiment filter, always on for this method.
//!
//! An item without an opinion word fails at once and for good ([`NoEdit::hopeless`]): a copying
//! Dis-AE would reproduce it unchanged. A hypothesis that writes a word of the target label's
//! opinion lexicon under a negation ("would not love") has kept the source's label, whatever the
//! classifier says: it fails unscored ([`negated_new_word`]).
//!
//! The first attempt decodes with the paper's beam search (4 beams, at most 70 tokens) and
//! keeps the first of its finished hypotheses, in the search's order, that the flip check (the
//! pipeline's judge, asked by the editor) passes and then the perplexity filter: the paper's two
//! filters over the search's outputs (on `bench cf`, 65 of 200 items against 53 with the best
//! hypothesis alone). The hypotheses are scored one by one by one scorer, each reusing what the
//! language model evaluated of the openings it shares with those before it, and the source only
//! when an output is above the threshold; a hypothesis more than twice over its bar ends the
//! scoring (0.70–0.72 CPU-seconds an accepted edit on `bench cf` against 0.74–0.76 with every
//! changed hypothesis and the source scored in one batch). Later attempts sample (nucleus,
//! seeded by the attempt), and with sentiment parents each draws another parent. With the label
//! vector, the beam attempt is final unless the flip check saw some of its hypotheses and
//! passed none: the sampled attempts after a beam whose hypotheses fail the perplexity filter
//! kept about one item in 200 tries, and after a beam with nothing to judge (every hypothesis
//! unchanged or negating a new opinion word) 0 of 22 on `bench cf`, but a small Dis-AE's beam
//! may never write the other label.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use flipside_shared::models::dis_ae::reproduce::{TargetSentiment, lass_decoding};
use flipside_shared::models::search::{DecodeSettings, Search};
use flipside_shared::records::{LassProvenance, Provenance};
use serde::{Deserialize, Serialize};

use super::{EditSettings, Method, MethodCard, Models, Stages};
use crate::editing::keywords::Lexicons;
use crate::editing::negation::negated_new_word;
use crate::lass::model::Reproduce;
use crate::llm::{Fluency, Scorer};
use crate::pipeline::{Attempt, Candidate, Context, Editor, Item, Judge, NoEdit};

/// LASS's reproduction with the Dis-AE.
pub struct Lass;

static LASS: MethodCard = MethodCard {
    id: "lass",
    label: "LASS (Dis-AE)",
    description: "Recombine the item's content with the target label's sentiment in a small \
                  disentangled autoencoder trained on LLM-made pairs, keeping fluent outputs the \
                  classifier calls the target label",
    retrieves: false,
    uses_llm: false,
    uses_keywords: false,
    infills: false,
    reproduces: true,
    always_verifies: true,
    candidates: 1,
};

/// Where a reproduced text's sentiment comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SentimentSource {
    /// The target label's learnt vector (deterministic under beam search).
    #[default]
    Label,
    /// A text with the target label, drawn by the attempt's seed from the ones the Dis-AE was
    /// trained on (the paper's "any negative review" as the sentiment parent).
    Parent,
}

/// How LASS reproduces.
#[derive(Debug, Clone, PartialEq)]
pub struct ReproductionSettings {
    pub sentiment: SentimentSource,
    /// Outputs with a higher perplexity under the fluency model than this and than their
    /// source are failed attempts (none: no fluency filter).
    pub max_perplexity: Option<f64>,
}

impl Default for ReproductionSettings {
    fn default() -> Self {
        Self {
            sentiment: SentimentSource::Label,
            max_perplexity: Some(DEFAULT_MAX_PERPLEXITY),
        }
    }
}

/// The perplexity filter's default threshold (the paper kept GPT-2 perplexity < 125).
pub const DEFAULT_MAX_PERPLEXITY: f64 = 125.0;

impl Method for Lass {
    fn card(&self) -> &'static MethodCard {
        &LASS
    }

    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages> {
        let reproducer = models
            .reproducer
            .clone()
            .context("LASS needs a Dis-AE: train one with `flipside lass train`")?;
        let fluency = match settings.reproduction.max_perplexity {
            Some(threshold) => Some(FluencyFilter {
                model: models.fluency.clone().context(
                    "LASS's perplexity filter needs a fluency model (or turn the filter off)",
                )?,
                threshold,
                sources: Mutex::default(),
            }),
            None => None,
        };
        Ok(Stages {
            context: None,
            editor: Arc::new(DisAeEditor {
                reproducer,
                lexicons: models.lexicons.clone(),
                fluency,
                sentiment: settings.reproduction.sentiment,
            }),
        })
    }
}

/// Reproduces the item with the target label's sentiment.
struct DisAeEditor {
    reproducer: Arc<dyn Reproduce>,
    /// The opinion words whose negation fails an output ([`negated_new_word`]).
    lexicons: Arc<Lexicons>,
    fluency: Option<FluencyFilter>,
    sentiment: SentimentSource,
}

/// LASS's perplexity filter: an output passes when its perplexity is at most the threshold (the
/// paper's GPT-2 < 125) or at most its source's. The second arm is ours: under SmolLM2-135M,
/// 62 % of `bench cf`'s originals (short sentences from four review sets) are above 125
/// themselves, and an output as fluent as the text it rewrites is not unreadable.
struct FluencyFilter {
    model: Arc<dyn Fluency>,
    threshold: f64,
    /// The sources' perplexities, by text (scored once for all of an item's attempts).
    sources: Mutex<HashMap<String, f64>>,
}

impl FluencyFilter {
    /// The filter for `source`'s outputs, scored one by one with one scorer, so that each
    /// reuses what the model evaluated of the ones before it; the source is scored only when an
    /// output is above the threshold (and then once for all of its attempts).
    fn for_source<'a>(&'a self, source: &'a str) -> SourceFilter<'a> {
        SourceFilter {
            filter: self,
            source,
            scorer: self.model.scorer(),
        }
    }

    /// The perplexity of `source` (an item's text), remembered for its later attempts; none:
    /// the model cannot score it (a single token; or a failed pass, which is not remembered),
    /// which lends no second chance.
    fn source_perplexity(&self, source: &str, scorer: &mut dyn Scorer) -> Option<f64> {
        let remembered = self
            .sources
            .lock()
            .expect("not poisoned")
            .get(source)
            .copied();
        if remembered.is_some() {
            return remembered;
        }
        let perplexity = scorer.perplexities(&[source]).remove(0).ok()?;
        let mut sources = self.sources.lock().expect("not poisoned");
        if sources.len() >= MAX_CACHED_SOURCES {
            sources.clear();
        }
        sources.insert(source.to_string(), perplexity);
        Some(perplexity)
    }
}

/// [`FluencyFilter`] over one source's outputs.
struct SourceFilter<'a> {
    filter: &'a FluencyFilter,
    source: &'a str,
    scorer: Box<dyn Scorer + 'a>,
}

/// Why an output fails the perplexity filter.
struct Disfluent {
    why: String,
    /// It is more than [`FAR_OVER_THE_BAR`] times over the bar: the beam's later hypotheses,
    /// which share most of its words, are not worth scoring.
    far: bool,
}

/// How far over its bar (the threshold, or its source's perplexity when higher) an output's
/// perplexity ends the scoring of the beam's hypotheses after it. On `bench cf` the 14 items a
/// later hypothesis rescued had their first at most 1.55× over it.
const FAR_OVER_THE_BAR: f64 = 2.0;

impl SourceFilter<'_> {
    /// `output`'s perplexity if it passes (at most the threshold, or at most its source's).
    fn check(&mut self, output: &str) -> std::result::Result<f64, Disfluent> {
        let filter = self.filter;
        let model = filter.model.model();
        let perplexity = match self.scorer.perplexities(&[output]).remove(0) {
            Ok(perplexity) => perplexity,
            Err(error) => {
                let why = format!("no perplexity: {error}");
                return Err(Disfluent { why, far: false });
            }
        };
        if perplexity <= filter.threshold {
            return Ok(perplexity);
        }
        let source = filter.source_perplexity(self.source, &mut *self.scorer);
        let bar = source.map_or(filter.threshold, |s| s.max(filter.threshold));
        if perplexity <= bar {
            return Ok(perplexity);
        }
        let why = match source {
            Some(source) => format!(
                "perplexity {perplexity:.1} under {model} is above {} and the source's {source:.1}",
                filter.threshold
            ),
            None => format!(
                "perplexity {perplexity:.1} under {model} is above {} (the source has none)",
                filter.threshold
            ),
        };
        let far = perplexity > FAR_OVER_THE_BAR * bar;
        Err(Disfluent { why, far })
    }
}

/// Sources whose perplexity the filter remembers (a run's concurrent items, many times over).
const MAX_CACHED_SOURCES: usize = 4096;

/// Decoding for `attempt`: the paper's beam search first, then seeded nucleus sampling.
fn decoding(attempt: Attempt) -> (DecodeSettings, String) {
    let paper = lass_decoding();
    if attempt.number <= 1 {
        return (paper, "beam 4".into());
    }
    let (top_p, temperature) = (0.9, 0.5);
    (
        DecodeSettings {
            search: Search::Nucleus {
                top_p,
                temperature,
                seed: attempt.seed,
            },
            ..paper
        },
        format!("nucleus p {top_p} t {temperature}"),
    )
}

impl Editor for DisAeEditor {
    fn model(&self) -> Option<&str> {
        Some(self.reproducer.name())
    }

    fn propose(
        &self,
        item: &Item,
        _context: &Context,
        attempt: Attempt,
        judge: &dyn Judge,
    ) -> Result<std::result::Result<Candidate, NoEdit>> {
        if !self.reproducer.can_rewrite(&item.text) {
            return Ok(Err(NoEdit::hopeless(
                "no opinion word to rewrite (the Dis-AE would copy the text unchanged)",
            )));
        }
        let parent = match self.sentiment {
            SentimentSource::Label => None,
            SentimentSource::Parent => {
                let parents = self.reproducer.sentiment_parents(&item.target);
                if parents.is_empty() {
                    return Ok(Err(NoEdit::new(
                        format!(
                            "the Dis-AE has no {} text to lend its sentiment",
                            item.target
                        ),
                        None,
                    )));
                }
                Some(parents[attempt.seed as usize % parents.len()].as_str())
            }
        };
        let parents = parent.map(|p| [p]);
        let sentiment = match &parents {
            Some(parents) => TargetSentiment::Parents(parents),
            None => TargetSentiment::Label(&item.target),
        };
        let (settings, search) = decoding(attempt);
        let hypotheses = self
            .reproducer
            .reproduce_all(&[&item.text], sentiment, &settings)?
            .remove(0);
        let count = hypotheses.len();
        let source = item.text.trim();
        let unchanged = source.to_lowercase();
        let target_words = self.lexicons.of_polarity(&item.target);
        let mut fluency = self.fluency.as_ref().map(|f| f.for_source(source));
        // Why the first hypothesis worth checking failed, else why the first failed.
        let mut first_checked: Option<NoEdit> = None;
        let mut first_failure: Option<NoEdit> = None;
        let mut seen: Vec<String> = Vec::new();
        // Hypotheses the flip check saw, and those it passed.
        let (mut judged, mut flipped) = (0, 0);
        // In the search's order, the first changed hypothesis that flips and that the fluency
        // filter passes; the flip check (one classifier pass) before the filter (a language
        // model's pass over it).
        for (rank, reproduced) in hypotheses.into_iter().enumerate() {
            let text = reproduced.text.trim().to_string();
            if text.is_empty() {
                first_failure.get_or_insert(NoEdit::new("the Dis-AE decoded nothing", None));
                continue;
            }
            if text.to_lowercase() == unchanged {
                let why = "the Dis-AE reproduced the text unchanged";
                first_failure.get_or_insert(NoEdit::new(why, Some(text)));
                continue;
            }
            if seen.contains(&text) {
                continue;
            }
            seen.push(text.clone());
            if let Some(negated) =
                target_words.and_then(|words| negated_new_word(source, &text, words))
            {
                first_failure.get_or_insert(NoEdit::new(negated.to_string(), Some(text)));
                continue;
            }
            let verdict = judge.judge(item, &text)?;
            judged += 1;
            if !verdict.passed {
                let why = verdict.refusal(&item.target);
                first_checked.get_or_insert(NoEdit::new(why, Some(text)));
                continue;
            }
            flipped += 1;
            let perplexity = match fluency.as_mut().map(|filter| filter.check(&text)) {
                None => None,
                Some(Ok(perplexity)) => Some(perplexity),
                Some(Err(Disfluent { why, far })) => {
                    first_checked.get_or_insert(NoEdit::new(why, Some(text)));
                    if far {
                        break;
                    }
                    continue;
                }
            };
            return Ok(Ok(Candidate {
                text,
                provenance: Provenance::Lass(LassProvenance {
                    sentiment_parent: parent.map(str::to_string),
                    search: match settings.search {
                        Search::Beam { .. } => {
                            format!("{search}, hypothesis {} of {count}", rank + 1)
                        }
                        _ => search.clone(),
                    },
                    mean_log_prob: reproduced.log_prob / (reproduced.tokens + 1) as f64,
                    perplexity,
                }),
                prompt_tokens: 0,
                completion_tokens: 0,
                verdict: Some(verdict),
            }));
        }
        // With the label vector the beam search is deterministic, and the sampled attempts
        // after a beam whose hypotheses fail the filter kept about one item in 200 tries on
        // `bench cf`, and after a beam with nothing to judge none in 22. After a beam whose
        // judged hypotheses all fail the flip check they go on: a small Dis-AE's beam may never
        // write the other label.
        let never_flipped = judged > 0 && flipped == 0;
        let hopeless =
            self.sentiment == SentimentSource::Label && attempt.number == 1 && !never_flipped;
        let failure = first_checked.or(first_failure);
        Ok(Err(NoEdit {
            hopeless,
            ..failure.expect("a search ends with an output")
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flipside_shared::models::dis_ae::reproduce::Reproduction;

    use super::*;
    use crate::pipeline::RefusingJudge;

    /// Perplexities from a table, counting the calls.
    struct TableFluency(HashMap<&'static str, f64>, AtomicUsize);

    impl Fluency for TableFluency {
        fn model(&self) -> &str {
            "table"
        }

        fn perplexity(&self, text: &str) -> Result<f64> {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.get(text).copied().context("not in the table")
        }
    }

    /// A Dis-AE whose search ends with these texts, best first, for any input.
    struct ScriptedReproducer(Vec<&'static str>);

    impl Reproduce for ScriptedReproducer {
        fn name(&self) -> &str {
            "scripted"
        }
        fn sentiment_parents(&self, _label: &str) -> &[String] {
            &[]
        }
        fn can_rewrite(&self, _text: &str) -> bool {
            true
        }
        fn reproduce_all(
            &self,
            contents: &[&str],
            _sentiment: TargetSentiment,
            _settings: &DecodeSettings,
        ) -> Result<Vec<Vec<Reproduction>>> {
            let outputs = self.0.iter().map(|text| Reproduction {
                text: text.to_string(),
                tokens: 3,
                log_prob: -1.0,
                finished: true,
            });
            Ok(vec![outputs.collect(); contents.len()])
        }
    }

    #[test]
    fn the_editor_keeps_the_first_hypothesis_that_flips_and_reads_fluently() {
        let table = [("the source", 300.0), ("bad bad", 500.0), ("awful", 80.0)];
        let table = table
            .into_iter()
            .chain([("poor", 60.0), ("dire dire", 1000.0)]);
        let fluency = Arc::new(TableFluency(table.collect(), AtomicUsize::new(0)));
        let scored = || fluency.1.load(Ordering::Relaxed);
        let editor = |hypotheses: Vec<&'static str>| DisAeEditor {
            reproducer: Arc::new(ScriptedReproducer(hypotheses)),
            lexicons: Arc::new(Lexicons::of_opinions(&["good"], &["awful", "poor", "bad"])),
            fluency: Some(FluencyFilter {
                model: fluency.clone(),
                threshold: 125.0,
                sources: Mutex::default(),
            }),
            sentiment: SentimentSource::Label,
        };
        let item = Item {
            id: "1".into(),
            text: "the source".into(),
            premise: None,
            label: "positive".into(),
            target: "negative".into(),
        };
        let first = Attempt { number: 1, seed: 7 };
        let propose = |hypotheses: Vec<&'static str>, judge: &dyn Judge, attempt: Attempt| {
            editor(hypotheses)
                .propose(&item, &Context::default(), attempt, judge)
                .unwrap()
        };
        let passes_all = RefusingJudge(&[]);
        // The unchanged text and a repeat are passed over, "bad bad" fails the filter (above
        // 125 and the source's 300), and "awful" is kept; "poor" is never scored.
        let hypotheses = vec!["bad bad", "The source", "bad bad", "awful", "poor"];
        let kept = propose(hypotheses.clone(), &passes_all, first).unwrap();
        assert_eq!(kept.text, "awful");
        assert!(kept.verdict.as_ref().unwrap().passed);
        let Provenance::Lass(provenance) = kept.provenance.clone() else {
            panic!("a LASS edit");
        };
        assert_eq!(provenance.search, "beam 4, hypothesis 4 of 5");
        assert_eq!(provenance.perplexity, Some(80.0));
        // "bad bad", its source (needed once an output is above 125), then "awful".
        assert_eq!(scored(), 3);
        // A hypothesis the judge refuses is not scored: the next one is.
        let kept = propose(hypotheses, &RefusingJudge(&["awful"]), first).unwrap();
        assert_eq!(kept.text, "poor");
        assert_eq!(scored(), 3 + 3);
        // None passes: the failure is the first changed text's, not the unchanged one's.
        let failed = propose(vec!["The source", "bad bad"], &passes_all, first).unwrap_err();
        assert_eq!(failed.reply.as_deref(), Some("bad bad"));
        assert!(
            failed.reason.starts_with("perplexity 500.0"),
            "{}",
            failed.reason
        );
        // With the label vector, the beam attempt's failure is final; a sampled attempt's is not.
        assert!(failed.hopeless);
        let second = Attempt { number: 2, seed: 8 };
        let failed = propose(vec!["The source", "bad bad"], &passes_all, second).unwrap_err();
        assert!(!failed.hopeless);
        // A hypothesis far over its bar (twice the source's 300) ends the beam's scoring.
        let calls = scored();
        let failed = propose(vec!["dire dire", "awful"], &passes_all, first).unwrap_err();
        assert!(failed.reason.starts_with("perplexity 1000.0"));
        assert_eq!(scored(), calls + 2);
        // Nothing flips: the refusal is the failure, and nothing is scored.
        let failed = propose(vec!["awful"], &RefusingJudge(&["awful"]), first).unwrap_err();
        assert!(
            failed.reason.starts_with("did not flip"),
            "{}",
            failed.reason
        );
        assert_eq!(scored(), calls + 2);
        // Sampled attempts may write the other label where the beam did not.
        assert!(!failed.hopeless);
        // A target-label word under a negation fails unjudged and unscored ("not bad" is not
        // negative).
        let kept = propose(
            vec!["not bad", "awful"],
            &RefusingJudge(&["not bad"]),
            first,
        )
        .unwrap();
        assert_eq!(kept.text, "awful");
        assert_eq!(scored(), calls + 3);
        let failed = propose(vec!["not bad"], &passes_all, first).unwrap_err();
        assert_eq!(
            failed.reason,
            "its new opinion word \"bad\" is negated (\"not\" before it), so the text keeps its label"
        );
        assert!(failed.hopeless);
    }

    #[test]
    fn outputs_pass_under_the_threshold_or_as_fluent_as_their_source() {
        let table = [("fluent", 80.0), ("source", 300.0), ("as fluent", 250.0)];
        let table = table
            .into_iter()
            .chain([("worse", 400.0), ("far worse", 700.0)]);
        let fluency = Arc::new(TableFluency(table.collect(), AtomicUsize::new(0)));
        let filter = FluencyFilter {
            model: fluency.clone(),
            threshold: 125.0,
            sources: Mutex::default(),
        };
        let mut outputs = filter.for_source("source");
        assert_eq!(outputs.check("fluent").ok(), Some(80.0));
        // Under the threshold: the source is not scored.
        assert_eq!(fluency.1.load(Ordering::Relaxed), 1);
        assert_eq!(outputs.check("as fluent").ok(), Some(250.0));
        let worse = outputs.check("worse").unwrap_err();
        assert_eq!(
            worse.why,
            "perplexity 400.0 under table is above 125 and the source's 300.0"
        );
        assert!(!worse.far);
        assert!(outputs.check("far worse").unwrap_err().far);
        assert!(
            outputs
                .check("unknown")
                .unwrap_err()
                .why
                .starts_with("no perplexity")
        );
        // A source is scored once, for all its outputs and attempts; an unscorable one lends
        // no second chance, and is asked again later (a failed pass may have been a hiccup).
        assert_eq!(
            filter.for_source("source").check("as fluent").ok(),
            Some(250.0)
        );
        assert!(filter.for_source("unscorable").check("as fluent").is_err());
        assert!(filter.for_source("unscorable").check("as fluent").is_err());
        assert_eq!(fluency.1.load(Ordering::Relaxed), 6 + 1 + 2 + 2);
        let sources = filter.sources.lock().unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources["source"], 300.0);
    }
}
