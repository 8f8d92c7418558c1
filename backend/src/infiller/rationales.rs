//! AutoCAD's rationales (§3.2): the words a classifier's gradient saliency marks, masked for
//! the infiller to rewrite.
//!
//! Word score = the largest gradient-norm saliency of its sub-tokens (normalised over the
//! input's tokens, [`word_saliency`]); the top `top_fraction` of the words (both texts jointly
//! for NLI) are candidates, of which those scoring at least `min_relative` × the example's
//! highest word score are kept. For the infiller's training data only examples the classifier
//! gets right with p(gold) > `min_confidence` get rationales (AutoCAD's rule,
//! [`RationaleFinder::find`]); when generating, every item gets them, and the record says when
//! the classifier was wrong or unsure ([`Rationale::unsure`]). `--rationales random` masks as many words chosen
//! uniformly (seeded per text) on the same examples: AutoCAD's ablation.

use std::sync::Arc;

use anyhow::Result;
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use flipside_shared::batching::{Sequential, map_batches};
use flipside_shared::data::{Input, stable_hash};
use flipside_shared::infill::{MaskedText, Rationale, RationaleSource};
use flipside_shared::models::classifier::TextClassifier;
use flipside_shared::random::SplitMix64;
use flipside_shared::saliency::{WordSaliency, word_saliency};
use flipside_shared::words::word_tokens;
use serde::{Deserialize, Serialize};

use crate::editing::keywords::Lexicons;

/// How rationales are chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RationaleSettings {
    pub source: RationaleSource,
    pub top_fraction: f64,
    pub min_relative: f64,
    pub min_confidence: f32,
    /// The most words masked in one text (the most salient first); `None`: no cap.
    #[serde(default)]
    pub max_words: Option<usize>,
    /// Also mask every opinion word of the example's own polarity (sentiment labelled
    /// negative/positive only), so that no word carrying the old label is left unrewritten.
    #[serde(default)]
    pub opinion_words: bool,
    /// With `opinion_words`, the logit bias of the target polarity's opinion words in the fills
    /// (0: none).
    #[serde(default)]
    pub opinion_bias: f32,
    pub seed: u64,
}

impl Default for RationaleSettings {
    fn default() -> Self {
        Self {
            source: RationaleSource::Saliency,
            top_fraction: 0.3,
            min_relative: 0.3,
            min_confidence: 0.8,
            max_words: None,
            opinion_words: false,
            opinion_bias: 0.0,
            seed: 0,
        }
    }
}

impl RationaleSettings {
    /// The rule's name, as records give it: `saliency`, `random`, `saliency+opinions`.
    pub fn rule(&self) -> String {
        let source = match self.source {
            RationaleSource::Saliency => "saliency",
            RationaleSource::Random => "random",
        };
        match self.opinion_words {
            true => format!("{source}+opinions"),
            false => source.into(),
        }
    }
}

/// One example to find rationales for.
#[derive(Debug, Clone)]
pub struct RationaleRequest<'a> {
    pub text: &'a str,
    pub premise: Option<&'a str>,
    /// The gold label's index in the classifier's labels.
    pub label: usize,
}

/// Why an example has no rationale.
pub type NoRationale = String;

/// Finds rationales with a classifier on an autodiff backend.
pub struct RationaleFinder<B: Backend> {
    pub classifier: TextClassifier<Autodiff<B>>,
    pub settings: RationaleSettings,
    /// The opinion words `settings.opinion_words` adds to the rationales.
    pub lexicons: Arc<Lexicons>,
}

impl<B: Backend> RationaleFinder<B> {
    /// Rationales for `requests` (in their order) under AutoCAD's rule, in batches of
    /// `batch_size` sorted by token count; `on_batch` is called with the number of requests done
    /// after each batch.
    pub fn find(
        &self,
        requests: &[RationaleRequest],
        batch_size: usize,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<std::result::Result<Rationale, NoRationale>>> {
        self.find_under(Rule::Confident, requests, batch_size, on_batch)
    }

    fn find_under(
        &self,
        rule: Rule,
        requests: &[RationaleRequest],
        batch_size: usize,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<std::result::Result<Rationale, NoRationale>>> {
        let inputs: Vec<Input> = requests
            .iter()
            .map(|r| Input::with_premise(r.premise, r.text))
            .collect();
        let refs: Vec<&Input> = inputs.iter().collect();
        let lengths = self
            .classifier
            .tokenizer
            .input_batch_lengths(&refs, batch_size)?;
        let label_names = &self.classifier.config.labels;
        let width = label_names.len();
        map_batches(&lengths, batch_size, &Sequential, |batch| {
            let batch_refs: Vec<&Input> = batch.iter().map(|&i| refs[i]).collect();
            let probabilities = self.classifier.predict_batch(&batch_refs)?;
            let labels: Vec<usize> = batch.iter().map(|&i| requests[i].label).collect();
            let saliencies = word_saliency(
                &self.classifier.model,
                &self.classifier.tokenizer,
                &batch_refs,
                &labels,
                &self.classifier.device,
            )?;
            on_batch(batch.len());
            Ok(batch
                .iter()
                .zip(saliencies)
                .zip(probabilities.chunks(width))
                .map(|((&i, words), probs)| {
                    let request = &requests[i];
                    let rationale = choose(&self.settings, rule, request, &words, probs)?;
                    Ok(match self.settings.opinion_words {
                        true => with_opinion_words(
                            rationale,
                            &label_names[request.label],
                            &self.lexicons,
                        ),
                        false => rationale,
                    })
                })
                .collect())
        })
    }
}

/// Which examples get rationales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// AutoCAD's: those the classifier gets right with p(gold) > `min_confidence`.
    Confident,
    /// Every one: an item to edit always gets a chance.
    Every,
}

/// One example's rationale from its word saliencies and the classifier's `probabilities`.
fn choose(
    settings: &RationaleSettings,
    rule: Rule,
    request: &RationaleRequest,
    words: &[WordSaliency],
    probabilities: &[f32],
) -> std::result::Result<Rationale, NoRationale> {
    let gold = probabilities[request.label];
    let predicted = flipside_shared::metrics::argmax_rows(probabilities, probabilities.len())[0];
    let confident = predicted == request.label && gold > settings.min_confidence;
    if !confident && rule == Rule::Confident {
        return Err(format!(
            "the classifier gives its label p = {gold:.2} (rationales need a correct \
             prediction with p > {})",
            settings.min_confidence
        ));
    }
    let chosen = match settings.source {
        RationaleSource::Saliency => salient_words(words, settings),
        RationaleSource::Random => {
            let count = salient_words(words, settings).len();
            random_words(words.len(), count, stable_hash(settings.seed, request.text))
        }
    };
    if chosen.is_empty() {
        return Err("no word reaches the saliency threshold".into());
    }
    Ok(Rationale {
        unsure: (!confident).then_some(gold),
        ..mask_words(request, words, &chosen)
    })
}

/// `rationale` with every opinion word of `label`'s polarity in its text also masked (as
/// [`Lexicons::sentiment`] reads words), and of its salient words only as many as keep the mask
/// within half the text (a short review is not rewritten whole); unchanged for a label other
/// than negative/positive.
fn with_opinion_words(rationale: Rationale, label: &str, lexicons: &Lexicons) -> Rationale {
    let Some(opinions) = lexicons.of_polarity(label) else {
        return rationale;
    };
    let text = &rationale.text;
    let mut masked: Vec<usize> = (0..text.words.len())
        .filter(|&i| {
            word_tokens(&text.words[i])
                .iter()
                .any(|token| opinions.contains(&token.to_lowercase()))
        })
        .collect();
    let room = (text.words.len() / 2).max(masked.len());
    for i in text.spans.iter().flat_map(Clone::clone) {
        if masked.len() < room && !masked.contains(&i) {
            masked.push(i);
        }
    }
    if masked.is_empty() {
        return rationale;
    }
    Rationale {
        text: MaskedText::new(&text.words.join(" "), &masked),
        ..rationale
    }
}

/// Finds one example's rationale: a [`RationaleFinder`] behind a lock, for the pipeline.
pub trait FindRationale: Send + Sync {
    fn settings(&self) -> RationaleSettings;
    /// The rationale of `text` (with `premise`) for its gold `label`, or why it has none; the
    /// item gets one even when the classifier is wrong or unsure of it.
    fn rationale(
        &self,
        text: &str,
        premise: Option<&str>,
        label: &str,
    ) -> Result<std::result::Result<Rationale, NoRationale>>;
}

impl<B: Backend> FindRationale for std::sync::Mutex<RationaleFinder<B>> {
    fn settings(&self) -> RationaleSettings {
        self.lock().expect("rationale lock").settings.clone()
    }

    fn rationale(
        &self,
        text: &str,
        premise: Option<&str>,
        label: &str,
    ) -> Result<std::result::Result<Rationale, NoRationale>> {
        let finder = self.lock().expect("rationale lock");
        let labels = &finder.classifier.config.labels;
        let Some(label) = labels.iter().position(|l| l == label) else {
            return Ok(Err(format!(
                "the classifier has no label {label:?} ({labels:?})"
            )));
        };
        let request = RationaleRequest {
            text,
            premise,
            label,
        };
        Ok(finder
            .find_under(Rule::Every, &[request], 1, &|_| {})?
            .remove(0))
    }
}

/// Indices into `words` of the rationale: the top `top_fraction` by score (at most
/// `max_words`), those scoring at least `min_relative` × the best; in text order.
pub fn salient_words(words: &[WordSaliency], settings: &RationaleSettings) -> Vec<usize> {
    if words.is_empty() {
        return Vec::new();
    }
    let best = words.iter().map(|w| w.score).fold(0.0f32, f32::max);
    let top = ((words.len() as f64 * settings.top_fraction).ceil() as usize)
        .min(settings.max_words.unwrap_or(usize::MAX))
        .max(1);
    let mut order: Vec<usize> = (0..words.len()).collect();
    order.sort_by(|&a, &b| words[b].score.total_cmp(&words[a].score).then(a.cmp(&b)));
    let mut chosen: Vec<usize> = order
        .into_iter()
        .take(top)
        .filter(|&i| best > 0.0 && f64::from(words[i].score / best) >= settings.min_relative)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// `count` distinct indices below `n`, drawn with a generator seeded by `seed`; sorted.
fn random_words(n: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64(seed);
    let mut indices: Vec<usize> = (0..n).collect();
    for i in 0..count.min(n) {
        let j = i + rng.below(n - i);
        indices.swap(i, j);
    }
    let mut chosen = indices[..count.min(n)].to_vec();
    chosen.sort_unstable();
    chosen
}

/// The request's texts with the `chosen` words (indices into `words`, which list the premise's
/// words, then the hypothesis's, for NLI) masked.
fn mask_words(request: &RationaleRequest, words: &[WordSaliency], chosen: &[usize]) -> Rationale {
    let hypothesis_text = usize::from(request.premise.is_some());
    let positions = |text: usize| -> Vec<usize> {
        let first = words.iter().position(|w| w.text == text).unwrap_or(0);
        chosen
            .iter()
            .filter(|&&i| words[i].text == text)
            .map(|&i| i - first)
            .collect()
    };
    Rationale {
        text: MaskedText::new(request.text, &positions(hypothesis_text)),
        premise: request.premise.map(|p| MaskedText::new(p, &positions(0))),
        unsure: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(text: usize, word: &str, score: f32) -> WordSaliency {
        WordSaliency {
            word: word.into(),
            text,
            start: 0,
            end: word.len(),
            score,
        }
    }

    #[test]
    fn top_thirty_percent_above_three_tenths_of_the_best() {
        let words: Vec<WordSaliency> = [0.05, 0.40, 0.02, 0.10, 0.30, 0.01, 0.03, 0.02, 0.05, 0.02]
            .iter()
            .enumerate()
            .map(|(i, &s)| word(0, &format!("w{i}"), s))
            .collect();
        // Top 3 of 10: 0.40, 0.30, 0.10; 0.10 < 0.3 × 0.40 drops.
        let paper = RationaleSettings {
            max_words: None,
            ..RationaleSettings::default()
        };
        assert_eq!(salient_words(&words, &paper), [1, 4]);
        // Capped at one word: the most salient.
        let one = RationaleSettings {
            max_words: Some(1),
            ..paper
        };
        assert_eq!(salient_words(&words, &one), [1]);
    }

    #[test]
    fn every_item_gets_a_rationale_when_generating_and_says_when_the_classifier_was_unsure() {
        let request = RationaleRequest {
            text: "a dull film",
            premise: None,
            label: 1,
        };
        let words = vec![
            word(0, "a", 0.1),
            word(0, "dull", 0.9),
            word(0, "film", 0.2),
        ];
        let settings = RationaleSettings::default();
        for (probabilities, unsure) in [
            ([0.1, 0.9], None),
            ([0.3, 0.7], Some(0.7)),
            ([0.6, 0.4], Some(0.4)),
        ] {
            let rationale = choose(&settings, Rule::Every, &request, &words, &probabilities)
                .unwrap_or_else(|e| panic!("{probabilities:?}: {e}"));
            assert_eq!(rationale.text.masked(0), "a <extra_id_0> film");
            assert_eq!(rationale.unsure, unsure);
            // AutoCAD's rule for training data: only the confident, correct prediction.
            let paper = choose(&settings, Rule::Confident, &request, &words, &probabilities);
            assert_eq!(paper.is_ok(), unsure.is_none(), "{probabilities:?}");
        }
    }

    #[test]
    fn opinion_words_of_the_items_own_polarity_join_the_rationale() {
        let lexicons = Lexicons::of_opinions(&["superb", "moving", "great"], &["dull"]);
        let rationale = Rationale {
            text: MaskedText::new("A superb cast, a Moving plot, a dull end.", &[2]),
            premise: None,
            unsure: Some(0.6),
        };
        let positive = with_opinion_words(rationale.clone(), "positive", &lexicons);
        // "cast," was salient; "superb" joins its span, "Moving" (any case) gets its own; the
        // negative "dull" stays.
        assert_eq!(
            positive.text.masked(0),
            "A <extra_id_0> a <extra_id_1> plot, a dull end."
        );
        assert_eq!(positive.unsure, Some(0.6));
        let negative = with_opinion_words(rationale.clone(), "negative", &lexicons);
        assert_eq!(
            negative.text.masked(0),
            "A superb <extra_id_0> a Moving plot, a <extra_id_1> end."
        );
        assert_eq!(
            with_opinion_words(rationale.clone(), "entailment", &lexicons),
            rationale
        );
        // Salient words beyond half the text give way to the opinion words.
        let short = Rationale {
            text: MaskedText::new("Great phone.", &[1]),
            premise: None,
            unsure: None,
        };
        let short = with_opinion_words(short, "positive", &lexicons);
        assert_eq!(short.text.masked(0), "<extra_id_0> phone.");
        let rule = RationaleSettings {
            opinion_words: true,
            ..RationaleSettings::default()
        };
        assert_eq!(rule.rule(), "saliency+opinions");
        assert_eq!(RationaleSettings::default().rule(), "saliency");
    }

    #[test]
    fn nli_masks_index_each_text_from_its_own_first_word() {
        let request = RationaleRequest {
            text: "a dog sleeps",
            premise: Some("two dogs run fast"),
            label: 0,
        };
        let words = vec![
            word(0, "two", 0.1),
            word(0, "dogs", 0.1),
            word(0, "run", 0.5),
            word(0, "fast", 0.1),
            word(1, "a", 0.1),
            word(1, "dog", 0.1),
            word(1, "sleeps", 0.6),
        ];
        let rationale = mask_words(&request, &words, &[2, 6]);
        assert_eq!(rationale.text.masked(0), "a dog <extra_id_0>");
        assert_eq!(
            rationale.premise.unwrap().masked(1),
            "two dogs <extra_id_1> fast"
        );
    }

    #[test]
    fn random_words_are_distinct_seeded_and_sorted() {
        let a = random_words(20, 6, 7);
        assert_eq!(a, random_words(20, 6, 7));
        assert_eq!(a.len(), 6);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_ne!(a, random_words(20, 6, 8));
    }
}
