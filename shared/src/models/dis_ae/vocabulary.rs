//! The Dis-AE's subword vocabulary: a `tokenizer.json` (BPE over lowercased, NFKC-normalised
//! text, words marked by `▁` as in sentencepiece) that turns a text into `[<s>, pieces…, </s>]`
//! and generated ids back into text.

use std::collections::HashSet;
use std::ops::Range;

use tokenizers::Tokenizer;

use crate::models::search::SpecialTokens;
use crate::tokenize::TokenizeError;

/// The special tokens, which take ids 0 to 3 in this order.
pub const SPECIAL_TOKENS: [&str; 4] = ["<pad>", "<s>", "</s>", "<unk>"];

/// A loaded vocabulary.
#[derive(Clone)]
pub struct Vocabulary {
    inner: Tokenizer,
    /// Most ids per encoded text, `<s>` and `</s>` included.
    max_tokens: usize,
}

impl Vocabulary {
    /// Loads a `tokenizer.json` whose first four ids are [`SPECIAL_TOKENS`]; encoded texts are
    /// cut to `max_tokens` ids.
    pub fn from_json(json: &[u8], max_tokens: usize) -> Result<Self, TokenizeError> {
        let inner = Tokenizer::from_bytes(json).map_err(|e| TokenizeError::Load(e.to_string()))?;
        for (id, token) in SPECIAL_TOKENS.iter().enumerate() {
            if inner.token_to_id(token) != Some(id as u32) {
                return Err(TokenizeError::Load(format!(
                    "{token} must have id {id} (a Dis-AE vocabulary starts with {})",
                    SPECIAL_TOKENS.join(" ")
                )));
            }
        }
        Ok(Self {
            inner,
            max_tokens: max_tokens.max(3),
        })
    }

    /// Number of ids.
    pub fn size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// `<s>` starts a text, `</s>` ends it, `<pad>` pads it.
    pub fn special_tokens(&self) -> SpecialTokens {
        SpecialTokens {
            start: 1,
            end: 2,
            pad: 0,
        }
    }

    /// `[<s>, pieces…, </s>]`, the pieces cut to fit `max_tokens`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizeError> {
        Ok(self.encode_masking(text, &HashSet::new(), 0)?.0)
    }

    /// [`Vocabulary::encode`], and the same ids with one `mask_id` in place of all the pieces of
    /// each word in `words` (lowercased; a word is a run of letters, digits, `'` and `-`, without
    /// edge `'` or `-`), so the masked copy is at most as long.
    pub fn encode_masking(
        &self,
        text: &str,
        words: &HashSet<String>,
        mask_id: u32,
    ) -> Result<(Vec<u32>, Vec<u32>), TokenizeError> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        let kept = encoding.get_ids().len().min(self.max_tokens - 2);
        let pieces = &encoding.get_ids()[..kept];
        let masked_spans = word_spans(text)
            .filter(|span| words.contains(&text[span.clone()].to_lowercase()))
            .collect::<Vec<_>>();
        let mut last_masked = None;
        let masked = pieces
            .iter()
            .zip(encoding.get_offsets())
            .filter_map(|(&id, &(start, end))| {
                let span = masked_spans
                    .iter()
                    .position(|s| start < s.end && s.start < end);
                let repeat = span.is_some() && span == last_masked;
                last_masked = span;
                match span {
                    None => Some(id),
                    Some(_) if repeat => None,
                    Some(_) => Some(mask_id),
                }
            })
            .collect::<Vec<_>>();
        let tokens = self.special_tokens();
        let wrap = |pieces: Vec<u32>| -> Vec<u32> {
            std::iter::once(tokens.start)
                .chain(pieces)
                .chain(std::iter::once(tokens.end))
                .collect()
        };
        Ok((wrap(pieces.to_vec()), wrap(masked)))
    }

    /// The text of generated ids (special tokens dropped).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizeError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }
}

/// Whether a word of `text` (as [`Vocabulary::encode_masking`] reads words) is in `words`.
pub fn has_word_in(text: &str, words: &HashSet<String>) -> bool {
    word_spans(text).any(|span| words.contains(&text[span].to_lowercase()))
}

/// The byte ranges of `text`'s words: runs of letters, digits, `'` and `-`, less the `'` and
/// `-` at their edges (quotes and dashes).
fn word_spans(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let is_word = |c: char| c.is_alphanumeric() || c == '\'' || c == '-';
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        loop {
            let (start, _) = chars.by_ref().find(|&(_, c)| is_word(c))?;
            let mut end = text.len();
            while let Some(&(i, c)) = chars.peek() {
                if !is_word(c) {
                    end = i;
                    break;
                }
                chars.next();
            }
            let run = &text[start..end];
            let trimmed = run.trim_start_matches(['\'', '-']);
            let start = start + (run.len() - trimmed.len());
            let end = start + trimmed.trim_end_matches(['\'', '-']).len();
            if start < end {
                return Some(start..end);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_runs_of_letters_digits_apostrophes_and_inner_hyphens() {
        let text = "Don't — a well-made, 2nd 'quoted' film -- -";
        let words: Vec<&str> = word_spans(text).map(|s| &text[s]).collect();
        assert_eq!(words, ["Don't", "a", "well-made", "2nd", "quoted", "film"]);
    }

    #[test]
    fn a_text_has_a_word_of_the_set_only_as_a_whole_word() {
        let words: HashSet<String> = ["great".to_string()].into();
        assert!(has_word_in("A 'GREAT' film.", &words));
        assert!(!has_word_in("The greatest film, great-grandson.", &words));
    }
}
