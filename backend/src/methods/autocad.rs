//! AutoCAD (Wen et al., 2022): the classifier's saliency marks the rationale words of an item
//! (the context stage), a T5 trained for label-controlled infilling rewrites them for the
//! target label (the editor); the pipeline's flip check is AutoCAD's consistency filter.
//!
//! Beyond the paper, for sentiment the rationale also masks every opinion word of the item's
//! own polarity (Liu & Hu's lexicon), the fills never write one back, and the target
//! polarity's opinion words get a logit bias in them (`--no-opinion-words` for the paper's
//! saliency alone, `--opinion-bias`).
//!
//! Each attempt samples the infiller once (nucleus p 0.9, temperature 0.7, the label words
//! banned, seeded by the attempt), optionally steered away from the item's own label
//! ([`LabelContrast`](flipside_shared::models::contrast::LabelContrast); beyond the paper,
//! `--label-contrast W`, off by default) and constrained to the span format (every sentinel in order, each with
//! a fill of at most [`MAX_FILL_TOKENS`](flipside_shared::infill::MAX_FILL_TOKENS) tokens that
//! starts with a word), so every reply of up to 100 spans (T5's sentinels) is well formed. For NLI the rationale is found over premise and hypothesis
//! jointly, the premise is given unmasked and only the hypothesis is rewritten (Flipside edits
//! hypotheses).
//!
//! [`AutocadRetrieval`] goes beyond the paper: CORE's retrieval finds sentences with the target
//! label for the item, and their keywords go into the infiller's input (an infiller trained with
//! `infiller train --retrieval` learnt to write fills in their spirit).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use flipside_shared::infill::{MaskedText, infill_input};
use flipside_shared::records::{AutocadProvenance, Provenance};

use super::core::RetrievalContext;
use super::{EditSettings, Method, MethodCard, Models, Stages};
use crate::editing::keywords::Lexicons;
use crate::infiller::rationales::FindRationale;
use crate::infiller::{FillRequest, Infill};
use crate::pipeline::{Attempt, Candidate, Context, ContextStage, Editor, Item, Judge, NoEdit};
use flipside_shared::infill::Rationale;

/// AutoCAD.
pub struct Autocad;

/// Candidates per attempt AutoCAD samples by default, keeping the most fluent of those the
/// filter flips surely (beyond the paper): on `bench cf`'s items, 4 instead of 1 took the median
/// perplexity of the accepted edits from 981 to 669 under SmolLM2-135M, and the independent
/// judge's flips of them from 0.934 to 0.959, for 0.8 CPU-seconds an accepted edit instead of
/// 0.1 (see the results).
pub const AUTOCAD_CANDIDATES: usize = 4;

/// AutoCAD's infiller steered by the keywords of retrieved target-label sentences.
pub struct AutocadRetrieval;

static AUTOCAD: MethodCard = MethodCard {
    id: "autocad",
    label: "AutoCAD",
    description: "Mask the classifier's most salient words and refill them for the target label \
                  with a T5 infiller trained with unlikelihood",
    retrieves: false,
    uses_llm: false,
    uses_keywords: false,
    infills: true,
    reproduces: false,
    always_verifies: false,
    candidates: AUTOCAD_CANDIDATES,
};

static AUTOCAD_RETRIEVAL: MethodCard = MethodCard {
    id: "autocad-retrieval",
    label: "AutoCAD + retrieval",
    description: "AutoCAD with the keywords of label-flipped helpers, retrieved as CORE retrieves \
                  them, in the infiller's input (an infiller trained with --retrieval)",
    retrieves: true,
    uses_llm: false,
    uses_keywords: true,
    infills: true,
    reproduces: false,
    always_verifies: false,
    candidates: AUTOCAD_CANDIDATES,
};

impl Method for Autocad {
    fn card(&self) -> &'static MethodCard {
        &AUTOCAD
    }

    fn stages(&self, models: &Models, _settings: &EditSettings) -> Result<Stages> {
        let (rationale, editor) = infill_stages(models, false)?;
        Ok(Stages {
            context: Some(Arc::new(rationale)),
            editor: Arc::new(editor),
        })
    }
}

impl Method for AutocadRetrieval {
    fn card(&self) -> &'static MethodCard {
        &AUTOCAD_RETRIEVAL
    }

    fn check_loaded(&self, models: &Models) -> Result<()> {
        match &models.infiller {
            Some(infiller) if !infiller.guided() => bail!(
                "the infiller {} was trained without retrieved keywords: train one with \
                 `flipside infiller train --retrieval` for the autocad-retrieval method",
                infiller.name()
            ),
            _ => Ok(()),
        }
    }

    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages> {
        let (rationale, editor) = infill_stages(models, true)?;
        Ok(Stages {
            context: Some(Arc::new(RetrievalAndRationale {
                retrieval: RetrievalContext::new(models, settings),
                rationale,
            })),
            editor: Arc::new(editor),
        })
    }
}

/// The rationale stage and the infilling editor over `models`' infiller.
fn infill_stages(models: &Models, with_keywords: bool) -> Result<(RationaleStage, InfillEditor)> {
    let infiller = models
        .infiller
        .clone()
        .context("AutoCAD needs an infiller (--infiller DIR)")?;
    let finder = models
        .rationales
        .clone()
        .context("AutoCAD needs the classifier's rationales")?;
    let settings = finder.settings();
    let opinions = settings.opinion_words.then(|| models.lexicons.clone());
    Ok((
        RationaleStage { finder },
        InfillEditor {
            infiller,
            labels: models.classifier.labels(),
            with_keywords,
            opinions,
            opinion_bias: settings.opinion_bias,
        },
    ))
}

/// Finds the item's rationale (for its own label: the words that make it what it is).
struct RationaleStage {
    finder: Arc<dyn FindRationale>,
}

impl ContextStage for RationaleStage {
    fn context(&self, item: &Item) -> Result<Context> {
        let started = Instant::now();
        let found = self
            .finder
            .rationale(&item.text, item.premise.as_deref(), &item.label)?
            .map(|rationale| Rationale {
                // Flipside rewrites the hypothesis only: the premise stays as it is.
                premise: rationale
                    .premise
                    .map(|p| MaskedText::new(&p.words.join(" "), &[])),
                ..rationale
            });
        Ok(Context {
            rationale: Some((found, self.finder.settings().rule())),
            millis: started.elapsed().as_secs_f64() * 1000.0,
            ..Context::default()
        })
    }
}

/// Retrieved target-label sentences with their keywords, and the item's rationale.
struct RetrievalAndRationale {
    retrieval: RetrievalContext,
    rationale: RationaleStage,
}

impl ContextStage for RetrievalAndRationale {
    fn context(&self, item: &Item) -> Result<Context> {
        let retrieved = self.retrieval.context(item)?;
        let rationale = self.rationale.context(item)?;
        Ok(Context {
            retrieval: retrieved.retrieval,
            millis: retrieved.millis + rationale.millis,
            ..rationale
        })
    }
}

/// Rewrites the masked rationale spans with the infiller, for the target label.
struct InfillEditor {
    infiller: Arc<dyn Infill>,
    /// Every label word (banned from the fills).
    labels: Vec<String>,
    /// Whether the input carries the context's retrieved keywords.
    with_keywords: bool,
    /// The opinion words of each polarity, never written back into a fill of an item of that
    /// polarity (when the rationales mask them), and favoured by `opinion_bias` in a fill for it.
    opinions: Option<Arc<Lexicons>>,
    opinion_bias: f32,
}

impl Editor for InfillEditor {
    fn model(&self) -> Option<&str> {
        Some(self.infiller.name())
    }

    fn propose(
        &self,
        item: &Item,
        context: &Context,
        attempt: Attempt,
        _judge: &dyn Judge,
    ) -> Result<std::result::Result<Candidate, NoEdit>> {
        let (rationale, rule) = match &context.rationale {
            Some((Ok(rationale), rule)) => (rationale, rule),
            Some((Err(reason), _)) => return Ok(Err(NoEdit::new(reason.clone(), None))),
            None => return Ok(Err(NoEdit::new("no rationale was looked for", None))),
        };
        let retrieval = match &context.retrieval {
            Some(retrieval) if self.with_keywords => retrieval.clone(),
            _ => Default::default(),
        };
        let input_for = |label: &str| {
            infill_input(
                &rationale.text,
                rationale.premise.as_ref(),
                &retrieval.keywords,
                label,
            )
        };
        let (input, contrast) = (input_for(&item.target), input_for(&item.label));
        let spans = rationale.text.spans.len();
        if spans == 0 {
            // NLI: every salient word is in the premise, which Flipside does not rewrite.
            return Ok(Err(NoEdit::new(
                "the rationale lies in the premise only: no word of the hypothesis to rewrite",
                None,
            )));
        }
        let fill = self.infiller.fill(FillRequest {
            input: &input,
            contrast: Some(&contrast),
            spans,
            banned: &self.labels,
            avoided: self
                .opinions
                .as_deref()
                .and_then(|lexicons| lexicons.of_polarity(&item.label)),
            favoured: self
                .opinions
                .as_deref()
                .and_then(|lexicons| lexicons.of_polarity(&item.target))
                .map(|words| (words, self.opinion_bias)),
            seed: attempt.seed,
        })?;
        let fills = match fill.fills {
            Ok(fills) => fills,
            Err(reason) => return Ok(Err(NoEdit::new(reason, Some(fill.reply)))),
        };
        let text = rationale.text.filled(&fills);
        if text.split_whitespace().eq(item.text.split_whitespace()) {
            return Ok(Err(NoEdit::new(
                "the fills restore the original words",
                Some(fill.reply),
            )));
        }
        Ok(Ok(Candidate {
            text,
            provenance: Provenance::Autocad(AutocadProvenance {
                masked: rationale.text.masked(0),
                spans: rationale.text.span_texts(),
                fills,
                rationales: rule.clone(),
                unsure: rationale.unsure,
                reply: fill.reply,
                label_contrast: Some(self.infiller.label_contrast().weight).filter(|&w| w > 0.0),
                keywords: retrieval.keywords,
                retrieved: retrieval.excerpts,
            }),
            prompt_tokens: 0,
            completion_tokens: 0,
            verdict: None,
        }))
    }
}
