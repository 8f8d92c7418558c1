//! T5 (Raffel et al., 2020), the encoder-decoder AutoCAD's infiller is, generic over the burn
//! backend.
//!
//! Mirrors Hugging Face's `modeling_t5.py` (`T5ForConditionalGeneration`), v1.0 (ReLU
//! feed-forward, output tied to the embedding and rescaled by `d_model^-0.5`) and v1.1 / flan-t5
//! (gated-GELU, untied `lm_head`), so any HF T5 `model.safetensors` loads and the directories
//! Flipside saves load in `transformers`. HF's numbered sub-layers (`layer.0`, `layer.1`, …)
//! become named fields ([`T5_KEYS`] renames them). The decoder runs incrementally over a
//! [`DecoderCache`]; [`decode`] searches with it.

pub mod decode;
pub mod loss;
pub mod position;

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointError, HfCheckpoint, KeyMap, has_key_prefix, load_safetensors};
use crate::ops::activation::{self, activate, gelu};
use crate::ops::dropout::dropout;
use crate::ops::heads::{merge_heads, split_heads};
use crate::ops::products::{batched_matmul, matmul_transposed, per_token};
use crate::ops::softmax::softmax_last;

/// T5's renames between Hugging Face keys and the field names below (applied in order).
pub const T5_KEYS: KeyMap = KeyMap {
    load: &[
        (r"^(encoder\.block\.\d+)\.layer\.1\.", "$1.feed_forward."),
        (r"^(decoder\.block\.\d+)\.layer\.1\.", "$1.cross_attention."),
        (r"^(decoder\.block\.\d+)\.layer\.2\.", "$1.feed_forward."),
        (r"\.layer\.0\.", ".self_attention."),
        (r"\.(SelfAttention|EncDecAttention)\.", ".attention."),
        (r"\.DenseReluDense\.", ".dense."),
    ],
    save: &[
        (r"\.self_attention\.attention\.", ".layer.0.SelfAttention."),
        (r"\.self_attention\.", ".layer.0."),
        (
            r"\.cross_attention\.attention\.",
            ".layer.1.EncDecAttention.",
        ),
        (r"\.cross_attention\.", ".layer.1."),
        (r"^(encoder\.block\.\d+)\.feed_forward\.", "$1.layer.1."),
        (r"^(decoder\.block\.\d+)\.feed_forward\.", "$1.layer.2."),
        (r"\.dense\.", ".DenseReluDense."),
    ],
};

/// The fields of a Hugging Face T5 `config.json` that the architecture needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct T5Config {
    pub vocab_size: usize,
    pub d_model: usize,
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    /// Defaults to `num_layers`.
    #[serde(default)]
    pub num_decoder_layers: Option<usize>,
    pub num_heads: usize,
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "default_dropout")]
    pub dropout_rate: f64,
    #[serde(default = "default_epsilon")]
    pub layer_norm_epsilon: f64,
    /// `relu` (v1.0), `gated-gelu` (v1.1, flan-t5), `gelu` or `gated-relu`.
    #[serde(default = "default_feed_forward")]
    pub feed_forward_proj: String,
    /// Output projection tied to the input embedding or its own `lm_head`.
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
    /// Whether the decoder's output is rescaled by `d_model^-0.5` before the projection (v1.0:
    /// yes, v1.1: no). `transformers` ≥ 5 writes it and `tie_word_embeddings: true` for every
    /// model it saves; configs without it meant "rescale when tied".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_decoder_outputs: Option<bool>,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default = "default_eos")]
    pub eos_token_id: u32,
    #[serde(default)]
    pub decoder_start_token_id: u32,
}

fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> usize {
    128
}
fn default_dropout() -> f64 {
    0.1
}
fn default_epsilon() -> f64 {
    1e-6
}
fn default_feed_forward() -> String {
    "relu".into()
}
fn default_true() -> bool {
    true
}
fn default_eos() -> u32 {
    1
}

/// The feed-forward block's activation, from `feed_forward_proj`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    /// Exact (erf) GELU.
    Gelu,
    /// Tanh-approximated GELU (HF's `gelu_new`), what `gated-gelu` means.
    GeluTanh,
}

impl Activation {
    fn apply<B: Backend, const D: usize>(self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Relu => relu(x),
            Self::Gelu => gelu(x),
            Self::GeluTanh => activate(x, activation::Activation::GeluTanh),
        }
    }
}

impl T5Config {
    /// Parses a Hugging Face `config.json`, rejecting what this module cannot run.
    pub fn from_json(json: &str) -> Result<Self, String> {
        let config: Self =
            serde_json::from_str(json).map_err(|e| format!("invalid T5 config.json: {e}"))?;
        config.feed_forward()?;
        if config.num_heads == 0 || config.d_kv == 0 {
            return Err("num_heads and d_kv must be positive".into());
        }
        Ok(config)
    }

    /// A `config.json` that `transformers` reads as `T5ForConditionalGeneration`.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_value(self).expect("a config serialises");
        let map = json.as_object_mut().expect("an object");
        map.insert("num_decoder_layers".into(), self.decoder_layers().into());
        map.insert("model_type".into(), "t5".into());
        map.insert(
            "architectures".into(),
            vec!["T5ForConditionalGeneration"].into(),
        );
        map.insert("is_encoder_decoder".into(), true.into());
        map.insert("initializer_factor".into(), 1.0.into());
        serde_json::to_string_pretty(&json).expect("a config serialises")
    }

    /// Decoder depth.
    pub fn decoder_layers(&self) -> usize {
        self.num_decoder_layers.unwrap_or(self.num_layers)
    }

    /// (gated, activation) from `feed_forward_proj`, as HF interprets it.
    pub fn feed_forward(&self) -> Result<(bool, Activation), String> {
        match self.feed_forward_proj.as_str() {
            "relu" => Ok((false, Activation::Relu)),
            "gelu" => Ok((false, Activation::Gelu)),
            "gated-relu" => Ok((true, Activation::Relu)),
            "gated-gelu" => Ok((true, Activation::GeluTanh)),
            other => Err(format!(
                "unsupported feed_forward_proj {other:?} (relu, gelu, gated-relu, gated-gelu)"
            )),
        }
    }

    /// A randomly initialised model, with T5's initialisation (as HF's `_init_weights`, factor
    /// 1): what `infiller pretrain` starts from. [`T5Config::load`] builds a trained one.
    pub fn init<B: Backend>(&self, device: &B::Device) -> T5Model<B> {
        let (gated, activation) = self.feed_forward().expect("validated by from_json");
        let normal = |std: f64| Initializer::Normal { mean: 0.0, std };
        let d = self.d_model as f64;
        let inner = (self.num_heads * self.d_kv) as f64;
        let linear = |input: usize, output: usize, std: f64| {
            LinearConfig::new(input, output)
                .with_bias(false)
                .with_initializer(normal(std))
                .init(device)
        };
        let attention = |has_bias: bool| T5Attention {
            q: linear(
                self.d_model,
                self.num_heads * self.d_kv,
                (d * self.d_kv as f64).powf(-0.5),
            ),
            k: linear(self.d_model, self.num_heads * self.d_kv, d.powf(-0.5)),
            v: linear(self.d_model, self.num_heads * self.d_kv, d.powf(-0.5)),
            o: linear(self.num_heads * self.d_kv, self.d_model, inner.powf(-0.5)),
            relative_attention_bias: has_bias.then(|| {
                EmbeddingConfig::new(self.relative_attention_num_buckets, self.num_heads)
                    .with_initializer(normal(d.powf(-0.5)))
                    .init(device)
            }),
            num_heads: self.num_heads,
            d_kv: self.d_kv,
            dropout: self.dropout(),
        };
        let norm = || T5LayerNorm {
            weight: Param::from_tensor(Tensor::ones([self.d_model], device)),
            epsilon: self.layer_norm_epsilon,
        };
        let sublayer = |attention| AttentionSublayer {
            attention,
            layer_norm: norm(),
            dropout: self.dropout(),
        };
        let feed_forward = || FeedForwardSublayer {
            dense: FeedForward {
                wi: (!gated).then(|| linear(self.d_model, self.d_ff, d.powf(-0.5))),
                wi_0: gated.then(|| linear(self.d_model, self.d_ff, d.powf(-0.5))),
                wi_1: gated.then(|| linear(self.d_model, self.d_ff, d.powf(-0.5))),
                wo: linear(self.d_ff, self.d_model, (self.d_ff as f64).powf(-0.5)),
                activation,
                dropout: self.dropout(),
            },
            layer_norm: norm(),
            dropout: self.dropout(),
        };
        let stack = |layers: usize, decoder: bool| T5Stack {
            block: (0..layers)
                .map(|i| T5Block {
                    self_attention: sublayer(attention(i == 0)),
                    cross_attention: decoder.then(|| sublayer(attention(false))),
                    feed_forward: feed_forward(),
                })
                .collect(),
            final_layer_norm: norm(),
            dropout: self.dropout(),
            is_decoder: decoder,
            num_buckets: self.relative_attention_num_buckets,
            max_distance: self.relative_attention_max_distance,
        };
        T5Model {
            shared: EmbeddingConfig::new(self.vocab_size, self.d_model)
                .with_initializer(normal(1.0))
                .init(device),
            encoder: stack(self.num_layers, false),
            decoder: stack(self.decoder_layers(), true),
            // HF draws an untied head from N(0, 1), like the embedding.
            lm_head: (!self.tie_word_embeddings)
                .then(|| linear(self.d_model, self.vocab_size, 1.0)),
            output_scale: if self.scales_decoder_outputs() {
                d.powf(-0.5)
            } else {
                1.0
            },
            pad_token_id: self.pad_token_id,
            eos_token_id: self.eos_token_id,
            decoder_start_token_id: self.decoder_start_token_id,
        }
    }

    /// Whether the decoder's output is rescaled before the projection: as the config says, or
    /// (older configs) when the projection is tied.
    pub fn scales_decoder_outputs(&self) -> bool {
        self.scale_decoder_outputs
            .unwrap_or(self.tie_word_embeddings)
    }

    /// The model with the weights of a Hugging Face T5 `model.safetensors`. A stored
    /// `lm_head.weight` is the output projection even where the config says tied, as
    /// `transformers` 5 reads it: it writes `tie_word_embeddings: true` for every model, and
    /// keeps an untied model's head (flan-t5's) in the weights.
    pub fn load<B: Backend>(
        &self,
        weights: Vec<u8>,
        device: &B::Device,
    ) -> Result<T5Model<B>, CheckpointError> {
        let own_head = self.tie_word_embeddings && has_key_prefix(&weights, "lm_head.weight");
        let mut model = if own_head {
            T5Config {
                tie_word_embeddings: false,
                scale_decoder_outputs: Some(self.scales_decoder_outputs()),
                ..self.clone()
            }
            .init::<B>(device)
        } else {
            self.init::<B>(device)
        };
        load_safetensors(&mut model, weights, None)?;
        Ok(model)
    }

    fn dropout(&self) -> Dropout {
        DropoutConfig::new(self.dropout_rate).init()
    }
}

/// `T5ForConditionalGeneration`.
#[derive(Module, Debug)]
pub struct T5Model<B: Backend> {
    /// The token embedding shared by both stacks (and the output, when tied).
    pub shared: Embedding<B>,
    pub encoder: T5Stack<B>,
    pub decoder: T5Stack<B>,
    /// The untied output projection (v1.1); none when the output reuses `shared`.
    pub lm_head: Option<Linear<B>>,
    /// What the decoder's output is multiplied by before the projection: `d_model^-0.5` when the
    /// config says to rescale ([`T5Config::scales_decoder_outputs`]), else 1.
    pub output_scale: f64,
    pub pad_token_id: u32,
    pub eos_token_id: u32,
    pub decoder_start_token_id: u32,
}

impl<B: Backend> HfCheckpoint<B> for T5Model<B> {
    const KEYS: KeyMap = T5_KEYS;
}

/// The encoder's output for a batch, with the mask the decoder's cross-attention needs.
#[derive(Debug, Clone)]
pub struct Encoded<B: Backend> {
    /// `[batch, source, d_model]`.
    pub hidden: Tensor<B, 3>,
    /// Additive mask over source positions: 0 for tokens, `f32::MIN` for padding,
    /// `[batch, 1, 1, source]`.
    pub mask: Tensor<B, 4>,
}

impl<B: Backend> Encoded<B> {
    /// The rows `rows` (in that order, repeats allowed): beams, samples per input.
    pub fn select(&self, rows: Tensor<B, 1, Int>) -> Self {
        Self {
            hidden: self.hidden.clone().select(0, rows.clone()),
            mask: self.mask.clone().select(0, rows),
        }
    }
}

/// Keys and values the decoder has computed so far, per layer: self-attention's grow by one
/// position per step, cross-attention's are computed once from the encoder output.
#[derive(Debug, Clone, Default)]
pub struct DecoderCache<B: Backend> {
    layers: Vec<LayerCache<B>>,
    /// Decoder positions already processed.
    pub length: usize,
}

#[derive(Debug, Clone, Default)]
struct LayerCache<B: Backend> {
    self_kv: Option<(Tensor<B, 4>, Tensor<B, 4>)>,
    cross_kv: Option<(Tensor<B, 4>, Tensor<B, 4>)>,
}

impl<B: Backend> DecoderCache<B> {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            layers: Vec::new(),
            length: 0,
        }
    }

    /// Keeps the rows `rows` in that order (beam search reorders its hypotheses).
    pub fn select(&mut self, rows: Tensor<B, 1, Int>) {
        let pick = |kv: &mut Option<(Tensor<B, 4>, Tensor<B, 4>)>| {
            if let Some((k, v)) = kv.take() {
                *kv = Some((k.select(0, rows.clone()), v.select(0, rows.clone())));
            }
        };
        for layer in &mut self.layers {
            pick(&mut layer.self_kv);
            pick(&mut layer.cross_kv);
        }
    }
}

/// Additive mask `[batch, 1, 1, seq]` from a `[batch, seq]` 1/0 attention mask.
pub fn additive_mask<B: Backend>(attention_mask: Tensor<B, 2>) -> Tensor<B, 4> {
    let [batch, seq] = attention_mask.dims();
    ((attention_mask.neg() + 1.0) * f32::MIN as f64).reshape([batch, 1, 1, seq])
}

impl<B: Backend> T5Model<B> {
    /// Runs the encoder over `input_ids` `[batch, source]` with a 1/0 `attention_mask`.
    pub fn encode(&self, input_ids: Tensor<B, 2, Int>, attention_mask: Tensor<B, 2>) -> Encoded<B> {
        let mask = additive_mask(attention_mask);
        let embedded = self.shared.forward(input_ids);
        let hidden = self.encoder.forward(embedded, mask.clone(), None, None);
        Encoded { hidden, mask }
    }

    /// Logits `[batch, target, vocab]` for `decoder_input_ids` `[batch, target]` (positions
    /// after those already in `cache`, when given; the cache then grows by `target`).
    pub fn decode(
        &self,
        encoded: &Encoded<B>,
        decoder_input_ids: Tensor<B, 2, Int>,
        cache: Option<&mut DecoderCache<B>>,
    ) -> Tensor<B, 3> {
        let embedded = self.shared.forward(decoder_input_ids);
        let hidden =
            self.decoder
                .forward(embedded, encoded.mask.clone(), Some(&encoded.hidden), cache);
        self.project(hidden)
    }

    /// Teacher-forced logits: encoder over the input, decoder over `labels` shifted right
    /// (T5's decoder starts from `decoder_start_token_id`).
    pub fn forward(
        &self,
        input_ids: Tensor<B, 2, Int>,
        attention_mask: Tensor<B, 2>,
        labels: Tensor<B, 2, Int>,
    ) -> Tensor<B, 3> {
        let encoded = self.encode(input_ids, attention_mask);
        self.decode(&encoded, self.shift_right(labels), None)
    }

    /// `labels` shifted one position right behind the decoder start token.
    pub fn shift_right(&self, labels: Tensor<B, 2, Int>) -> Tensor<B, 2, Int> {
        let [batch, target] = labels.dims();
        let start = Tensor::<B, 2, Int>::full(
            [batch, 1],
            self.decoder_start_token_id as i64,
            &labels.device(),
        );
        Tensor::cat(vec![start, labels.slice([0..batch, 0..target - 1])], 1)
    }

    fn project(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let hidden = if self.output_scale == 1.0 {
            hidden
        } else {
            hidden * self.output_scale
        };
        match &self.lm_head {
            Some(head) => per_token(head, hidden),
            None => {
                let [batch, seq, width] = hidden.dims();
                let rows = hidden.reshape([batch * seq, width]);
                matmul_transposed(rows, self.shared.weight.val()).reshape([
                    batch,
                    seq,
                    self.shared.weight.dims()[0],
                ])
            }
        }
    }

    /// The same model with every dropout disabled.
    pub fn without_dropout(mut self) -> Self {
        let off = DropoutConfig::new(0.0).init();
        for stack in [&mut self.encoder, &mut self.decoder] {
            stack.dropout = off.clone();
            for block in &mut stack.block {
                let sublayers = std::iter::once(&mut block.self_attention)
                    .chain(block.cross_attention.as_mut());
                for sublayer in sublayers {
                    sublayer.dropout = off.clone();
                    sublayer.attention.dropout = off.clone();
                }
                block.feed_forward.dropout = off.clone();
                block.feed_forward.dense.dropout = off.clone();
            }
        }
        self
    }

    /// Vocabulary size of the output.
    pub fn vocab_size(&self) -> usize {
        self.shared.weight.dims()[0]
    }
}

/// `T5Stack`: the encoder or the decoder.
#[derive(Module, Debug)]
pub struct T5Stack<B: Backend> {
    pub block: Vec<T5Block<B>>,
    pub final_layer_norm: T5LayerNorm<B>,
    pub dropout: Dropout,
    pub is_decoder: bool,
    pub num_buckets: usize,
    pub max_distance: usize,
}

impl<B: Backend> T5Stack<B> {
    /// `source_mask` masks the encoder's own attention (encoder) or cross-attention (decoder).
    fn forward(
        &self,
        embedded: Tensor<B, 3>,
        source_mask: Tensor<B, 4>,
        encoder_hidden: Option<&Tensor<B, 3>>,
        mut cache: Option<&mut DecoderCache<B>>,
    ) -> Tensor<B, 3> {
        let [_, seq, _] = embedded.dims();
        let offset = cache.as_ref().map_or(0, |c| c.length);
        let keys = offset + seq;
        // Block 0 owns the relative position bias; every layer reuses it.
        let bias = self.block[0].self_attention.attention.position_bias(
            seq,
            keys,
            offset,
            !self.is_decoder,
            self.num_buckets,
            self.max_distance,
        );
        let self_bias = if self.is_decoder {
            bias + causal_mask(seq, keys, offset, &embedded.device())
        } else {
            bias + source_mask.clone()
        };
        if let Some(cache) = cache.as_deref_mut() {
            cache
                .layers
                .resize_with(self.block.len(), LayerCache::default);
        }
        let mut hidden = dropout(&self.dropout, embedded);
        for (i, block) in self.block.iter().enumerate() {
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            hidden = block.forward(
                hidden,
                &self_bias,
                &source_mask,
                encoder_hidden,
                layer_cache,
            );
        }
        if let Some(cache) = cache {
            cache.length = keys;
        }
        dropout(&self.dropout, self.final_layer_norm.forward(hidden))
    }
}

/// Additive causal mask `[1, 1, queries, keys]` for queries at `offset..offset + queries`.
fn causal_mask<B: Backend>(
    queries: usize,
    keys: usize,
    offset: usize,
    device: &B::Device,
) -> Tensor<B, 4> {
    let values: Vec<f32> = (offset..offset + queries)
        .flat_map(|q| (0..keys).map(move |k| if k > q { f32::MIN } else { 0.0 }))
        .collect();
    Tensor::<B, 2>::from_data(TensorData::new(values, [queries, keys]), device)
        .reshape([1, 1, queries, keys])
}

/// `T5Block`: self-attention, cross-attention (decoder only), feed-forward; each pre-normed
/// and residual (HF: `layer.0`, `layer.1`, `layer.2`).
#[derive(Module, Debug)]
pub struct T5Block<B: Backend> {
    pub self_attention: AttentionSublayer<B>,
    pub cross_attention: Option<AttentionSublayer<B>>,
    pub feed_forward: FeedForwardSublayer<B>,
}

impl<B: Backend> T5Block<B> {
    fn forward(
        &self,
        hidden: Tensor<B, 3>,
        self_bias: &Tensor<B, 4>,
        source_mask: &Tensor<B, 4>,
        encoder_hidden: Option<&Tensor<B, 3>>,
        mut cache: Option<&mut LayerCache<B>>,
    ) -> Tensor<B, 3> {
        let self_kv = cache.as_deref_mut().map(|c| &mut c.self_kv);
        let mut hidden = self
            .self_attention
            .forward(hidden, self_bias, KeySource::Itself(self_kv));
        if let (Some(cross), Some(encoder_hidden)) = (&self.cross_attention, encoder_hidden) {
            let cross_kv = cache.map(|c| &mut c.cross_kv);
            hidden = cross.forward(
                hidden,
                source_mask,
                KeySource::Encoder(encoder_hidden, cross_kv),
            );
        }
        self.feed_forward.forward(hidden)
    }
}

/// Where an attention layer's keys and values come from, and their cache.
enum KeySource<'a, B: Backend> {
    /// Self-attention: the new positions, appended to those cached.
    Itself(Option<&'a mut Option<(Tensor<B, 4>, Tensor<B, 4>)>>),
    /// Cross-attention: the encoder output (computed once when cached).
    Encoder(
        &'a Tensor<B, 3>,
        Option<&'a mut Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    ),
}

/// HF's `T5LayerSelfAttention` / `T5LayerCrossAttention`: `x + dropout(attention(norm(x)))`.
#[derive(Module, Debug)]
pub struct AttentionSublayer<B: Backend> {
    pub attention: T5Attention<B>,
    pub layer_norm: T5LayerNorm<B>,
    pub dropout: Dropout,
}

impl<B: Backend> AttentionSublayer<B> {
    fn forward(
        &self,
        hidden: Tensor<B, 3>,
        bias: &Tensor<B, 4>,
        keys: KeySource<B>,
    ) -> Tensor<B, 3> {
        let normed = self.layer_norm.forward(hidden.clone());
        hidden
            + self
                .dropout
                .forward(self.attention.forward(normed, bias, keys))
    }
}

/// `T5Attention`: unscaled dot-product attention with an additive bias (relative positions
/// and masks).
#[derive(Module, Debug)]
pub struct T5Attention<B: Backend> {
    pub q: Linear<B>,
    pub k: Linear<B>,
    pub v: Linear<B>,
    pub o: Linear<B>,
    /// `[buckets, heads]`, in block 0's self-attention only.
    pub relative_attention_bias: Option<Embedding<B>>,
    pub num_heads: usize,
    pub d_kv: usize,
    pub dropout: Dropout,
}

impl<B: Backend> T5Attention<B> {
    /// The relative position bias `[1, heads, queries, keys]` (zeros without a bias table).
    fn position_bias(
        &self,
        queries: usize,
        keys: usize,
        offset: usize,
        bidirectional: bool,
        num_buckets: usize,
        max_distance: usize,
    ) -> Tensor<B, 4> {
        let Some(table) = &self.relative_attention_bias else {
            let device = self.q.weight.device();
            return Tensor::zeros([1, self.num_heads, queries, keys], &device);
        };
        let device = table.weight.device();
        let ids = position::bucket_grid(
            queries,
            keys,
            offset,
            bidirectional,
            num_buckets,
            max_distance,
        );
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [queries, keys]), &device);
        table
            .forward(ids)
            .permute([2, 0, 1])
            .reshape([1, self.num_heads, queries, keys])
    }

    fn heads(&self, x: Tensor<B, 3>) -> Tensor<B, 4> {
        split_heads(x, self.num_heads)
    }

    fn forward(
        &self,
        hidden: Tensor<B, 3>,
        bias: &Tensor<B, 4>,
        keys: KeySource<B>,
    ) -> Tensor<B, 3> {
        let query = self.heads(per_token(&self.q, hidden.clone()));
        let project = |x: &Tensor<B, 3>| {
            (
                self.heads(per_token(&self.k, x.clone())),
                self.heads(per_token(&self.v, x.clone())),
            )
        };
        let (key, value) = match keys {
            KeySource::Itself(None) => project(&hidden),
            KeySource::Itself(Some(cached)) => {
                let (k, v) = project(&hidden);
                let kv = match cached.take() {
                    Some((old_k, old_v)) => (
                        Tensor::cat(vec![old_k, k], 2),
                        Tensor::cat(vec![old_v, v], 2),
                    ),
                    None => (k, v),
                };
                *cached = Some(kv.clone());
                kv
            }
            KeySource::Encoder(encoder, None) => project(encoder),
            KeySource::Encoder(encoder, Some(cached)) => {
                cached.get_or_insert_with(|| project(encoder)).clone()
            }
        };
        let scores = batched_matmul(query, key.transpose()) + bias.clone();
        let probs = dropout(&self.dropout, softmax_last(scores));
        per_token(&self.o, merge_heads(batched_matmul(probs, value)))
    }
}

/// HF's `T5LayerFF`: `x + dropout(feed_forward(norm(x)))`.
#[derive(Module, Debug)]
pub struct FeedForwardSublayer<B: Backend> {
    /// HF key: `DenseReluDense`.
    pub dense: FeedForward<B>,
    pub layer_norm: T5LayerNorm<B>,
    pub dropout: Dropout,
}

impl<B: Backend> FeedForwardSublayer<B> {
    fn forward(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let normed = self.layer_norm.forward(hidden.clone());
        hidden + dropout(&self.dropout, self.dense.forward(normed))
    }
}

/// `T5DenseActDense` (`wo(act(wi x))`) or `T5DenseGatedActDense` (`wo(act(wi_0 x) * wi_1 x)`).
#[derive(Module, Debug)]
pub struct FeedForward<B: Backend> {
    pub wi: Option<Linear<B>>,
    pub wi_0: Option<Linear<B>>,
    pub wi_1: Option<Linear<B>>,
    pub wo: Linear<B>,
    #[module(skip)]
    pub activation: Activation,
    pub dropout: Dropout,
}

impl<B: Backend> FeedForward<B> {
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let inner = match (&self.wi, &self.wi_0, &self.wi_1) {
            (Some(wi), _, _) => self.activation.apply(per_token(wi, x)),
            (None, Some(gate), Some(up)) => {
                self.activation.apply(per_token(gate, x.clone())) * per_token(up, x)
            }
            _ => unreachable!("a feed-forward block has wi or wi_0 and wi_1"),
        };
        per_token(&self.wo, dropout(&self.dropout, inner))
    }
}

/// T5's RMS norm: `x / sqrt(mean(x²) + ε) · weight`, no centring, no bias.
#[derive(Module, Debug)]
pub struct T5LayerNorm<B: Backend> {
    pub weight: Param<Tensor<B, 1>>,
    pub epsilon: f64,
}

impl<B: Backend> T5LayerNorm<B> {
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let variance = (x.clone() * x.clone()).mean_dim(2);
        let [width] = self.weight.dims();
        x * (variance + self.epsilon).sqrt().recip() * self.weight.val().reshape([1, 1, width])
    }
}
