//! Sequence classifier: BERT encoder, mean pooling, dropout and a linear head.
//!
//! Like HF's `BertForSequenceClassification` (keys `bert.*` and `classifier.*`), but the head
//! reads the mean-pooled token states — the representation MiniLM was trained to produce —
//! instead of the `[CLS]` pooler.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use super::bert::{BERT_KEYS, BertConfig, BertInput, BertModel};
use super::checkpoint::{HfCheckpoint, KeyMap, load_safetensors};
use super::pooling::mean_pool;
use super::{CheckpointFiles, LoadError};
use crate::batching::{BatchExecutor, map_batches};
use crate::data::Input;
use crate::metrics::softmax_rows;
use crate::tokenize::{TextTokenizer, TokenizeError};

/// Everything needed to rebuild a classifier; saved as `config.json` beside its weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifierConfig {
    /// The encoder architecture.
    pub bert: BertConfig,
    /// Label names; the head has one output per label, in this order.
    pub labels: Vec<String>,
    /// Inputs are truncated to this many tokens.
    pub max_len: usize,
    /// Dropout before the head during training.
    #[serde(default = "default_head_dropout")]
    pub head_dropout: f64,
}

fn default_head_dropout() -> f64 {
    0.1
}

impl ClassifierConfig {
    /// Builds a randomly initialised classifier (load weights with [`crate::checkpoint`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> SequenceClassifier<B> {
        SequenceClassifier {
            bert: self.bert.init(device),
            dropout: DropoutConfig::new(self.head_dropout).init(),
            classifier: LinearConfig::new(self.bert.hidden_size, self.labels.len()).init(device),
        }
    }
}

/// BERT with a classification head over mean-pooled token states.
#[derive(Module, Debug)]
pub struct SequenceClassifier<B: Backend> {
    pub bert: BertModel<B>,
    pub dropout: Dropout,
    pub classifier: Linear<B>,
}

/// The encoder's keys are BERT's (`bert.*`); the head's (`classifier.*`) need no renames.
impl<B: Backend> HfCheckpoint<B> for SequenceClassifier<B> {
    const KEYS: KeyMap = BERT_KEYS;
}

impl<B: Backend> SequenceClassifier<B> {
    /// Label logits, `[batch, labels]`.
    pub fn forward(&self, input: &BertInput<B>) -> Tensor<B, 2> {
        self.head(self.bert.forward(input), input)
    }

    /// Label logits computed from given word embeddings (see [`BertModel::forward_from_word_embeddings`]).
    pub fn forward_from_word_embeddings(
        &self,
        words: Tensor<B, 3>,
        input: &BertInput<B>,
    ) -> Tensor<B, 2> {
        self.head(self.bert.forward_from_word_embeddings(words, input), input)
    }

    fn head(&self, hidden: Tensor<B, 3>, input: &BertInput<B>) -> Tensor<B, 2> {
        let pooled = mean_pool(hidden, &input.attention_mask);
        self.classifier.forward(self.dropout.forward(pooled))
    }

    /// The same classifier with every dropout disabled.
    pub fn without_dropout(mut self) -> Self {
        self.bert = self.bert.without_dropout();
        self.dropout = DropoutConfig::new(0.0).init();
        self
    }
}

/// Why a prediction failed.
#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
    #[error("the backend failed: {0}")]
    Execution(String),
}

/// A classifier ready for inference: model, tokenizer and label names.
pub struct TextClassifier<B: Backend> {
    pub model: SequenceClassifier<B>,
    pub tokenizer: TextTokenizer,
    pub config: ClassifierConfig,
    pub device: B::Device,
}

impl<B: Backend> TextClassifier<B> {
    /// A classifier from the files of its directory (`config.json` is a [`ClassifierConfig`]),
    /// ready for inference: the one constructor the server, the CLI and the browser use.
    pub fn from_files(files: CheckpointFiles, device: &B::Device) -> Result<Self, LoadError> {
        let config: ClassifierConfig = serde_json::from_slice(&files.config)
            .map_err(|e| LoadError::Config(format!("not a Flipside classifier config: {e}")))?;
        let mut model = config.init::<B>(device);
        load_safetensors(&mut model, files.weights, None)?;
        Ok(Self {
            tokenizer: TextTokenizer::from_json(&files.tokenizer, config.max_len)?,
            model: model.without_dropout(),
            config,
            device: device.clone(),
        })
    }

    /// Label probabilities for one batch, row-major `[inputs.len(), labels]`.
    pub fn predict_batch(&self, inputs: &[&Input]) -> Result<Vec<f32>, TokenizeError> {
        let tokens = self.tokenizer.encode_inputs(inputs)?;
        let logits = self.model.forward(&tokens.to_input::<B>(&self.device));
        let logits = logits
            .into_data()
            .into_vec::<f32>()
            .expect("logits are f32");
        Ok(softmax_rows(&logits, self.config.labels.len()))
    }

    /// [`Self::predict_batch`] for backends that can only read results asynchronously (WebGPU
    /// in the browser); the same numbers on every backend.
    pub async fn predict_batch_async(&self, inputs: &[&Input]) -> Result<Vec<f32>, PredictError> {
        let tokens = self.tokenizer.encode_inputs(inputs)?;
        let logits = self.model.forward(&tokens.to_input::<B>(&self.device));
        let logits = logits
            .into_data_async()
            .await
            .map_err(|e| PredictError::Execution(e.to_string()))?
            .convert::<f32>()
            .into_vec::<f32>()
            .expect("converted to f32");
        Ok(softmax_rows(&logits, self.config.labels.len()))
    }

    /// Label probabilities for any number of inputs (one row per input, in input order), in
    /// length-sorted batches; `on_batch` is called with the number of inputs done per batch.
    pub fn predict(
        &self,
        inputs: &[&Input],
        batch_size: usize,
        executor: &impl BatchExecutor,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>, TokenizeError> {
        let width = self.config.labels.len();
        let lengths: Vec<usize> = inputs.iter().map(|i| i.text_len()).collect();
        map_batches(&lengths, batch_size, executor, |batch| {
            let batch_inputs: Vec<&Input> = batch.iter().map(|&i| inputs[i]).collect();
            let probs = self.predict_batch(&batch_inputs)?;
            on_batch(batch.len());
            Ok(probs.chunks(width).map(<[f32]>::to_vec).collect())
        })
    }
}
