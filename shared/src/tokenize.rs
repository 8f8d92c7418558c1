//! Tokenisation into padded model inputs, with word alignment for saliency.
//!
//! Wraps a Hugging Face `tokenizer.json`. Whatever padding the file asks for (the bundled MiniLM
//! one pads every input to 128 tokens), batches are padded only to their longest member and
//! the attention mask marks the padding, which the encoder honours.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use tokenizers::{
    EncodeInput, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams, TruncationStrategy,
};

use crate::data::Input;
use crate::models::bert::BertInput;

/// Why text could not be tokenised.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenizeError {
    #[error("invalid tokenizer.json: {0}")]
    Load(String),
    #[error("tokenisation failed: {0}")]
    Encode(String),
}

/// A tokenizer that truncates to `max_len` tokens and pads each batch to its longest member.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    max_len: usize,
}

/// The span of one whitespace-delimited word of an input text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordSpan {
    /// Byte offsets of the word in the text it came from.
    pub start: usize,
    pub end: usize,
}

/// A batch of tokenised inputs, row-major `[batch, seq_len]`.
#[derive(Debug, Clone)]
pub struct TokenBatch {
    pub batch: usize,
    pub seq_len: usize,
    pub input_ids: Vec<i64>,
    pub token_type_ids: Vec<i64>,
    /// 1 for real tokens, 0 for padding.
    pub attention_mask: Vec<f32>,
    /// 1 for `[CLS]`, `[SEP]` and padding.
    pub special_mask: Vec<u8>,
    /// For each row and token, the byte offsets of the token in its source text and which text
    /// of a pair it came from (0 or 1); `None` for special tokens and padding.
    pub offsets: Vec<Vec<Option<(usize, usize, usize)>>>,
}

impl TextTokenizer {
    /// Loads a `tokenizer.json`; inputs longer than `max_len` tokens are truncated.
    pub fn from_json(json: &[u8], max_len: usize) -> Result<Self, TokenizeError> {
        let mut inner =
            Tokenizer::from_bytes(json).map_err(|e| TokenizeError::Load(e.to_string()))?;
        let pad = inner.get_padding().cloned().unwrap_or_default();
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..pad
        }));
        inner
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                ..Default::default()
            }))
            .map_err(|e| TokenizeError::Load(e.to_string()))?;
        Ok(Self { inner, max_len })
    }

    /// The maximum number of tokens per input, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The id of a token in the vocabulary, if present.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Tokenises single texts.
    pub fn encode_texts(&self, texts: &[&str]) -> Result<TokenBatch, TokenizeError> {
        self.encode(
            texts
                .iter()
                .map(|t| EncodeInput::Single((*t).into()))
                .collect(),
        )
    }

    /// Tokenises text pairs (e.g. premise and hypothesis) as `[CLS] a [SEP] b [SEP]`.
    pub fn encode_pairs(&self, pairs: &[(&str, &str)]) -> Result<TokenBatch, TokenizeError> {
        self.encode(
            pairs
                .iter()
                .map(|(a, b)| EncodeInput::Dual((*a).into(), (*b).into()))
                .collect(),
        )
    }

    /// Tokenises dataset inputs, texts and pairs alike.
    pub fn encode_inputs(&self, inputs: &[&Input]) -> Result<TokenBatch, TokenizeError> {
        self.encode(inputs.iter().map(|input| encode_input(input)).collect())
    }

    /// How many tokens each text becomes (special tokens included, after truncation): the
    /// lengths to sort batches by, so that batches pad little. Bytes of text (the key before) are a
    /// loose proxy: the first 2,048 Rotten Tomatoes sentences in batches of 32 sorted by them were
    /// 22 % padding, sorted by tokens 2 %.
    pub fn count_text_tokens(&self, texts: &[&str]) -> Result<Vec<usize>, TokenizeError> {
        texts
            .iter()
            .map(|text| self.count_tokens(EncodeInput::Single((*text).into())))
            .collect()
    }

    /// [`TextTokenizer::count_text_tokens`] for dataset inputs, texts and pairs alike.
    pub fn count_input_tokens(&self, inputs: &[&Input]) -> Result<Vec<usize>, TokenizeError> {
        inputs
            .iter()
            .map(|input| self.count_tokens(encode_input(input)))
            .collect()
    }

    /// The lengths [`crate::batching::map_batches`] sorts `texts` into batches of `batch_size`
    /// by: their token counts, or zeros when they fit in one batch (the order cannot matter
    /// there, and counting would tokenise them once more for nothing).
    pub fn text_batch_lengths(
        &self,
        texts: &[&str],
        batch_size: usize,
    ) -> Result<Vec<usize>, TokenizeError> {
        one_batch(texts.len(), batch_size).map_or_else(|| self.count_text_tokens(texts), Ok)
    }

    /// [`TextTokenizer::text_batch_lengths`] for dataset inputs, texts and pairs alike.
    pub fn input_batch_lengths(
        &self,
        inputs: &[&Input],
        batch_size: usize,
    ) -> Result<Vec<usize>, TokenizeError> {
        one_batch(inputs.len(), batch_size).map_or_else(|| self.count_input_tokens(inputs), Ok)
    }

    fn count_tokens(&self, input: EncodeInput<'_>) -> Result<usize, TokenizeError> {
        let encoding = self
            .inner
            .encode_fast(input, true)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        Ok(encoding
            .get_attention_mask()
            .iter()
            .filter(|&&m| m == 1)
            .count())
    }

    fn encode(&self, inputs: Vec<EncodeInput<'_>>) -> Result<TokenBatch, TokenizeError> {
        let encodings = self
            .inner
            .encode_batch(inputs, true)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        let batch = encodings.len();
        let seq_len = encodings.first().map_or(0, |e| e.len());
        let mut out = TokenBatch {
            batch,
            seq_len,
            input_ids: Vec::with_capacity(batch * seq_len),
            token_type_ids: Vec::with_capacity(batch * seq_len),
            attention_mask: Vec::with_capacity(batch * seq_len),
            special_mask: Vec::with_capacity(batch * seq_len),
            offsets: Vec::with_capacity(batch),
        };
        for encoding in &encodings {
            out.input_ids
                .extend(encoding.get_ids().iter().map(|&i| i as i64));
            out.token_type_ids
                .extend(encoding.get_type_ids().iter().map(|&i| i as i64));
            out.attention_mask
                .extend(encoding.get_attention_mask().iter().map(|&m| m as f32));
            out.special_mask
                .extend(encoding.get_special_tokens_mask().iter().map(|&m| m as u8));
            let row = (0..encoding.len())
                .map(|i| {
                    let special = encoding.get_special_tokens_mask()[i] == 1;
                    let sequence = encoding.token_to_sequence(i);
                    match (special, sequence) {
                        (false, Some(seq)) => {
                            let (start, end) = encoding.get_offsets()[i];
                            Some((start, end, seq))
                        }
                        _ => None,
                    }
                })
                .collect();
            out.offsets.push(row);
        }
        Ok(out)
    }
}

/// Equal lengths for `count` inputs that fit in one batch of `batch_size`; `None` otherwise.
fn one_batch(count: usize, batch_size: usize) -> Option<Vec<usize>> {
    (count <= batch_size).then(|| vec![0; count])
}

/// A dataset input as the tokenizer takes it: a text, or a pair joined with `[SEP]`.
fn encode_input(input: &Input) -> EncodeInput<'_> {
    match input {
        Input::Text { text } => EncodeInput::Single(text.as_str().into()),
        Input::Pair {
            premise,
            hypothesis,
        } => EncodeInput::Dual(premise.as_str().into(), hypothesis.as_str().into()),
    }
}

impl TokenBatch {
    /// Uploads the batch as model input tensors.
    pub fn to_input<B: Backend>(&self, device: &B::Device) -> BertInput<B> {
        let shape = [self.batch, self.seq_len];
        let ints = |values: &[i64]| {
            Tensor::<B, 2, Int>::from_data(TensorData::new(values.to_vec(), shape), device)
        };
        BertInput {
            input_ids: ints(&self.input_ids),
            token_type_ids: ints(&self.token_type_ids),
            attention_mask: Tensor::from_data(
                TensorData::new(self.attention_mask.clone(), shape),
                device,
            ),
        }
    }

    /// Number of real (non-padding) tokens in each row.
    pub fn lengths(&self) -> Vec<usize> {
        self.attention_mask
            .chunks(self.seq_len.max(1))
            .map(|row| row.iter().filter(|&&m| m > 0.5).count())
            .collect()
    }
}

/// Splits `text` into whitespace-delimited words, as byte spans.
pub fn whitespace_words(text: &str) -> Vec<WordSpan> {
    let mut words = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                words.push(WordSpan { start: s, end: i });
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push(WordSpan {
            start: s,
            end: text.len(),
        });
    }
    words
}
