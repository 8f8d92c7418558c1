//! Text infilling with T5's sentinels: the tokenizer, span corruption for pretraining, and
//! AutoCAD's label-controlled format (masked input + label word → sentinel + fill, per span),
//! with the parser that reads a generated fill back and the mask of tokens the unlikelihood
//! loss may penalise.
//!
//! Sentinel `<extra_id_k>` marks the k-th masked span, numbered in order of appearance from 0;
//! in the standard T5 vocabulary they count down from 32099. A target is
//! `<extra_id_0> fill <extra_id_1> fill … </s>`, with no trailing sentinel (AutoCAD's format,
//! used for pretraining too so that both stages speak the same language).

use std::collections::HashSet;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::models::search::{FillPieces, PieceKind, SentinelOrder};
use crate::random::SplitMix64;
use crate::tokenize::TokenizeError;

/// The most tokens one span's fill takes when the infiller samples (a rationale span is a few
/// words): the next sentinel is then forced, so that a fill that runs on cannot use up the
/// reply's length limit and cost the spans after it.
pub const MAX_FILL_TOKENS: usize = 10;

/// A T5 `tokenizer.json` without padding or truncation, and its sentinels.
#[derive(Debug, Clone)]
pub struct T5Tokenizer {
    inner: Tokenizer,
    /// Id of `<extra_id_0>`; `<extra_id_k>` is `first_sentinel - k`.
    first_sentinel: u32,
    /// How many sentinels the vocabulary has (100 in T5's).
    sentinels: u32,
    pub pad: u32,
    pub eos: u32,
    /// Which pieces may start a fill and which are punctuation (special tokens are neither).
    pieces: FillPieces,
}

impl T5Tokenizer {
    /// Reads a T5 `tokenizer.json` (the `t5-tokenizer` asset or a checkpoint's own).
    pub fn from_json(json: &[u8]) -> Result<Self, TokenizeError> {
        let mut inner =
            Tokenizer::from_bytes(json).map_err(|e| TokenizeError::Load(e.to_string()))?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| TokenizeError::Load(e.to_string()))?;
        let id = |token: &str| inner.token_to_id(token);
        let missing = |what: &str| TokenizeError::Load(format!("not a T5 tokenizer: no {what}"));
        let first_sentinel = id("<extra_id_0>").ok_or_else(|| missing("<extra_id_0>"))?;
        let sentinels = (0..)
            .take_while(|&k| id(&format!("<extra_id_{k}>")) == first_sentinel.checked_sub(k))
            .count() as u32;
        let pad = id("<pad>").ok_or_else(|| missing("<pad>"))?;
        let eos = id("</s>").ok_or_else(|| missing("</s>"))?;
        let special: std::collections::HashSet<u32> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special)
            .map(|(id, _)| id)
            .chain([pad, eos])
            .chain((0..sentinels).map(|k| first_sentinel - k))
            .collect();
        let vocabulary = inner.get_vocab_size(true) as u32;
        let names: Vec<Option<String>> = (0..vocabulary)
            .map(|id| {
                (!special.contains(&id))
                    .then(|| inner.id_to_token(id))
                    .flatten()
            })
            .collect();
        let pieces = FillPieces::new(names.iter().map(Option::as_deref));
        Ok(Self {
            first_sentinel,
            sentinels,
            pad,
            eos,
            pieces,
            inner,
        })
    }

    /// Token ids of `text`, closed by `</s>`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizeError> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Token ids of `text` without `</s>`.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, TokenizeError> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens and sentinels dropped.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizeError> {
        self.inner
            .decode(ids, true)
            .map(|text| text.trim().to_string())
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }

    /// The text of `ids` with sentinels kept (padding and `</s>` dropped): a fill as generated.
    pub fn decode_with_sentinels(&self, ids: &[u32]) -> Result<String, TokenizeError> {
        let kept: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| id != self.pad && id != self.eos)
            .collect();
        self.inner
            .decode(&kept, false)
            .map(|text| text.trim().to_string())
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }

    /// The vocabulary entry of `id` (`▁word` for a word-initial piece).
    pub fn piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The ids of the word-start pieces (`▁good`, `▁Good`) that are, lower-cased, one of
    /// `words` (lower-case words): what bans those words when they are written as one piece.
    pub fn whole_word_ids(&self, words: &HashSet<String>) -> Vec<u32> {
        (0..self.vocab_size() as u32)
            .filter(|&id| self.pieces.kind(id) == PieceKind::WordStart)
            .filter(|&id| {
                self.piece(id).is_some_and(|piece| {
                    words.contains(&piece.trim_start_matches('\u{2581}').to_lowercase())
                })
            })
            .collect()
    }

    /// The id of the vocabulary entry `piece`, if it has one.
    pub fn piece_id(&self, piece: &str) -> Option<u32> {
        self.inner.token_to_id(piece)
    }

    /// The id of `<extra_id_k>`, if the vocabulary has it.
    pub fn sentinel(&self, k: usize) -> Option<u32> {
        (k < self.sentinels as usize).then(|| self.first_sentinel - k as u32)
    }

    /// Which sentinel `id` is (`Some(k)` for `<extra_id_k>`).
    pub fn sentinel_index(&self, id: u32) -> Option<usize> {
        let k = self.first_sentinel.checked_sub(id)?;
        (k < self.sentinels).then_some(k as usize)
    }

    /// How many sentinels the vocabulary has.
    pub fn sentinel_count(&self) -> usize {
        self.sentinels as usize
    }

    /// The span format of a fill of `spans` masked spans, for constrained decoding: at most
    /// [`MAX_FILL_TOKENS`] tokens a fill, each starting with a word, no two punctuation
    /// tokens in a row.
    pub fn sentinel_order(&self, spans: usize) -> SentinelOrder {
        SentinelOrder {
            due: (0..spans).filter_map(|k| self.sentinel(k)).collect(),
            all: (0..self.sentinel_count())
                .filter_map(|k| self.sentinel(k))
                .collect(),
            max_fill: MAX_FILL_TOKENS,
            pieces: Some(self.pieces.clone()),
        }
    }

    /// The vocabulary size the tokenizer knows (with added tokens).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// One pretraining example made by span corruption.
#[derive(Debug, Clone, PartialEq)]
pub struct Corrupted {
    /// The tokens with each noise span replaced by its sentinel, then `</s>`.
    pub input: Vec<u32>,
    /// Each sentinel followed by the span it replaced, then `</s>`.
    pub target: Vec<u32>,
}

/// T5's span corruption of `tokens` (without `</s>`): `round(len · density)` noise tokens (at
/// least 1, at most len − 1) in `round(min(noise, kept) / mean_span)` spans (at least 1), span
/// and gap lengths drawn by random segmentation, the text starting with kept tokens (as HF's
/// `run_t5_mlm_flax.py`). `None` when fewer than 2 tokens, or more spans than sentinels.
pub fn corrupt_spans(
    tokens: &[u32],
    tokenizer: &T5Tokenizer,
    density: f64,
    mean_span: f64,
    rng: &mut SplitMix64,
) -> Option<Corrupted> {
    let length = tokens.len();
    if length < 2 {
        return None;
    }
    let noise = ((length as f64 * density).round() as usize).clamp(1, length - 1);
    let kept = length - noise;
    let spans = ((noise.min(kept) as f64 / mean_span).round() as usize).max(1);
    if spans > tokenizer.sentinel_count() {
        return None;
    }
    let noise_lengths = random_segmentation(noise, spans, rng);
    let kept_lengths = random_segmentation(kept, spans, rng);
    let mut input = Vec::with_capacity(kept + spans + 1);
    let mut target = Vec::with_capacity(noise + spans + 1);
    let mut position = 0;
    for (k, (&keep, &drop)) in kept_lengths.iter().zip(&noise_lengths).enumerate() {
        input.extend_from_slice(&tokens[position..position + keep]);
        position += keep;
        let sentinel = tokenizer.sentinel(k).expect("checked above");
        input.push(sentinel);
        target.push(sentinel);
        target.extend_from_slice(&tokens[position..position + drop]);
        position += drop;
    }
    input.push(tokenizer.eos);
    target.push(tokenizer.eos);
    Some(Corrupted { input, target })
}

/// `items` split into `segments` non-empty runs at uniformly random cut points; the lengths.
fn random_segmentation(items: usize, segments: usize, rng: &mut SplitMix64) -> Vec<usize> {
    let segments = segments.clamp(1, items.max(1));
    // Choose segments − 1 of the items − 1 gaps as cuts (a partial Fisher–Yates shuffle).
    let mut gaps: Vec<usize> = (1..items).collect();
    for i in 0..segments - 1 {
        let j = i + rng.below(gaps.len() - i);
        gaps.swap(i, j);
    }
    let mut cuts: Vec<usize> = gaps[..segments - 1].to_vec();
    cuts.sort_unstable();
    cuts.push(items);
    let mut previous = 0;
    cuts.into_iter()
        .map(|cut| {
            let length = cut - previous;
            previous = cut;
            length
        })
        .collect()
}

/// A text split into words, some runs of which are masked (AutoCAD's rationales).
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedText {
    pub words: Vec<String>,
    /// Masked word ranges, sorted, disjoint and not adjacent (adjacent ones are merged).
    pub spans: Vec<Range<usize>>,
}

/// Which words are masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RationaleSource {
    /// The classifier's gradient saliency (AutoCAD).
    Saliency,
    /// As many words, chosen at random (the ablation).
    Random,
}

/// An example's masked text (the hypothesis for NLI) and premise.
#[derive(Debug, Clone, PartialEq)]
pub struct Rationale {
    pub text: MaskedText,
    pub premise: Option<MaskedText>,
    /// When the classifier got the example wrong or was unsure of it, its probability of the
    /// example's label: the most salient words were masked anyway (when generating, every item
    /// gets a rationale); `None` under AutoCAD's rule (right, and confident).
    pub unsure: Option<f32>,
}

impl Rationale {
    /// Masked spans in all.
    pub fn spans(&self) -> usize {
        self.text.spans.len() + self.premise.as_ref().map_or(0, |p| p.spans.len())
    }
}

impl MaskedText {
    /// `text` split on whitespace, with the words at `masked` (any order, repeats allowed)
    /// masked; consecutive indices merge into one span.
    pub fn new(text: &str, masked: &[usize]) -> Self {
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let mut indices: Vec<usize> = masked
            .iter()
            .copied()
            .filter(|&i| i < words.len())
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let mut spans: Vec<Range<usize>> = Vec::new();
        for i in indices {
            match spans.last_mut() {
                Some(span) if span.end == i => span.end = i + 1,
                _ => spans.push(i..i + 1),
            }
        }
        Self { words, spans }
    }

    /// The text with span k replaced by `<extra_id_{first + k}>`.
    pub fn masked(&self, first: usize) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut position = 0;
        for (k, span) in self.spans.iter().enumerate() {
            out.extend(self.words[position..span.start].iter().cloned());
            out.push(format!("<extra_id_{}>", first + k));
            position = span.end;
        }
        out.extend(self.words[position..].iter().cloned());
        out.join(" ")
    }

    /// `<extra_id_{first}> span0 <extra_id_{first+1}> span1 …`: what the infiller learns to write.
    pub fn target(&self, first: usize) -> String {
        self.spans
            .iter()
            .enumerate()
            .map(|(k, span)| {
                format!(
                    "<extra_id_{}> {}",
                    first + k,
                    self.words[span.clone()].join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The text with span k replaced by `fills[k]` (an empty fill deletes the span).
    pub fn filled(&self, fills: &[String]) -> String {
        let mut out: Vec<&str> = Vec::new();
        let mut position = 0;
        for (span, fill) in self.spans.iter().zip(fills) {
            out.extend(self.words[position..span.start].iter().map(String::as_str));
            out.extend(fill.split_whitespace());
            position = span.end;
        }
        out.extend(self.words[position..].iter().map(String::as_str));
        out.join(" ")
    }

    /// The masked words of each span, joined.
    pub fn span_texts(&self) -> Vec<String> {
        self.spans
            .iter()
            .map(|span| self.words[span.clone()].join(" "))
            .collect()
    }
}

/// AutoCAD's encoder input: the masked text(s) with the label word last. Sentiment: `TEXT
/// LABEL`; NLI: `mnli hypothesis: HYPOTHESIS premise: PREMISE LABEL`, sentinels numbered across
/// the hypothesis, then the premise. Non-empty `keywords` (retrieval-guided infilling: words
/// of retrieved sentences with that label) go in a field of their own just before the label:
/// `… keywords: a, b, c LABEL`.
pub fn infill_input(
    text: &MaskedText,
    premise: Option<&MaskedText>,
    keywords: &[String],
    label: &str,
) -> String {
    let mut input = match premise {
        None => text.masked(0),
        Some(premise) => format!(
            "mnli hypothesis: {} premise: {}",
            text.masked(0),
            premise.masked(text.spans.len())
        ),
    };
    if !keywords.is_empty() {
        input.push_str(" keywords: ");
        input.push_str(&keywords.join(", "));
    }
    input.push(' ');
    input.push_str(label);
    input
}

/// The target for [`infill_input`]: every span's words behind its sentinel.
pub fn infill_target(text: &MaskedText, premise: Option<&MaskedText>) -> String {
    let mut target = text.target(0);
    if let Some(premise) = premise.filter(|p| !p.spans.is_empty()) {
        if !target.is_empty() {
            target.push(' ');
        }
        target.push_str(&premise.target(text.spans.len()));
    }
    target
}

/// Why a generated fill cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FillError {
    #[error("the fill starts with text before the first sentinel")]
    TextBeforeSentinel,
    #[error("sentinel <extra_id_{found}> where <extra_id_{expected}> was due")]
    OutOfOrder { expected: usize, found: usize },
    #[error("sentinel <extra_id_{found}> beyond the input's {spans}")]
    Extra { found: usize, spans: usize },
    #[error("{found} of {expected} sentinels came back")]
    Missing { expected: usize, found: usize },
    #[error(transparent)]
    Decode(#[from] TokenizeError),
}

/// The text of each span from generated `ids` (no start token; `</s>` and padding ignored):
/// every one of the `spans` sentinels must come back, in order, each followed by its fill.
pub fn parse_fills(
    ids: &[u32],
    spans: usize,
    tokenizer: &T5Tokenizer,
) -> Result<Vec<String>, FillError> {
    let mut segments: Vec<Vec<u32>> = Vec::new();
    for &id in ids {
        if id == tokenizer.eos {
            break;
        }
        if id == tokenizer.pad {
            continue;
        }
        match tokenizer.sentinel_index(id) {
            Some(found) => {
                if found >= spans {
                    return Err(FillError::Extra { found, spans });
                }
                if found != segments.len() {
                    return Err(FillError::OutOfOrder {
                        expected: segments.len(),
                        found,
                    });
                }
                segments.push(Vec::new());
            }
            None => match segments.last_mut() {
                Some(segment) => segment.push(id),
                None => return Err(FillError::TextBeforeSentinel),
            },
        }
    }
    if segments.len() != spans {
        return Err(FillError::Missing {
            expected: spans,
            found: segments.len(),
        });
    }
    segments
        .iter()
        .map(|segment| Ok(tokenizer.decode(segment)?))
        .collect()
}

/// Which target tokens the unlikelihood loss may penalise under a flipped label: the words of
/// the spans only — never padding, `</s>` or a sentinel (AutoCAD's code penalised
/// `<extra_id_1…>` because sentinels count down; see the reference notes).
pub fn unlikelihood_mask(target: &[u32], tokenizer: &T5Tokenizer) -> Vec<bool> {
    target
        .iter()
        .map(|&id| {
            id != tokenizer.pad && id != tokenizer.eos && tokenizer.sentinel_index(id).is_none()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level tokenizer with T5's special tokens and 12 sentinels counting down from 31.
    pub(crate) fn tiny_tokenizer() -> T5Tokenizer {
        let mut vocab = serde_json::Map::new();
        for (i, word) in [
            "<pad>", "</s>", "<unk>", "the", "film", "was", "great", "awful", "and", "fun", "a",
            "plot",
        ]
        .iter()
        .enumerate()
        {
            vocab.insert(word.to_string(), i.into());
        }
        let mut added = vec![
            serde_json::json!({"id": 0, "content": "<pad>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}),
            serde_json::json!({"id": 1, "content": "</s>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}),
        ];
        for k in 0..20u32 {
            let id = 31 - k;
            vocab.insert(format!("<extra_id_{k}>"), id.into());
            added.push(serde_json::json!({"id": id, "content": format!("<extra_id_{k}>"), "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}));
        }
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
        });
        T5Tokenizer::from_json(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn whole_word_ids_are_the_pieces_that_are_those_words() {
        let tokenizer = tiny_tokenizer();
        let words: HashSet<String> = ["great", "fun", "superb"].map(String::from).into();
        assert_eq!(tokenizer.whole_word_ids(&words), [6, 9]);
        // Special tokens and sentinels are no words.
        let specials: HashSet<String> = ["<pad>", "</s>", "<extra_id_0>"].map(String::from).into();
        assert!(tokenizer.whole_word_ids(&specials).is_empty());
    }

    #[test]
    fn sentinels_count_down() {
        let tokenizer = tiny_tokenizer();
        assert_eq!(tokenizer.sentinel(0), Some(31));
        assert_eq!(tokenizer.sentinel(11), Some(20));
        assert_eq!(tokenizer.sentinel_count(), 20);
        assert_eq!(tokenizer.sentinel_index(29), Some(2));
        assert_eq!(tokenizer.sentinel_index(5), None);
        assert_eq!(tokenizer.encode("the film").unwrap(), [3, 4, 1]);
    }

    #[test]
    fn span_corruption_has_t5s_statistics_and_sentinels_in_order() {
        let tokenizer = tiny_tokenizer();
        let tokens: Vec<u32> = (0..40).map(|i| 3 + (i % 9)).collect();
        let mut rng = SplitMix64(5);
        let (mut noise_total, mut span_total, mut examples) = (0, 0, 0);
        for _ in 0..200 {
            let c = corrupt_spans(&tokens, &tokenizer, 0.15, 3.0, &mut rng).unwrap();
            let sentinels_in: Vec<usize> = c
                .input
                .iter()
                .filter_map(|&t| tokenizer.sentinel_index(t))
                .collect();
            let sentinels_out: Vec<usize> = c
                .target
                .iter()
                .filter_map(|&t| tokenizer.sentinel_index(t))
                .collect();
            // round(40 × 0.15) = 6 noise tokens in round(6 / 3) = 2 spans, numbered 0, 1.
            assert_eq!(sentinels_in, [0, 1]);
            assert_eq!(sentinels_out, [0, 1]);
            assert_eq!(
                c.target[0],
                tokenizer.sentinel(0).unwrap(),
                "the target starts with a sentinel"
            );
            assert_eq!(*c.input.last().unwrap(), 1);
            assert_eq!(*c.target.last().unwrap(), 1);
            let noise = c.target.len() - sentinels_out.len() - 1;
            assert_eq!(noise, 6);
            assert_eq!(c.input.len() - 2 - 1, 40 - 6);
            // The input starts with kept tokens, as HF's segmentation does.
            assert!(tokenizer.sentinel_index(c.input[0]).is_none());
            // Putting the spans back gives the original tokens.
            let mut restored = Vec::new();
            let spans: Vec<&[u32]> = c.target[..c.target.len() - 1]
                .split(|&t| tokenizer.sentinel_index(t).is_some())
                .skip(1)
                .collect();
            for &t in &c.input[..c.input.len() - 1] {
                match tokenizer.sentinel_index(t) {
                    Some(k) => restored.extend_from_slice(spans[k]),
                    None => restored.push(t),
                }
            }
            assert_eq!(restored, tokens);
            noise_total += noise;
            span_total += sentinels_out.len();
            examples += 1;
        }
        assert_eq!(noise_total as f64 / examples as f64, 6.0);
        assert_eq!(span_total as f64 / examples as f64, 2.0);
        assert!(corrupt_spans(&[3], &tokenizer, 0.15, 3.0, &mut rng).is_none());
    }

    #[test]
    fn random_segmentation_is_a_composition() {
        let mut rng = SplitMix64(1);
        for (items, segments) in [(10, 3), (5, 5), (7, 1)] {
            let lengths = random_segmentation(items, segments, &mut rng);
            assert_eq!(lengths.len(), segments);
            assert_eq!(lengths.iter().sum::<usize>(), items);
            assert!(lengths.iter().all(|&l| l > 0));
        }
    }

    #[test]
    fn autocad_format_masks_merged_spans_and_puts_the_label_last() {
        let text = MaskedText::new("the film was great and fun", &[3, 5, 4]);
        assert_eq!(text.spans, vec![(3..6)]);
        let text = MaskedText::new("the film was great and fun", &[1, 3, 5]);
        assert_eq!(
            infill_input(&text, None, &[], "negative"),
            "the <extra_id_0> was <extra_id_1> and <extra_id_2> negative"
        );
        assert_eq!(
            infill_target(&text, None),
            "<extra_id_0> film <extra_id_1> great <extra_id_2> fun"
        );
        let fills = ["plot".to_string(), "awful".to_string(), String::new()];
        assert_eq!(text.filled(&fills), "the plot was awful and");
        let premise = MaskedText::new("a great plot", &[1]);
        assert_eq!(
            infill_input(&text, Some(&premise), &[], "contradiction"),
            "mnli hypothesis: the <extra_id_0> was <extra_id_1> and <extra_id_2> premise: a <extra_id_3> plot contradiction"
        );
        assert_eq!(
            infill_target(&text, Some(&premise)),
            "<extra_id_0> film <extra_id_1> great <extra_id_2> fun <extra_id_3> great"
        );
        let keywords = ["dull".to_string(), "plodding".to_string()];
        assert_eq!(
            infill_input(&text, None, &keywords, "negative"),
            "the <extra_id_0> was <extra_id_1> and <extra_id_2> keywords: dull, plodding negative"
        );
    }

    #[test]
    fn twelve_spans_parse_and_dropped_or_reordered_sentinels_fail() {
        let tokenizer = tiny_tokenizer();
        let words = ["great", "awful", "fun"];
        let mut ids = Vec::new();
        for k in 0..12 {
            ids.push(tokenizer.sentinel(k).unwrap());
            ids.push(tokenizer.encode_plain(words[k % 3]).unwrap()[0]);
        }
        ids.push(1);
        let fills = parse_fills(&ids, 12, &tokenizer).unwrap();
        assert_eq!(fills.len(), 12);
        assert_eq!(fills[10], "awful");
        assert_eq!(fills[11], "fun");
        assert_eq!(
            parse_fills(&ids, 13, &tokenizer),
            Err(FillError::Missing {
                expected: 13,
                found: 12
            })
        );
        let mut swapped = ids.clone();
        swapped.swap(20, 22); // <extra_id_10> and <extra_id_11>
        assert_eq!(
            parse_fills(&swapped, 12, &tokenizer),
            Err(FillError::OutOfOrder {
                expected: 10,
                found: 11
            })
        );
        assert_eq!(
            parse_fills(&[6, 31], 1, &tokenizer),
            Err(FillError::TextBeforeSentinel)
        );
    }

    #[test]
    fn unlikelihood_never_touches_padding_eos_or_any_sentinel() {
        let tokenizer = tiny_tokenizer();
        // <extra_id_0> great <extra_id_1> fun </s> <pad>
        let target = [31, 6, 30, 9, 1, 0];
        assert_eq!(
            unlikelihood_mask(&target, &tokenizer),
            [false, true, false, true, false, false]
        );
    }
}
