//! Sentence embeddings: BERT → mean pooling → L2 normalisation, as sentence-transformers does.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use super::bert::{BertConfig, BertModel};
use super::pooling::{l2_normalize, mean_pool};
use super::{CheckpointFiles, LoadError};
use crate::batching::{BatchExecutor, map_batches};
use crate::data::Input;
use crate::ops::int8::Kernel;
use crate::tokenize::{TextTokenizer, TokenBatch, TokenizeError};

/// A BERT model and its tokenizer, producing unit-length sentence embeddings.
pub struct SentenceEncoder<B: Backend> {
    pub model: BertModel<B>,
    pub tokenizer: TextTokenizer,
    pub device: B::Device,
}

impl<B: Backend> SentenceEncoder<B> {
    /// An encoder from a Hugging Face BERT checkpoint's files, truncating inputs at `max_len`
    /// tokens (sentence-transformers' `max_seq_length`; the position limit when `None`).
    pub fn from_files(
        files: CheckpointFiles,
        max_len: Option<usize>,
        device: &B::Device,
    ) -> Result<Self, LoadError> {
        let config = BertConfig::from_json(&String::from_utf8_lossy(&files.config))
            .map_err(LoadError::Config)?;
        let max_len = max_len.unwrap_or(config.max_position_embeddings);
        Ok(Self {
            tokenizer: TextTokenizer::from_json(&files.tokenizer, max_len)?,
            model: config.load(files.weights, device)?,
            device: device.clone(),
        })
    }

    /// The same encoder multiplying in int8 with `kernel` where the CPU allows
    /// ([`BertModel::with_int8_copies`]).
    pub fn with_int8_copies(self, kernel: Kernel) -> Self {
        Self {
            model: self.model.with_int8_copies(kernel),
            ..self
        }
    }

    /// The width of the embeddings.
    pub fn dim(&self) -> usize {
        self.model.embeddings.word_embeddings.weight.dims()[1]
    }

    /// Embeds one batch: `[texts.len(), dim]`, rows of unit L2 norm.
    pub fn embed_batch(&self, texts: &[&str]) -> Result<Tensor<B, 2>, TokenizeError> {
        self.embed_tokens(self.tokenizer.encode_texts(texts)?)
    }

    /// Embeds one batch of inputs (texts, or text pairs joined with `[SEP]` and segment ids).
    pub fn embed_input_batch(&self, inputs: &[&Input]) -> Result<Tensor<B, 2>, TokenizeError> {
        self.embed_tokens(self.tokenizer.encode_inputs(inputs)?)
    }

    fn embed_tokens(&self, tokens: TokenBatch) -> Result<Tensor<B, 2>, TokenizeError> {
        let input = tokens.to_input::<B>(&self.device);
        let hidden = self.model.forward(&input);
        Ok(l2_normalize(mean_pool(hidden, &input.attention_mask)))
    }

    /// Embeds any number of texts in batches of `batch_size` sorted by token count, returning
    /// rows in input order; `on_batch` is called with the number of texts done after each batch.
    pub fn embed_all(
        &self,
        texts: &[&str],
        batch_size: usize,
        executor: &impl BatchExecutor,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>, TokenizeError> {
        let lengths = self.tokenizer.text_batch_lengths(texts, batch_size)?;
        self.embed_batches(&lengths, batch_size, executor, on_batch, |batch| {
            let texts: Vec<&str> = batch.iter().map(|&i| texts[i]).collect();
            self.embed_batch(&texts)
        })
    }

    /// [`SentenceEncoder::embed_all`] for inputs that may be text pairs.
    pub fn embed_inputs(
        &self,
        inputs: &[&Input],
        batch_size: usize,
        executor: &impl BatchExecutor,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>, TokenizeError> {
        let lengths = self.tokenizer.input_batch_lengths(inputs, batch_size)?;
        self.embed_batches(&lengths, batch_size, executor, on_batch, |batch| {
            let inputs: Vec<&Input> = batch.iter().map(|&i| inputs[i]).collect();
            self.embed_input_batch(&inputs)
        })
    }

    fn embed_batches(
        &self,
        lengths: &[usize],
        batch_size: usize,
        executor: &impl BatchExecutor,
        on_batch: &(dyn Fn(usize) + Sync),
        embed: impl Fn(&[usize]) -> Result<Tensor<B, 2>, TokenizeError> + Sync,
    ) -> Result<Vec<Vec<f32>>, TokenizeError> {
        map_batches(lengths, batch_size, executor, |batch| {
            let embedded = embed(batch)?;
            let dim = embedded.dims()[1];
            let values = embedded
                .into_data()
                .into_vec::<f32>()
                .expect("embeddings are f32");
            on_batch(batch.len());
            Ok(values.chunks(dim).map(<[f32]>::to_vec).collect())
        })
    }
}

/// Cosine similarity of two vectors (their dot product when both have unit norm).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b)).max(1e-12)
}
