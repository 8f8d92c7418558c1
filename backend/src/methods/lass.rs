//! LASS (Zhang et al., COLING 2025) reproduction: the Dis-AE recombines the content of the item
//! (the content parent) with the target label's sentiment — its learnt label vector, or the
//! sentiment of a text with that label (a sentiment parent) — and decodes a new text. Outputs
//! the fluency model finds too perplexing are failed attempts (the paper's perplexity filter);
//! the pipeline's flip check is the paper's sentiment filter, always on for this method.
//!
//! The first attempt decodes with the paper's beam search (4 beams, at most 70 tokens); later
//! attempts sample (nucleus, seeded by the attempt), and with sentiment parents each attempt
//! draws another parent.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use flipside_shared::models::dis_ae::reproduce::{TargetSentiment, lass_decoding};
use flipside_shared::models::search::{DecodeSettings, Search};
use flipside_shared::records::{LassProvenance, Provenance};
use serde::{Deserialize, Serialize};

use super::{EditSettings, Method, MethodCard, Models, Stages};
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
    /// Outputs with a higher perplexity under the fluency model are failed attempts (none:
    /// no fluency filter).
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
            Some(threshold) => Some((
                models.fluency.clone().context(
                    "LASS's perplexity filter needs a fluency model (or turn the filter off)",
                )?,
                threshold,
            )),
            None => None,
        };
        Ok(Stages {
            context: None,
            editor: Arc::new(DisAeEditor {
                reproducer,
                fluency,
                sentiment: settings.reproduction.sentiment,
            }),
        })
    }
}

/// Reproduces the item with the target label's sentiment.
struct DisAeEditor {
    reproducer: Arc<dyn Reproduce>,
    fluency: Option<(Arc<dyn Fluency>, f64)>,
    sentiment: SentimentSource,
}

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
        let reproduced = self
            .reproducer
            .reproduce(&[&item.text], sentiment, &settings)?
            .remove(0);
        let text = reproduced.text.trim().to_string();
        if text.is_empty() {
            return Ok(Err(NoEdit::new("the Dis-AE decoded nothing", None)));
        }
        if text.to_lowercase() == item.text.trim().to_lowercase() {
            return Ok(Err(NoEdit::new(
                "the Dis-AE reproduced the text unchanged",
                Some(text),
            )));
        }
        let perplexity = match &self.fluency {
            Some((fluency, threshold)) => {
                let perplexity = match fluency.perplexity(&text) {
                    Ok(perplexity) => perplexity,
                    Err(error) => {
                        return Ok(Err(NoEdit::new(
                            format!("no perplexity: {error}"),
                            Some(text),
                        )));
                    }
                };
                if perplexity > *threshold {
                    return Ok(Err(NoEdit::new(
                        format!(
                            "perplexity {perplexity:.1} under {} is above {threshold}",
                            fluency.model()
                        ),
                        Some(text),
                    )));
                }
                Some(perplexity)
            }
            None => None,
        };
        Ok(Ok(Candidate {
            text,
            provenance: Provenance::Lass(LassProvenance {
                sentiment_parent: parent.map(str::to_string),
                search,
                mean_log_prob: reproduced.log_prob / (reproduced.tokens + 1) as f64,
                perplexity,
            }),
            prompt_tokens: 0,
            completion_tokens: 0,
        }))
    }
}
