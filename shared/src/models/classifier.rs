//! Sequence classifiers: a BERT-family encoder and a classification head, read from and written
//! as Hugging Face checkpoints that `transformers` loads without custom code.
//!
//! Three Hugging Face architectures are read ([`Architecture`]): `BertForSequenceClassification`
//! (what Flipside trains), `RobertaForSequenceClassification` and
//! `DistilBertForSequenceClassification`. All three are a post-LayerNorm transformer encoder
//! ([`BertModel`], with RoBERTa's position offset and DistilBERT's key names mapped onto it) and
//! a small head over the first token. Directories saved by Flipside 0.1 (a nested `bert` config
//! and a head over mean-pooled states, which no Hugging Face class has) still load.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::Tensor;
use burn::tensor::activation::{relu, tanh};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::bert::{BERT_KEYS, BertConfig, BertInput, BertModel};
use super::checkpoint::{CheckpointError, load_renamed, save_renamed};
use super::pooling::mean_pool;
use super::{CheckpointFiles, LoadError};
use crate::batching::{BatchExecutor, map_batches};
use crate::data::Input;
use crate::metrics::softmax_rows;
use crate::ops::dropout::dropout;
use crate::ops::int8::Kernel;
use crate::tokenize::{TextTokenizer, TokenizeError};

/// Which Hugging Face class a classifier checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Architecture {
    /// `BertForSequenceClassification`: `[CLS]` → pooler (dense, tanh) → dropout → classifier.
    Bert,
    /// `RobertaForSequenceClassification`: `<s>` → dropout → dense, tanh → dropout → out_proj.
    Roberta,
    /// `DistilBertForSequenceClassification`: `[CLS]` → pre_classifier, ReLU → dropout →
    /// classifier.
    DistilBert,
    /// Flipside 0.1's head: mean-pooled token states → dropout → classifier.
    MeanPooled,
}

impl Architecture {
    /// Renames from the checkpoint's keys to the fields of [`SequenceClassifier`].
    fn load_keys(self) -> Vec<(&'static str, &'static str)> {
        let own: &[(&str, &str)] = match self {
            Architecture::Bert => &[(r"^bert\.pooler\.dense\.", "pre_classifier.")],
            Architecture::Roberta => &[
                (r"^roberta\.", "bert."),
                (r"^classifier\.dense\.", "pre_classifier."),
                (r"^classifier\.out_proj\.", "classifier."),
            ],
            Architecture::DistilBert => &[
                (r"^distilbert\.", "bert."),
                (r"\.transformer\.layer\.", ".encoder.layer."),
                (r"\.attention\.q_lin\.", ".attention.self.query."),
                (r"\.attention\.k_lin\.", ".attention.self.key."),
                (r"\.attention\.v_lin\.", ".attention.self.value."),
                (r"\.attention\.out_lin\.", ".attention.output.dense."),
                (r"\.sa_layer_norm\.", ".attention.output.LayerNorm."),
                (r"\.ffn\.lin1\.", ".intermediate.dense."),
                (r"\.ffn\.lin2\.", ".output.dense."),
                (r"\.output_layer_norm\.", ".output.LayerNorm."),
            ],
            Architecture::MeanPooled => &[],
        };
        own.iter().chain(BERT_KEYS.load).copied().collect()
    }

    /// Renames from the fields of [`SequenceClassifier`] to the checkpoint's keys.
    fn save_keys(self) -> Result<Vec<(&'static str, &'static str)>, CheckpointError> {
        let own: &[(&str, &str)] = match self {
            Architecture::Bert => &[(r"^pre_classifier\.", "bert.pooler.dense.")],
            Architecture::Roberta => &[
                (r"^bert\.", "roberta."),
                (r"^classifier\.", "classifier.out_proj."),
                (r"^pre_classifier\.", "classifier.dense."),
            ],
            Architecture::MeanPooled => &[],
            Architecture::DistilBert => {
                return Err(CheckpointError::Serialise(
                    "saving DistilBERT classifiers is not supported".into(),
                ));
            }
        };
        Ok(BERT_KEYS.save.iter().chain(own).copied().collect())
    }

    /// The Hugging Face `model_type` and class name (none for Flipside 0.1's head).
    fn hf_names(self) -> Option<(&'static str, &'static str)> {
        match self {
            Architecture::Bert => Some(("bert", "BertForSequenceClassification")),
            Architecture::Roberta => Some(("roberta", "RobertaForSequenceClassification")),
            Architecture::DistilBert => Some(("distilbert", "DistilBertForSequenceClassification")),
            Architecture::MeanPooled => None,
        }
    }
}

/// Everything needed to rebuild a classifier; saved as `config.json` beside its weights.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifierConfig {
    pub architecture: Architecture,
    /// The encoder (RoBERTa's and DistilBERT's expressed as BERT's).
    pub bert: BertConfig,
    /// Label names; the head has one output per label, in this order.
    pub labels: Vec<String>,
    /// Inputs are truncated to this many tokens.
    pub max_len: usize,
    /// Dropout in the head during training.
    pub head_dropout: f64,
}

/// Flipside 0.1's `config.json`.
#[derive(Deserialize)]
struct LegacyConfig {
    bert: BertConfig,
    labels: Vec<String>,
    max_len: usize,
    #[serde(default = "default_head_dropout")]
    head_dropout: f64,
}

fn default_head_dropout() -> f64 {
    0.1
}

/// The `config.json` key with which Flipside records its truncation length.
const MAX_LEN_KEY: &str = "flipside_max_len";

impl ClassifierConfig {
    /// A new `BertForSequenceClassification` over the encoder `bert`.
    pub fn bert(bert: BertConfig, labels: Vec<String>, max_len: usize) -> Self {
        Self {
            architecture: Architecture::Bert,
            head_dropout: bert.hidden_dropout_prob,
            bert,
            labels,
            max_len,
        }
    }

    /// Reads a classifier's `config.json`: a Hugging Face BERT, RoBERTa or DistilBERT
    /// sequence-classification config, or Flipside 0.1's own.
    pub fn from_json(bytes: &[u8]) -> Result<Self, LoadError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| LoadError::Config(e.to_string()))?;
        if value.get("bert").is_some() && value.get("model_type").is_none() {
            let legacy: LegacyConfig =
                serde_json::from_value(value).map_err(|e| LoadError::Config(e.to_string()))?;
            return Ok(Self {
                architecture: Architecture::MeanPooled,
                bert: legacy.bert,
                labels: legacy.labels,
                max_len: legacy.max_len,
                head_dropout: legacy.head_dropout,
            });
        }
        Self::from_hf(&value).map_err(LoadError::Config)
    }

    fn from_hf(value: &Value) -> Result<Self, String> {
        let (architecture, bert) = family_of(value)?;
        let positions = bert
            .max_position_embeddings
            .saturating_sub(bert.position_offset);
        let max_len = value[MAX_LEN_KEY]
            .as_u64()
            .map_or(positions.min(512), |n| n as usize);
        let head_dropout = value["classifier_dropout"]
            .as_f64()
            .or_else(|| value["seq_classif_dropout"].as_f64())
            .unwrap_or(bert.hidden_dropout_prob);
        Ok(Self {
            architecture,
            labels: labels_of(value)?,
            bert,
            max_len,
            head_dropout,
        })
    }

    /// The `config.json` to save: Hugging Face's format (Flipside 0.1's for its own head).
    pub fn to_json(&self) -> Value {
        let Some((model_type, class)) = self.architecture.hf_names() else {
            return json!({
                "bert": self.bert,
                "labels": self.labels,
                "max_len": self.max_len,
                "head_dropout": self.head_dropout,
            });
        };
        let mut value = serde_json::to_value(&self.bert).expect("a config serialises");
        let labels = |f: &dyn Fn(usize, &String) -> (String, Value)| -> Value {
            Value::Object(
                self.labels
                    .iter()
                    .enumerate()
                    .map(|(i, l)| f(i, l))
                    .collect(),
            )
        };
        let extra = json!({
            "model_type": model_type,
            "architectures": [class],
            "id2label": labels(&|i, l| (i.to_string(), json!(l))),
            "label2id": labels(&|i, l| (l.clone(), json!(i))),
            "problem_type": "single_label_classification",
            "classifier_dropout": self.head_dropout,
            MAX_LEN_KEY: self.max_len,
        });
        let object = value.as_object_mut().expect("an object");
        object.extend(extra.as_object().expect("an object").clone());
        value
    }

    /// Builds a randomly initialised classifier (load weights with [`load_classifier_weights`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> SequenceClassifier<B> {
        let hidden = self.bert.hidden_size;
        SequenceClassifier {
            bert: self.bert.init(device),
            pre_classifier: (self.architecture != Architecture::MeanPooled)
                .then(|| LinearConfig::new(hidden, hidden).init(device)),
            dropout: DropoutConfig::new(self.head_dropout).init(),
            classifier: LinearConfig::new(hidden, self.labels.len()).init(device),
            architecture: self.architecture,
        }
    }
}

/// An encoder's family and its configuration in BERT's terms, from its Hugging Face
/// `config.json` (BERT when it names no `model_type`, as sentence-transformers' MiniLM does).
pub fn encoder_family(config_json: &[u8]) -> Result<(Architecture, BertConfig), String> {
    let mut value: Value = serde_json::from_slice(config_json).map_err(|e| e.to_string())?;
    if value.get("model_type").is_none() {
        value["model_type"] = json!("bert");
    }
    family_of(&value)
}

/// The family a Hugging Face config names in `model_type`, and its configuration in BERT's
/// terms (RoBERTa's position offset; DistilBERT's own field names).
fn family_of(value: &Value) -> Result<(Architecture, BertConfig), String> {
    let model_type = value["model_type"].as_str().unwrap_or_default();
    Ok(match model_type {
        "bert" => (
            Architecture::Bert,
            BertConfig::from_json(&value.to_string())?,
        ),
        "roberta" => {
            let mut bert = BertConfig::from_json(&value.to_string())?;
            bert.position_offset = bert.pad_token_id + 1;
            (Architecture::Roberta, bert)
        }
        "distilbert" => (Architecture::DistilBert, distilbert_as_bert(value)?),
        other => {
            return Err(format!(
                "model_type {other:?} is not a model family Flipside can run (bert, roberta, \
                 distilbert)"
            ));
        }
    })
}

/// DistilBERT's `config.json` in BERT's terms (no segments, GELU, 1e-12 LayerNorm epsilon).
fn distilbert_as_bert(value: &Value) -> Result<BertConfig, String> {
    let field = |name: &str| {
        value[name]
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("the DistilBERT config.json lacks {name:?}"))
    };
    if value["sinusoidal_pos_embds"].as_bool() == Some(true) {
        return Err("DistilBERT with sinusoidal position embeddings is not supported".into());
    }
    let bert = json!({
        "vocab_size": field("vocab_size")?,
        "hidden_size": field("dim")?,
        "num_hidden_layers": field("n_layers")?,
        "num_attention_heads": field("n_heads")?,
        "intermediate_size": field("hidden_dim")?,
        "hidden_act": value["activation"].as_str().unwrap_or("gelu"),
        "hidden_dropout_prob": value["dropout"].as_f64().unwrap_or(0.1),
        "attention_probs_dropout_prob": value["attention_dropout"].as_f64().unwrap_or(0.1),
        "max_position_embeddings": field("max_position_embeddings")?,
        "type_vocab_size": 0,
        "layer_norm_eps": 1e-12,
        "pad_token_id": value["pad_token_id"].as_u64().unwrap_or(0),
    });
    BertConfig::from_json(&bert.to_string())
}

/// The label names of a Hugging Face config, in id order (`LABEL_i` where `id2label` is absent).
fn labels_of(value: &Value) -> Result<Vec<String>, String> {
    let Some(id2label) = value["id2label"].as_object() else {
        let n = value["num_labels"].as_u64().unwrap_or(2) as usize;
        return Ok((0..n).map(|i| format!("LABEL_{i}")).collect());
    };
    let mut labels = vec![None; id2label.len()];
    for (id, label) in id2label {
        let slot = id
            .parse::<usize>()
            .ok()
            .and_then(|i| labels.get_mut(i))
            .ok_or_else(|| {
                format!(
                    "id2label has the id {id:?}, not one of 0..{}",
                    id2label.len()
                )
            })?;
        *slot = Some(label.as_str().unwrap_or_default().to_string());
    }
    Ok(labels.into_iter().map(Option::unwrap_or_default).collect())
}

/// Loads a classifier checkpoint's safetensors into `model` (keys by its architecture).
pub fn load_classifier_weights<B: Backend>(
    model: &mut SequenceClassifier<B>,
    weights: Vec<u8>,
) -> Result<(), CheckpointError> {
    load_renamed(model, weights, &model.architecture.load_keys(), false).map(|_| ())
}

/// Loads a pretrained encoder checkpoint (a bare `BertModel`'s keys, or with a `bert.` prefix)
/// into a new classifier: the encoder and, where the checkpoint has one, BERT's pooler; the
/// rest of the head keeps its initialisation.
pub fn load_encoder_weights<B: Backend>(
    model: &mut SequenceClassifier<B>,
    weights: Vec<u8>,
) -> Result<(), CheckpointError> {
    let mut renames = vec![(r"^(embeddings|encoder|pooler)\.", "bert.$1.")];
    renames.extend(model.architecture.load_keys());
    let missing = load_renamed(model, weights, &renames, true)?;
    match missing.iter().find(|path| path.starts_with("bert.")) {
        Some(path) => Err(CheckpointError::Mismatch(format!(
            "the encoder checkpoint lacks {path} ({} parameters missing)",
            missing.len()
        ))),
        None => Ok(()),
    }
}

/// Serialises a classifier's weights under its architecture's Hugging Face key names.
pub fn save_classifier_weights<B: Backend>(
    model: &SequenceClassifier<B>,
) -> Result<Vec<u8>, CheckpointError> {
    save_renamed(model, &model.architecture.save_keys()?)
}

/// An encoder with a classification head ([`Architecture`] says which).
#[derive(Module, Debug)]
pub struct SequenceClassifier<B: Backend> {
    pub bert: BertModel<B>,
    /// BERT's pooler dense layer, RoBERTa's `classifier.dense`, DistilBERT's `pre_classifier`;
    /// none for the mean-pooled head.
    pub pre_classifier: Option<Linear<B>>,
    pub dropout: Dropout,
    pub classifier: Linear<B>,
    #[module(skip)]
    pub architecture: Architecture,
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
        let [batch, _, width] = hidden.dims();
        let first = || hidden.clone().narrow(1, 0, 1).reshape([batch, width]);
        let dense = |x| {
            self.pre_classifier
                .as_ref()
                .expect("this head has a dense layer")
                .forward(x)
        };
        let features = match self.architecture {
            Architecture::MeanPooled => mean_pool(hidden.clone(), &input.attention_mask),
            Architecture::Bert => tanh(dense(first())),
            Architecture::Roberta => tanh(dense(dropout(&self.dropout, first()))),
            Architecture::DistilBert => relu(dense(first())),
        };
        self.classifier.forward(dropout(&self.dropout, features))
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
#[derive(Clone)]
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
        let config = ClassifierConfig::from_json(&files.config)?;
        let mut model = config.init::<B>(device);
        load_classifier_weights(&mut model, files.weights)?;
        Ok(Self {
            tokenizer: TextTokenizer::from_json(&files.tokenizer, config.max_len)?,
            model: model.without_dropout(),
            config,
            device: device.clone(),
        })
    }

    /// The same classifier with its encoder's linear layers multiplying in int8 with `kernel`
    /// where that runs ([`BertModel::with_int8_copies`]; the head stays f32).
    pub fn with_int8_copies(self, kernel: Kernel) -> Self {
        let model = SequenceClassifier {
            bert: self.model.bert.with_int8_copies(kernel),
            ..self.model
        };
        Self { model, ..self }
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
    /// batches sorted by token count; `on_batch` is called with the number of inputs done per
    /// batch.
    pub fn predict(
        &self,
        inputs: &[&Input],
        batch_size: usize,
        executor: &impl BatchExecutor,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>, TokenizeError> {
        let width = self.config.labels.len();
        let lengths = self.tokenizer.input_batch_lengths(inputs, batch_size)?;
        map_batches(&lengths, batch_size, executor, |batch| {
            let batch_inputs: Vec<&Input> = batch.iter().map(|&i| inputs[i]).collect();
            let probs = self.predict_batch(&batch_inputs)?;
            on_batch(batch.len());
            Ok(probs.chunks(width).map(<[f32]>::to_vec).collect())
        })
    }
}
