//! The Dis-AE's subword vocabulary: a `tokenizer.json` (BPE over lowercased, NFKC-normalised
//! text, words marked by `▁` as in sentencepiece) that turns a text into `[<s>, pieces…, </s>]`
//! and generated ids back into text.

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
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        let pieces = encoding.get_ids();
        let kept = pieces.len().min(self.max_tokens - 2);
        let tokens = self.special_tokens();
        Ok(std::iter::once(tokens.start)
            .chain(pieces[..kept].iter().copied())
            .chain(std::iter::once(tokens.end))
            .collect())
    }

    /// The text of generated ids (special tokens dropped).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizeError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }
}
