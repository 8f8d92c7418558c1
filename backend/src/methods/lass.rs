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
//! The first attempt decodes with the paper's beam search (4 beams, at most 70 tokens) and keeps
//! the best of its finished hypotheses that the perplexity filter passes (on `bench cf`, 65 of
//! 200 items against 53 with the best hypothesis alone), all of them scored with their source in
//! one batch that evaluates their shared openings once (0.88 CPU-seconds an accepted edit on
//! `bench cf` against 1.01 scoring each alone); the other hypotheses the filter passes follow it
//! as [`Candidate::fallbacks`], which the flip check takes in turn when it refuses the first (the
//! paper's two filters over the search's outputs: 66 of 200 on `bench cf` against 63 with the
//! first alone); later attempts sample (nucleus, seeded
//! by the attempt), and with sentiment parents each attempt draws another parent. With the label
//! vector, a beam attempt that no hypothesis of passes the filter is final: the sampled attempts
//! after it kept about one item in 200 tries, each costing a decode and its scoring; after a flip
//! the judge refused, they go on (a small Dis-AE's beam may never write the other label).

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
use crate::llm::Fluency;
use crate::pipeline::{Attempt, Candidate, Context, Editor, Item, NoEdit};

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
    /// The sources' perplexities, by text (scored once for all of an item's attempts; none:
    /// the model cannot score it).
    sources: Mutex<HashMap<String, Option<f64>>>,
}

impl FluencyFilter {
    /// Each of `outputs`' perplexity, or why it fails the filter; the outputs and their source
    /// (unless remembered) are scored together.
    fn check_all(&self, outputs: &[&str], source: &str) -> Vec<std::result::Result<f64, String>> {
        let remembered = self
            .sources
            .lock()
            .expect("not poisoned")
            .get(source)
            .copied();
        let mut texts = outputs.to_vec();
        if remembered.is_none() {
            texts.push(source);
        }
        let mut scored = self.model.perplexities(&texts);
        let source_perplexity = remembered.unwrap_or_else(|| {
            // A source the model cannot score (a single token) lends no second chance.
            let p = scored.pop().and_then(|p| p.ok());
            let mut sources = self.sources.lock().expect("not poisoned");
            if sources.len() >= MAX_CACHED_SOURCES {
                sources.clear();
            }
            sources.insert(source.to_string(), p);
            p
        });
        scored
            .into_iter()
            .map(|perplexity| self.verdict(perplexity, source_perplexity))
            .collect()
    }

    /// Whether an output of `perplexity` passes beside a source of `source_perplexity`.
    fn verdict(
        &self,
        perplexity: Result<f64>,
        source_perplexity: Option<f64>,
    ) -> std::result::Result<f64, String> {
        let model = self.model.model();
        let perplexity = match perplexity {
            Ok(perplexity) => perplexity,
            Err(error) => return Err(format!("no perplexity: {error}")),
        };
        if perplexity <= self.threshold {
            return Ok(perplexity);
        }
        match source_perplexity {
            Some(source) if perplexity <= source => Ok(perplexity),
            Some(source) => Err(format!(
                "perplexity {perplexity:.1} under {model} is above {} and the source's {source:.1}",
                self.threshold
            )),
            None => Err(format!(
                "perplexity {perplexity:.1} under {model} is above {} (the source has none)",
                self.threshold
            )),
        }
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
        // The best hypothesis the fluency filter keeps; else why the first changed one failed,
        // else why the first failed.
        let mut first_failure: Option<NoEdit> = None;
        let target_words = self.lexicons.of_polarity(&item.target);
        let mut changed = Vec::new();
        for (rank, reproduced) in hypotheses.into_iter().enumerate() {
            let text = reproduced.text.trim().to_string();
            if text.is_empty() {
                first_failure.get_or_insert(NoEdit::new("the Dis-AE decoded nothing", None));
            } else if text.to_lowercase() == unchanged {
                let why = "the Dis-AE reproduced the text unchanged";
                first_failure.get_or_insert(NoEdit::new(why, Some(text)));
            } else if changed.iter().any(|(_, seen, _)| *seen == text) {
                // A repeat.
            } else if let Some(negated) =
                target_words.and_then(|words| negated_new_word(source, &text, words))
            {
                first_failure.get_or_insert(NoEdit::new(negated.to_string(), Some(text)));
            } else {
                changed.push((rank, text, reproduced));
            }
        }
        // The changed hypotheses and their source are scored together.
        let texts: Vec<&str> = changed.iter().map(|(_, text, _)| text.as_str()).collect();
        let verdicts: Vec<std::result::Result<Option<f64>, String>> = match &self.fluency {
            Some(filter) if !texts.is_empty() => {
                let verdicts = filter.check_all(&texts, source).into_iter();
                verdicts.map(|verdict| verdict.map(Some)).collect()
            }
            _ => texts.iter().map(|_| Ok(None)).collect(),
        };
        let mut first_disfluent: Option<NoEdit> = None;
        let mut fluent = Vec::new();
        for ((rank, text, reproduced), verdict) in changed.into_iter().zip(verdicts) {
            match verdict {
                Ok(perplexity) => fluent.push(Candidate {
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
                    fallbacks: Vec::new(),
                }),
                Err(why) => {
                    first_disfluent.get_or_insert(NoEdit::new(why, Some(text)));
                }
            }
        }
        if fluent.is_empty() {
            // With the label vector the beam search is deterministic, and the sampled attempts
            // after a beam that no hypothesis of passes the filter kept about one item in 200.
            let hopeless = self.sentiment == SentimentSource::Label && attempt.number == 1;
            let failure = first_disfluent.or(first_failure);
            return Ok(Err(NoEdit {
                hopeless,
                ..failure.expect("a search ends with an output")
            }));
        }
        // The best fluent hypothesis, the others after it should the flip check refuse it.
        let mut kept = fluent.remove(0);
        kept.fallbacks = fluent;
        Ok(Ok(kept))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flipside_shared::models::dis_ae::reproduce::Reproduction;

    use super::*;

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
    fn the_editor_keeps_the_best_hypothesis_the_fluency_filter_passes() {
        let table = [("the source", 300.0), ("bad bad", 900.0), ("awful", 80.0)];
        let table = table.into_iter().chain([("poor", 60.0)]).collect();
        let fluency = Arc::new(TableFluency(table, AtomicUsize::new(0)));
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
        // The unchanged text and a repeat are passed over, "awful" kept before the more fluent
        // "poor": the search's order decides among the texts the filter passes.
        let hypotheses = vec!["bad bad", "The source", "bad bad", "awful", "poor"];
        let kept = editor(hypotheses)
            .propose(&item, &Context::default(), first)
            .unwrap()
            .unwrap();
        assert_eq!(kept.text, "awful");
        let Provenance::Lass(provenance) = kept.provenance.clone() else {
            panic!("a LASS edit");
        };
        assert_eq!(provenance.search, "beam 4, hypothesis 4 of 5");
        assert_eq!(provenance.perplexity, Some(80.0));
        // The other fluent hypothesis follows it, should the flip check refuse it.
        let fallbacks: Vec<_> = kept.fallbacks.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(fallbacks, ["poor"]);
        // The changed texts and their source, scored together.
        assert_eq!(fluency.1.load(Ordering::Relaxed), 4);
        // None passes: the failure is the first changed text's, not the unchanged one's.
        let failed = editor(vec!["The source", "bad bad"])
            .propose(&item, &Context::default(), first)
            .unwrap()
            .unwrap_err();
        assert_eq!(failed.reply.as_deref(), Some("bad bad"));
        assert!(
            failed.reason.starts_with("perplexity 900.0"),
            "{}",
            failed.reason
        );
        // With the label vector, the beam attempt's failure is final; a sampled attempt's is not.
        assert!(failed.hopeless);
        let second = editor(vec!["The source", "bad bad"])
            .propose(&item, &Context::default(), Attempt { number: 2, seed: 8 })
            .unwrap()
            .unwrap_err();
        assert!(!second.hopeless);
        // A target-label word under a negation fails unscored ("not bad" is not negative).
        let calls = fluency.1.load(Ordering::Relaxed);
        let kept = editor(vec!["not bad", "awful"])
            .propose(&item, &Context::default(), first)
            .unwrap()
            .unwrap();
        assert_eq!(kept.text, "awful");
        assert!(kept.fallbacks.is_empty());
        // "awful" and its source (this editor's filter has not scored it), not "not bad".
        assert_eq!(fluency.1.load(Ordering::Relaxed), calls + 2);
        let failed = editor(vec!["not bad"])
            .propose(&item, &Context::default(), first)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            failed.reason,
            "its new opinion word \"bad\" is negated (\"not\" before it), so the text keeps its label"
        );
        assert!(failed.hopeless);
    }

    #[test]
    fn outputs_pass_under_the_threshold_or_as_fluent_as_their_source() {
        let table = [("fluent", 80.0), ("source", 300.0), ("as fluent", 250.0)];
        let table = table.into_iter().chain([("worse", 400.0)]).collect();
        let fluency = Arc::new(TableFluency(table, AtomicUsize::new(0)));
        let filter = FluencyFilter {
            model: fluency.clone(),
            threshold: 125.0,
            sources: Mutex::default(),
        };
        let outputs = ["fluent", "as fluent", "worse", "unknown"];
        let verdicts = filter.check_all(&outputs, "source");
        assert_eq!(verdicts[..2], [Ok(80.0), Ok(250.0)]);
        assert_eq!(
            verdicts[2],
            Err("perplexity 400.0 under table is above 125 and the source's 300.0".into())
        );
        assert!(
            verdicts[3]
                .as_ref()
                .unwrap_err()
                .starts_with("no perplexity")
        );
        // A source is scored once; an unscorable one lends no second chance.
        assert_eq!(filter.check_all(&["as fluent"], "source"), [Ok(250.0)]);
        assert!(filter.check_all(&["as fluent"], "unscorable")[0].is_err());
        assert_eq!(fluency.1.load(Ordering::Relaxed), 5 + 1 + 2);
        let sources = filter.sources.lock().unwrap();
        assert_eq!(sources.len(), 2);
        assert_eq!(sources["unscorable"], None);
    }
}
