//! BERT encoder (Devlin et al., 2019), generic over the burn backend.
//!
//! Mirrors Hugging Face's `modeling_bert.py` (`BertModel` without the pooler) so that any HF BERT
//! checkpoint loads by name: each struct below is one HF module and its fields carry the
//! checkpoint's key names. Two keys cannot be Rust field names and are renamed when loading
//! and saving ([`BERT_KEYS`]): `attention.self` ↔ `attention.self_attention` and
//! `LayerNorm` ↔ `layer_norm`.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};
use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointError, HfCheckpoint, KeyMap, load_safetensors};
use crate::ops::activation::gelu;
use crate::ops::dropout::dropout;
use crate::ops::heads::{merge_heads, split_heads};
use crate::ops::int8::{Int8Copy, Kernel};
use crate::ops::layer_norm::layer_norm;
use crate::ops::portable;
use crate::ops::products::{batched_matmul, per_token_or};
use crate::ops::softmax::masked_softmax_last;

/// BERT's renames between Hugging Face keys and the field names below.
pub const BERT_KEYS: KeyMap = KeyMap {
    load: &[
        (r"\.attention\.self\.", ".attention.self_attention."),
        (r"LayerNorm", "layer_norm"),
    ],
    save: &[
        (r"\.attention\.self_attention\.", ".attention.self."),
        (r"layer_norm", "LayerNorm"),
    ],
};

/// The fields of a Hugging Face BERT `config.json` that the architecture needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: usize,
    /// The position id of the first token: 0 for BERT, `pad_token_id + 1` for RoBERTa (whose
    /// positions count from after the padding index). Not a field of BERT's `config.json`.
    #[serde(skip)]
    pub position_offset: usize,
}

fn default_hidden_act() -> String {
    "gelu".into()
}
fn default_dropout() -> f64 {
    0.1
}
fn default_max_position_embeddings() -> usize {
    512
}
fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// Parses a Hugging Face `config.json`, rejecting architectures this module cannot run.
    pub fn from_json(json: &str) -> Result<Self, String> {
        let config: Self =
            serde_json::from_str(json).map_err(|e| format!("invalid BERT config.json: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!(
                "unsupported hidden_act {:?} (only \"gelu\" is implemented)",
                self.hidden_act
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        Ok(())
    }

    /// Builds a randomly initialised model; [`BertConfig::load`] builds a trained one.
    pub fn init<B: Backend>(&self, device: &B::Device) -> BertModel<B> {
        BertModel {
            embeddings: BertEmbeddings::new(self, device),
            encoder: BertEncoder {
                layer: (0..self.num_hidden_layers)
                    .map(|_| BertLayer::new(self, device))
                    .collect(),
            },
        }
    }

    fn layer_norm<B: Backend>(&self, device: &B::Device) -> LayerNorm<B> {
        LayerNormConfig::new(self.hidden_size)
            .with_epsilon(self.layer_norm_eps)
            .init(device)
    }

    fn hidden_dropout(&self) -> Dropout {
        DropoutConfig::new(self.hidden_dropout_prob).init()
    }
}

/// A tokenised batch, padded to a common length.
#[derive(Debug, Clone)]
pub struct BertInput<B: Backend> {
    /// Token ids, `[batch, seq]`.
    pub input_ids: Tensor<B, 2, Int>,
    /// Segment ids (0 for the first text, 1 for the second of a pair), `[batch, seq]`.
    pub token_type_ids: Tensor<B, 2, Int>,
    /// 1.0 for real tokens, 0.0 for padding, `[batch, seq]`.
    pub attention_mask: Tensor<B, 2>,
}

/// `BertModel`: embeddings followed by the transformer encoder.
#[derive(Module, Debug)]
pub struct BertModel<B: Backend> {
    pub embeddings: BertEmbeddings<B>,
    pub encoder: BertEncoder<B>,
}

impl<B: Backend> HfCheckpoint<B> for BertModel<B> {
    const KEYS: KeyMap = BERT_KEYS;
}

impl BertConfig {
    /// The model with the weights of a Hugging Face BERT checkpoint's `model.safetensors`
    /// (a `bert.` key prefix, as `BertFor…` checkpoints have, is accepted).
    pub fn load<B: Backend>(
        &self,
        weights: Vec<u8>,
        device: &B::Device,
    ) -> Result<BertModel<B>, CheckpointError> {
        let mut model = self.init::<B>(device);
        let prefix = super::checkpoint::has_key_prefix(&weights, "bert.").then_some("bert");
        load_safetensors(&mut model, weights, prefix)?;
        Ok(model)
    }
}

impl<B: Backend> BertModel<B> {
    /// Last hidden states, `[batch, seq, hidden]`.
    pub fn forward(&self, input: &BertInput<B>) -> Tensor<B, 3> {
        let words = self
            .embeddings
            .word_embeddings
            .forward(input.input_ids.clone());
        self.forward_from_word_embeddings(words, input)
    }

    /// Like [`Self::forward`], but starting from given word embeddings `[batch, seq, hidden]`
    /// (HF's `inputs_embeds`), so that gradients with respect to them can be taken.
    pub fn forward_from_word_embeddings(
        &self,
        words: Tensor<B, 3>,
        input: &BertInput<B>,
    ) -> Tensor<B, 3> {
        let hidden = self.embeddings.forward(words, input.token_type_ids.clone());
        self.encoder.forward(hidden, &input.attention_mask)
    }

    /// The same model with int8 copies of its linear layers for `kernel` ([`Int8Copy`]), which
    /// inference then multiplies with, on the CPU backend (Flex) of a CPU with that kernel;
    /// elsewhere the model is returned unchanged. The copies are of today's weights: a layer
    /// whose weights change afterwards (training, loading) goes back to f32 by itself.
    pub fn with_int8_copies(mut self, kernel: Kernel) -> Self {
        let copy = |linear: &Linear<B>| Int8Copy::of(linear, kernel);
        for layer in &mut self.encoder.layer {
            let attention = &mut layer.attention.self_attention;
            attention.int8 = [&attention.query, &attention.key, &attention.value].map(copy);
            layer.attention.output.int8 = copy(&layer.attention.output.dense);
            layer.intermediate.int8 = copy(&layer.intermediate.dense);
            layer.output.int8 = copy(&layer.output.dense);
        }
        self.embeddings.portable = self.int8_kernel().is_some_and(Kernel::portable);
        self
    }

    /// The kernel of the copies [`Self::with_int8_copies`] made, if it made them (CPU
    /// backend, a CPU with the kernel).
    pub fn int8_kernel(&self) -> Option<Kernel> {
        self.encoder
            .layer
            .first()
            .and_then(|layer| layer.intermediate.int8.kernel())
    }

    /// The same model with every dropout disabled, for deterministic gradients (saliency).
    pub fn without_dropout(mut self) -> Self {
        let off = DropoutConfig::new(0.0).init();
        self.embeddings.dropout = off.clone();
        for layer in &mut self.encoder.layer {
            layer.attention.self_attention.dropout = off.clone();
            layer.attention.output.dropout = off.clone();
            layer.output.dropout = off.clone();
        }
        self
    }
}

/// `BertEmbeddings`: word + absolute position + token type, then LayerNorm and dropout.
#[derive(Module, Debug)]
pub struct BertEmbeddings<B: Backend> {
    pub word_embeddings: Embedding<B>,
    pub position_embeddings: Embedding<B>,
    /// None when `type_vocab_size` is 0 (DistilBERT has no segments).
    pub token_type_embeddings: Option<Embedding<B>>,
    pub layer_norm: LayerNorm<B>,
    /// `layer_norm`'s epsilon ([`ops::layer_norm`](crate::ops::layer_norm) needs it; burn's
    /// `LayerNorm` keeps its own private).
    #[module(skip)]
    pub layer_norm_eps: f64,
    pub dropout: Dropout,
    pub position_offset: usize,
    /// Whether the encoder's int8 copies use the page's kernels, with which the LayerNorm is
    /// [`portable`]'s ([`BertModel::with_int8_copies`] sets it).
    #[module(skip)]
    pub portable: bool,
}

impl<B: Backend> BertEmbeddings<B> {
    fn new(config: &BertConfig, device: &B::Device) -> Self {
        let embedding = |n| EmbeddingConfig::new(n, config.hidden_size).init(device);
        Self {
            word_embeddings: embedding(config.vocab_size),
            position_embeddings: embedding(config.max_position_embeddings),
            token_type_embeddings: (config.type_vocab_size > 0)
                .then(|| embedding(config.type_vocab_size)),
            layer_norm: config.layer_norm(device),
            layer_norm_eps: config.layer_norm_eps,
            dropout: config.hidden_dropout(),
            position_offset: config.position_offset,
            portable: false,
        }
    }

    fn forward(&self, words: Tensor<B, 3>, token_type_ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, seq, _] = words.dims();
        let device = words.device();
        let offset = self.position_offset as i64;
        let positions = Tensor::<B, 1, Int>::arange(offset..offset + seq as i64, &device)
            .reshape([1, seq])
            .expand([batch, seq]);
        let mut embedded = words + self.position_embeddings.forward(positions);
        if let Some(token_types) = &self.token_type_embeddings {
            embedded = embedded + token_types.forward(token_type_ids);
        }
        let normalised = if self.portable {
            portable::layer_norm(&self.layer_norm, self.layer_norm_eps, embedded)
        } else {
            layer_norm(&self.layer_norm, self.layer_norm_eps, embedded)
        };
        dropout(&self.dropout, normalised)
    }
}

/// `BertEncoder`: a stack of [`BertLayer`]s.
#[derive(Module, Debug)]
pub struct BertEncoder<B: Backend> {
    pub layer: Vec<BertLayer<B>>,
}

impl<B: Backend> BertEncoder<B> {
    fn forward(&self, hidden: Tensor<B, 3>, attention_mask: &Tensor<B, 2>) -> Tensor<B, 3> {
        // Padding keys are masked out: `true` marks a position that must not be attended to.
        // Built once at the scores' full shape: given a broadcast `[batch, 1, 1, seq]` mask,
        // burn-flex's mask_fill copied it element by element in every layer (4 % of encoding).
        let [batch, seq] = attention_mask.dims();
        let heads = self
            .layer
            .first()
            .map_or(1, |layer| layer.attention.self_attention.num_heads);
        let padding = Tensor::<B, 4>::zeros([batch, heads, seq, seq], &attention_mask.device())
            .add(attention_mask.clone().reshape([batch, 1, 1, seq]))
            .lower_elem(0.5);
        self.layer
            .iter()
            .fold(hidden, |hidden, layer| layer.forward(hidden, &padding))
    }
}

/// `BertLayer`: self-attention block followed by the feed-forward block.
#[derive(Module, Debug)]
pub struct BertLayer<B: Backend> {
    pub attention: BertAttention<B>,
    pub intermediate: BertIntermediate<B>,
    pub output: BertOutput<B>,
}

impl<B: Backend> BertLayer<B> {
    fn new(config: &BertConfig, device: &B::Device) -> Self {
        Self {
            attention: BertAttention {
                self_attention: BertSelfAttention::new(config, device),
                output: BertOutput {
                    dense: LinearConfig::new(config.hidden_size, config.hidden_size).init(device),
                    layer_norm: config.layer_norm(device),
                    layer_norm_eps: config.layer_norm_eps,
                    dropout: config.hidden_dropout(),
                    int8: Int8Copy::default(),
                },
            },
            intermediate: BertIntermediate {
                dense: LinearConfig::new(config.hidden_size, config.intermediate_size).init(device),
                int8: Int8Copy::default(),
            },
            output: BertOutput {
                dense: LinearConfig::new(config.intermediate_size, config.hidden_size).init(device),
                layer_norm: config.layer_norm(device),
                layer_norm_eps: config.layer_norm_eps,
                dropout: config.hidden_dropout(),
                int8: Int8Copy::default(),
            },
        }
    }

    fn forward(&self, hidden: Tensor<B, 3>, padding: &Tensor<B, 4, Bool>) -> Tensor<B, 3> {
        let attended = self.attention.forward(hidden, padding);
        let intermediate = gelu(per_token(
            &self.intermediate.dense,
            &self.intermediate.int8,
            attended.clone(),
        ));
        self.output.forward(intermediate, attended)
    }
}

/// `BertAttention`: multi-head self-attention and its output projection.
#[derive(Module, Debug)]
pub struct BertAttention<B: Backend> {
    /// HF key: `attention.self`.
    pub self_attention: BertSelfAttention<B>,
    /// HF's `BertSelfOutput`.
    pub output: BertOutput<B>,
}

impl<B: Backend> BertAttention<B> {
    fn forward(&self, hidden: Tensor<B, 3>, padding: &Tensor<B, 4, Bool>) -> Tensor<B, 3> {
        let context = self.self_attention.forward(hidden.clone(), padding);
        self.output.forward(context, hidden)
    }
}

/// `BertSelfAttention`: scaled dot-product attention over `num_attention_heads` heads.
#[derive(Module, Debug)]
pub struct BertSelfAttention<B: Backend> {
    pub query: Linear<B>,
    pub key: Linear<B>,
    pub value: Linear<B>,
    pub dropout: Dropout,
    pub num_heads: usize,
    /// Int8 copies of `query`, `key` and `value` ([`BertModel::with_int8_copies`]).
    #[module(skip)]
    pub int8: [Int8Copy; 3],
}

impl<B: Backend> BertSelfAttention<B> {
    fn new(config: &BertConfig, device: &B::Device) -> Self {
        let projection = || LinearConfig::new(config.hidden_size, config.hidden_size).init(device);
        Self {
            query: projection(),
            key: projection(),
            value: projection(),
            dropout: DropoutConfig::new(config.attention_probs_dropout_prob).init(),
            num_heads: config.num_attention_heads,
            int8: Default::default(),
        }
    }

    fn forward(&self, hidden: Tensor<B, 3>, padding: &Tensor<B, 4, Bool>) -> Tensor<B, 3> {
        let head_dim = hidden.dims()[2] / self.num_heads;
        let [query_int8, key_int8, value_int8] = &self.int8;
        let query = per_token(&self.query, query_int8, hidden.clone());
        let key = per_token(&self.key, key_int8, hidden.clone());
        let value = per_token(&self.value, value_int8, hidden);
        if query_int8.portable() {
            let divisor = (head_dim as f32).sqrt();
            return portable::attention(query, key, value, self.num_heads, divisor, padding);
        }

        let heads = |x: Tensor<B, 3>| split_heads(x, self.num_heads);
        let (query, key, value) = (heads(query), heads(key), heads(value));
        let scores = batched_matmul(query, key.transpose());
        let probs = masked_softmax_last(scores, (head_dim as f64).sqrt(), padding.clone());
        let probs = dropout(&self.dropout, probs);
        merge_heads(batched_matmul(probs, value))
    }
}

/// `linear` over every token of `input`, in int8 when `int8` holds the layer's copy.
pub fn per_token<B: Backend>(
    linear: &Linear<B>,
    int8: &Int8Copy,
    input: Tensor<B, 3>,
) -> Tensor<B, 3> {
    per_token_or(linear, input, |linear, rows| int8.forward(linear, rows))
}

/// `BertIntermediate`: the first feed-forward projection (GELU applied by the caller).
#[derive(Module, Debug)]
pub struct BertIntermediate<B: Backend> {
    pub dense: Linear<B>,
    #[module(skip)]
    pub int8: Int8Copy,
}

/// `BertOutput` and `BertSelfOutput` (identical in HF): projection, dropout, residual and
/// LayerNorm, after the feed-forward block and after attention respectively.
#[derive(Module, Debug)]
pub struct BertOutput<B: Backend> {
    pub dense: Linear<B>,
    pub layer_norm: LayerNorm<B>,
    /// `layer_norm`'s epsilon, as in [`BertEmbeddings`].
    #[module(skip)]
    pub layer_norm_eps: f64,
    pub dropout: Dropout,
    #[module(skip)]
    pub int8: Int8Copy,
}

impl<B: Backend> BertOutput<B> {
    fn forward(&self, intermediate: Tensor<B, 3>, residual: Tensor<B, 3>) -> Tensor<B, 3> {
        let projected = dropout(
            &self.dropout,
            per_token(&self.dense, &self.int8, intermediate),
        );
        if self.int8.portable() {
            return portable::layer_norm(
                &self.layer_norm,
                self.layer_norm_eps,
                projected + residual,
            );
        }
        layer_norm(&self.layer_norm, self.layer_norm_eps, projected + residual)
    }
}
