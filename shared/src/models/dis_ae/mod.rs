//! LASS's disentangled autoencoder (Dis-AE, LASS §3.2), generic over the burn backend, small
//! enough to run in the browser.
//!
//! Coop's BiMeanVAE encoder (a BiLSTM whose states are mean-pooled into `h`) with two attention
//! heads over the BiLSTM states, queried by `h`: one gives the sentiment vector `z_e`, the other
//! the content vector `z_c` (the paper's "separate self-attention layers"; it says no more). One
//! classifier `C` reads both. The decoder never sees `z_e` itself but the mix of the learnable
//! label vectors `Z_r` weighted by `softmax(C(z_e))`, concatenated with `z_c`; like BiMeanVAE's,
//! it is an LSTM whose state starts at `tanh(W z)` and which is fed `z` beside every token, with
//! its output tied to the embedding. The model is deterministic (an autoencoder: LASS's losses
//! have no KL term), so `z` is the encoder's output itself.
//!
//! Recombining the content of one text with the sentiment of another, or of a label
//! ([`DisAe::latent`] with [`Sentiment`]), and decoding it is how LASS mass-produces
//! counterfactuals.
//!
//! Beyond the paper, a Dis-AE may copy ([`ContentCopy`]): the encoder also reads the text with
//! each opinion word replaced by one mask, whose states are the content vector's source and a memory that
//! the decoder attends to after each step (Luong's attention, no input feeding). A bottleneck
//! of 256 numbers reconstructs a 40-word sentence only after far more training than 2 CPU cores
//! give (Coop trains on 25M sentences); attention copies the content from the first thousand
//! steps, and since the memory lacks the opinion words, they come from the sentiment.

pub mod loss;
pub mod reproduce;
pub mod vocabulary;

use std::collections::HashSet;

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig, LstmState};
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointError, load_renamed, save_renamed};
use super::lstm::FusedLstm;
use super::pooling::{mean_pool, weighted_sum};
use super::search::{
    DecodeSettings, Decoded, SpecialTokens, StepDecoder, generate_all, logit_rows,
};
use crate::ops::activation::tanh;
use crate::ops::additive_scores::additive_scores;
use crate::ops::products::{matmul_transposed, per_token};

/// The Dis-AE's sizes and special tokens (`config.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisAeConfig {
    pub vocab_size: usize,
    /// Token embeddings (Coop: 256).
    pub d_embed: usize,
    /// Each direction of the encoder's BiLSTM (Coop: 256).
    pub d_encoder: usize,
    /// The sentiment and the content vector, each (the decoder gets both: Coop's z is 512).
    pub d_latent: usize,
    /// The decoder LSTM (Coop: 512).
    pub d_decoder: usize,
    /// The sentiment classes, in the classifier's order.
    pub labels: Vec<String>,
    pub pad_id: u32,
    pub bos_id: u32,
    pub eos_id: u32,
    /// The copying decoder and the words its memory masks (none: the paper's decoder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<ContentCopy>,
    /// BiMeanVAE's Gaussian posterior (Coop): each head also gives a log-variance, training
    /// decodes a draw and pays its KL divergence from N(0, I), and everything else reads the
    /// mean (false: LASS's deterministic Dis-AE).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub variational: bool,
}

/// A Dis-AE that copies its content through attention (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentCopy {
    /// Lowercased words the content memory masks, each as one [`MASK_ID`] (the opinion
    /// lexicons' words that are opinions in reviews).
    pub masked_words: Vec<String>,
}

/// The id that stands for a masked word in the content memory's input (`<unk>`, which LASS's
/// decoding bans; a character the vocabulary lacks is `<unk>` too).
pub const MASK_ID: u32 = 3;

impl DisAeConfig {
    /// Coop's sizes for a vocabulary and label set.
    pub fn new(vocab_size: usize, labels: Vec<String>, [pad_id, bos_id, eos_id]: [u32; 3]) -> Self {
        Self {
            vocab_size,
            d_embed: 256,
            d_encoder: 256,
            d_latent: 256,
            d_decoder: 512,
            labels,
            pad_id,
            bos_id,
            eos_id,
            copy: None,
            variational: false,
        }
    }

    /// The words a copying Dis-AE's content memory masks (none for the paper's
    /// decoder).
    pub fn masked_words(&self) -> HashSet<String> {
        self.copy
            .iter()
            .flat_map(|copy| copy.masked_words.iter().cloned())
            .collect()
    }

    /// BOS starts a decoded text, EOS ends it, padding follows it.
    pub fn special_tokens(&self) -> SpecialTokens {
        SpecialTokens {
            start: self.bos_id,
            end: self.eos_id,
            pad: self.pad_id,
        }
    }

    /// The model with the weights of a `model.safetensors` that [`DisAe::to_safetensors`] wrote.
    pub fn load<B: Backend>(
        &self,
        weights: Vec<u8>,
        device: &B::Device,
    ) -> Result<DisAe<B>, CheckpointError> {
        let mut model = self.init(device);
        load_renamed(&mut model, weights, &[], false)?;
        Ok(model)
    }

    /// A randomly initialised model.
    pub fn init<B: Backend>(&self, device: &B::Device) -> DisAe<B> {
        let states = 2 * self.d_encoder;
        let latent = 2 * self.d_latent;
        let labels = self.labels.len();
        DisAe {
            embedding: EmbeddingConfig::new(self.vocab_size, self.d_embed)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.1,
                })
                .init(device),
            forward_lstm: FusedLstm::new(self.d_embed, self.d_encoder, device),
            backward_lstm: FusedLstm::new(self.d_embed, self.d_encoder, device),
            sentiment_head: AttentionPool::new(states, self.d_latent, self.variational, device),
            content_head: AttentionPool::new(states, self.d_latent, self.variational, device),
            classifier: LinearConfig::new(self.d_latent, labels).init(device),
            label_vectors: Initializer::Normal {
                mean: 0.0,
                std: 0.1,
            }
            .init([labels, self.d_latent], device),
            initial_state: LinearConfig::new(latent, 2 * self.d_decoder).init(device),
            decoder: FusedLstm::new(self.d_embed + latent, self.d_decoder, device),
            copy: self
                .copy
                .as_ref()
                .map(|_| CopyAttention::new(states, self.d_decoder, device)),
            output: LinearConfig::new(self.d_decoder, self.d_embed).init(device),
            output_bias: Initializer::Zeros.init([self.vocab_size], device),
        }
    }
}

/// Luong's general attention of the decoder's states over the content memory, and the attended
/// state `tanh(W_c [h_t ; context_t])` that the output layer reads.
#[derive(Module, Debug)]
pub struct CopyAttention<B: Backend> {
    /// Memory states → keys in the decoder's width.
    key: Linear<B>,
    combine: Linear<B>,
}

impl<B: Backend> CopyAttention<B> {
    fn new(d_memory: usize, d_decoder: usize, device: &B::Device) -> Self {
        Self {
            key: LinearConfig::new(d_memory, d_decoder)
                .with_bias(false)
                .init(device),
            combine: LinearConfig::new(d_decoder + d_memory, d_decoder).init(device),
        }
    }

    /// Decoder states `[batch, steps, d_decoder]` → attended states of the same shape.
    fn attend(&self, hidden: Tensor<B, 3>, memory: &Memory<B>) -> Tensor<B, 3> {
        let [batch, steps, d] = hidden.dims();
        let [_, seq] = memory.mask.dims();
        let scores = hidden
            .clone()
            .matmul(memory.keys.clone().swap_dims(1, 2))
            .div_scalar((d as f64).sqrt());
        let padding = memory
            .mask
            .clone()
            .equal_elem(0.0)
            .reshape([batch, 1, seq])
            .expand([batch, steps, seq]);
        let weights = softmax(scores.mask_fill(padding, f32::NEG_INFINITY), 2);
        let context = weights.matmul(memory.states.clone());
        tanh(per_token(
            &self.combine,
            Tensor::cat(vec![hidden, context], 2),
        ))
    }
}

/// What a copying decoder attends to: the encoder's states of the masked content text.
#[derive(Debug, Clone)]
pub struct Memory<B: Backend> {
    /// `[batch, seq, 2·d_encoder]`.
    pub states: Tensor<B, 3>,
    /// The states' keys, `[batch, seq, d_decoder]`, computed once per text.
    keys: Tensor<B, 3>,
    /// 1 for real tokens, 0 for padding, `[batch, seq]`.
    pub mask: Tensor<B, 2>,
}

impl<B: Backend> Memory<B> {
    /// The rows `rows` (a batch index tensor).
    fn select(&self, rows: Tensor<B, 1, Int>) -> Self {
        Self {
            states: self.states.clone().select(0, rows.clone()),
            keys: self.keys.clone().select(0, rows.clone()),
            mask: self.mask.clone().select(0, rows),
        }
    }
}

/// Attention pooling: weights from `vᵀ tanh(W s_t + U q)` over the real positions, then the
/// weighted sum of the states projected to the latent size (and, for a variational Dis-AE,
/// to its log-variance).
#[derive(Module, Debug)]
pub struct AttentionPool<B: Backend> {
    state: Linear<B>,
    query: Linear<B>,
    score: Linear<B>,
    project: Linear<B>,
    log_variance: Option<Linear<B>>,
}

impl<B: Backend> AttentionPool<B> {
    fn new(d_states: usize, d_out: usize, variational: bool, device: &B::Device) -> Self {
        Self {
            state: LinearConfig::new(d_states, d_states).init(device),
            query: LinearConfig::new(d_states, d_states)
                .with_bias(false)
                .init(device),
            score: LinearConfig::new(d_states, 1).with_bias(false).init(device),
            project: LinearConfig::new(d_states, d_out).init(device),
            log_variance: variational.then(|| LinearConfig::new(d_states, d_out).init(device)),
        }
    }

    /// States `[batch, seq, d]`, their 1/0 mask `[batch, seq]` and the query `[batch, d]` →
    /// the pooled vector `[batch, d_out]` (the posterior's mean) and its log-variance.
    fn forward(
        &self,
        states: Tensor<B, 3>,
        mask: &Tensor<B, 2>,
        query: Tensor<B, 2>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        let [_, _, d] = states.dims();
        let scores = additive_scores(
            per_token(&self.state, states.clone()),
            self.query.forward(query),
            self.score.weight.val().reshape([d]),
        );
        let scores = scores.mask_fill(mask.clone().equal_elem(0.0), f32::NEG_INFINITY);
        let pooled = weighted_sum(states, softmax(scores, 1));
        let log_variance = self
            .log_variance
            .as_ref()
            .map(|layer| layer.forward(pooled.clone()));
        (self.project.forward(pooled), log_variance)
    }
}

/// LASS's Dis-AE (see the module documentation).
#[derive(Module, Debug)]
pub struct DisAe<B: Backend> {
    embedding: Embedding<B>,
    forward_lstm: FusedLstm<B>,
    /// Reads each text from its last real token back to its first.
    backward_lstm: FusedLstm<B>,
    sentiment_head: AttentionPool<B>,
    content_head: AttentionPool<B>,
    /// `C`: sentiment-class logits of a sentiment or a content vector.
    classifier: Linear<B>,
    /// `Z_r`: one learnable sentiment vector per class, `[classes, d_latent]`.
    pub label_vectors: Param<Tensor<B, 2>>,
    initial_state: Linear<B>,
    decoder: FusedLstm<B>,
    /// The copying decoder's attention (none: the paper's decoder).
    copy: Option<CopyAttention<B>>,
    output: Linear<B>,
    output_bias: Param<Tensor<B, 1>>,
}

/// A batch of token ids (`[batch, seq]`, padded with the pad id at the end).
#[derive(Debug, Clone)]
pub struct PaddedIds<B: Backend> {
    pub ids: Tensor<B, 2, Int>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Tensor<B, 2>,
    /// Real tokens per row.
    pub lengths: Vec<usize>,
    /// The same texts with each opinion word as one [`MASK_ID`], for a copying Dis-AE's content
    /// (none: the texts themselves).
    pub content: Option<Box<PaddedIds<B>>>,
}

impl<B: Backend> PaddedIds<B> {
    /// Pads `rows` at the end with `pad_id`.
    pub fn new(rows: &[Vec<u32>], pad_id: u32, device: &B::Device) -> Self {
        let seq = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        Self::padded_to(rows, seq, pad_id, device)
    }

    /// Pads `rows` and their masked copies `content` (each at most as long as its row) to the
    /// same width.
    ///
    /// # Panics
    /// If `content` has another number of rows or a row longer than its text.
    pub fn with_content(
        rows: &[Vec<u32>],
        content: &[Vec<u32>],
        pad_id: u32,
        device: &B::Device,
    ) -> Self {
        assert!(
            content.len() == rows.len()
                && rows.iter().zip(content).all(|(r, c)| c.len() <= r.len()),
            "one masked copy per text, at most as long as it"
        );
        let batch = Self::new(rows, pad_id, device);
        let seq = batch.ids.dims()[1];
        Self {
            content: Some(Box::new(Self::padded_to(content, seq, pad_id, device))),
            ..batch
        }
    }

    fn padded_to(rows: &[Vec<u32>], seq: usize, pad_id: u32, device: &B::Device) -> Self {
        let ids: Vec<i64> = rows
            .iter()
            .flat_map(|row| (0..seq).map(move |t| row.get(t).copied().unwrap_or(pad_id) as i64))
            .collect();
        let mask: Vec<f32> = rows
            .iter()
            .flat_map(|row| (0..seq).map(move |t| if t < row.len() { 1.0 } else { 0.0 }))
            .collect();
        let shape = [rows.len(), seq];
        Self {
            ids: Tensor::from_data(TensorData::new(ids, shape), device),
            mask: Tensor::from_data(TensorData::new(mask, shape), device),
            lengths: rows.iter().map(Vec::len).collect(),
            content: None,
        }
    }
}

/// What the encoder makes of a batch of texts.
#[derive(Debug, Clone)]
pub struct Encoding<B: Backend> {
    /// `z_e`, `[batch, d_latent]`.
    pub sentiment: Tensor<B, 2>,
    /// `z_c`, `[batch, d_latent]`.
    pub content: Tensor<B, 2>,
    /// A copying Dis-AE's memory of the content.
    pub memory: Option<Memory<B>>,
    /// A variational Dis-AE's log-variances of `sentiment` and `content` (which are then the
    /// posterior's means).
    pub log_variances: Option<[Tensor<B, 2>; 2]>,
}

impl<B: Backend> Encoding<B> {
    /// The heads' means and log-variances (both or neither) as an encoding.
    fn of_heads(
        (sentiment, sentiment_log_variance): (Tensor<B, 2>, Option<Tensor<B, 2>>),
        (content, content_log_variance): (Tensor<B, 2>, Option<Tensor<B, 2>>),
        memory: Option<Memory<B>>,
    ) -> Self {
        Self {
            sentiment,
            content,
            memory,
            log_variances: sentiment_log_variance
                .zip(content_log_variance)
                .map(Into::into),
        }
    }
}

/// Where a decoded text's sentiment comes from.
#[derive(Debug, Clone)]
pub enum Sentiment<B: Backend> {
    /// `softmax(C(z_e))`-weighted label vectors of encoded texts (`[batch, d_latent]` `z_e`).
    Encoded(Tensor<B, 2>),
    /// The label vector of one class for every row.
    Label(usize),
}

/// The decoder's LSTM state between steps.
pub type DecoderState<B> = LstmState<B, 2>;

impl<B: Backend> DisAe<B> {
    /// The weights as safetensors bytes (burn's field paths as keys, PyTorch layout).
    pub fn to_safetensors(&self) -> Result<Vec<u8>, CheckpointError> {
        save_renamed(self, &[])
    }

    /// The sentiment and content vectors of `batch` (and a copying Dis-AE's memory, read from
    /// the masked texts: the texts themselves when `batch` has none).
    pub fn encode(&self, batch: &PaddedIds<B>) -> Encoding<B> {
        let Some(copy) = &self.copy else {
            let states = self.states(batch.ids.clone(), &batch.lengths);
            let pooled = mean_pool(states.clone(), &batch.mask);
            let sentiment =
                self.sentiment_head
                    .forward(states.clone(), &batch.mask, pooled.clone());
            let content = self.content_head.forward(states, &batch.mask, pooled);
            return Encoding::of_heads(sentiment, content, None);
        };
        // Both readings in one pass of the BiLSTM: the texts, then their masked copies (as wide).
        let [rows, seq] = batch.ids.dims();
        let content = batch.content.as_deref().unwrap_or(batch);
        let both = self.states(
            Tensor::cat(vec![batch.ids.clone(), content.ids.clone()], 0),
            &[batch.lengths.as_slice(), content.lengths.as_slice()].concat(),
        );
        let d = both.dims()[2];
        let states = both.clone().slice([0..rows, 0..seq, 0..d]);
        let masked = both.slice([rows..2 * rows, 0..seq, 0..d]);
        let sentiment = self.sentiment_head.forward(
            states.clone(),
            &batch.mask,
            mean_pool(states, &batch.mask),
        );
        let content_vector = self.content_head.forward(
            masked.clone(),
            &content.mask,
            mean_pool(masked.clone(), &content.mask),
        );
        let memory = Memory {
            keys: per_token(&copy.key, masked.clone()),
            states: masked,
            mask: content.mask.clone(),
        };
        Encoding::of_heads(sentiment, content_vector, Some(memory))
    }

    /// The BiLSTM's states of `ids` (`[batch, seq]`, rows of `lengths` real tokens),
    /// `[batch, seq, 2·d_encoder]`.
    fn states(&self, ids: Tensor<B, 2, Int>, lengths: &[usize]) -> Tensor<B, 3> {
        let seq = ids.dims()[1];
        let embedded = self.embedding.forward(ids);
        let (forward, _) = self.forward_lstm.forward(embedded.clone(), None);
        let reversal = reversal_index::<B>(lengths, seq, &embedded.device());
        let (backward, _) = self
            .backward_lstm
            .forward(gather_rows(embedded, &reversal), None);
        Tensor::cat(vec![forward, gather_rows(backward, &reversal)], 2)
    }

    /// `C`'s sentiment-class logits of sentiment or content vectors, `[batch, classes]`.
    pub fn classify(&self, vectors: Tensor<B, 2>) -> Tensor<B, 2> {
        self.classifier.forward(vectors)
    }

    /// `C`'s logits of the label vectors `Z_r`, `[classes, classes]` (row i should say class i).
    pub fn classify_label_vectors(&self) -> Tensor<B, 2> {
        self.classify(self.label_vectors.val())
    }

    /// The decoder's input: the sentiment (as a mix of label vectors) beside `content`,
    /// `[batch, 2·d_latent]`.
    pub fn latent(&self, sentiment: Sentiment<B>, content: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, _] = content.dims();
        let mixed = match sentiment {
            Sentiment::Encoded(z_e) => {
                softmax(self.classify(z_e), 1).matmul(self.label_vectors.val())
            }
            Sentiment::Label(class) => {
                let d = self.label_vectors.dims()[1];
                self.label_vectors
                    .val()
                    .slice([class..class + 1, 0..d])
                    .expand([batch, d])
            }
        };
        Tensor::cat(vec![mixed, content], 1)
    }

    /// The decoder's state before its first step.
    pub fn initial_state(&self, latent: &Tensor<B, 2>) -> DecoderState<B> {
        let [hidden, cell] = tanh(self.initial_state.forward(latent.clone()))
            .chunk(2, 1)
            .try_into()
            .expect("two halves");
        LstmState::new(cell, hidden)
    }

    /// Teacher-forced next-token logits `[batch, seq, vocab]` of `inputs` (`[batch, seq]`,
    /// starting with BOS) given `latent` (and, for a copying Dis-AE, the content's `memory`).
    pub fn decode(
        &self,
        latent: Tensor<B, 2>,
        memory: Option<&Memory<B>>,
        inputs: Tensor<B, 2, Int>,
    ) -> Tensor<B, 3> {
        let state = self.initial_state(&latent);
        self.decode_from(self.latent_gates(latent), memory, inputs, state)
            .0
    }

    /// What `latent` adds to the decoder's gates at every step (computed once a decoding).
    pub fn latent_gates(&self, latent: Tensor<B, 2>) -> Tensor<B, 2> {
        self.decoder.fed_gates(latent)
    }

    /// As [`DisAe::decode`] from a given state, with the latent's [`DisAe::latent_gates`];
    /// also returns the state after the last input (one input per row decodes one step).
    ///
    /// # Panics
    /// If the Dis-AE copies and `memory` is none.
    pub fn decode_from(
        &self,
        latent_gates: Tensor<B, 2>,
        memory: Option<&Memory<B>>,
        inputs: Tensor<B, 2, Int>,
        state: DecoderState<B>,
    ) -> (Tensor<B, 3>, DecoderState<B>) {
        let [batch, seq] = inputs.dims();
        let embedded = self.embedding.forward(inputs);
        let (hidden, state) = self
            .decoder
            .forward_beside(embedded, latent_gates, Some(state));
        let hidden = match &self.copy {
            Some(copy) => copy.attend(
                hidden,
                memory.expect("a copying Dis-AE decodes with its content's memory"),
            ),
            None => hidden,
        };
        let projected = per_token(&self.output, hidden);
        let [_, _, d_embed] = projected.dims();
        let vocab = self.output_bias.dims()[0];
        let logits = matmul_transposed(
            projected.reshape([batch * seq, d_embed]),
            self.embedding.weight.val(),
        )
        .reshape([batch, seq, vocab])
            + self.output_bias.val().reshape([1, 1, vocab]);
        (logits, state)
    }
}

impl<B: Backend> DisAe<B> {
    /// Decodes every row of `latent` (LASS: beam 4, at most 70 tokens), a copying Dis-AE
    /// attending to `memory`: every output the search ends with, the best first
    /// ([`generate_all`]).
    pub fn generate(
        &self,
        latent: Tensor<B, 2>,
        memory: Option<Memory<B>>,
        tokens: SpecialTokens,
        settings: &DecodeSettings,
    ) -> Vec<Vec<Decoded>> {
        let mut steps = DisAeSteps {
            model: self,
            state: self.initial_state(&latent),
            latent_gates: self.latent_gates(latent),
            memory,
            tokens,
        };
        generate_all(&mut steps, settings)
    }
}

/// The decoder over fixed latents, one token per call.
struct DisAeSteps<'a, B: Backend> {
    model: &'a DisAe<B>,
    /// Each row's [`DisAe::latent_gates`].
    latent_gates: Tensor<B, 2>,
    memory: Option<Memory<B>>,
    state: DecoderState<B>,
    tokens: SpecialTokens,
}

impl<B: Backend> DisAeSteps<'_, B> {
    /// Keeps the rows `rows` of the latents and the memory (if `latent_too`) and of the LSTM
    /// state.
    fn select(&mut self, rows: &[usize], latent_too: bool) {
        let rows: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let n = rows.len();
        let device = self.latent_gates.device();
        let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [n]), &device);
        if latent_too {
            self.latent_gates = self.latent_gates.clone().select(0, rows.clone());
            self.memory = self.memory.as_ref().map(|m| m.select(rows.clone()));
        }
        self.state = LstmState::new(
            self.state.cell.clone().select(0, rows.clone()),
            self.state.hidden.clone().select(0, rows),
        );
    }
}

impl<B: Backend> StepDecoder for DisAeSteps<'_, B> {
    fn rows(&self) -> usize {
        self.latent_gates.dims()[0]
    }

    fn special_tokens(&self) -> SpecialTokens {
        self.tokens
    }

    fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
        let ids: Vec<i64> = last.iter().map(|&t| t as i64).collect();
        let ids = Tensor::<B, 2, Int>::from_data(
            TensorData::new(ids, [last.len(), 1]),
            &self.latent_gates.device(),
        );
        let state = LstmState::new(self.state.cell.clone(), self.state.hidden.clone());
        let latent_gates = self.latent_gates.clone();
        let (logits, state) =
            self.model
                .decode_from(latent_gates, self.memory.as_ref(), ids, state);
        self.state = state;
        logit_rows(logits)
    }

    fn repeat_rows(&mut self, times: usize) {
        let rows: Vec<usize> = (0..self.rows())
            .flat_map(|r| std::iter::repeat_n(r, times))
            .collect();
        self.select(&rows, true);
    }

    fn reorder(&mut self, rows: &[usize]) {
        // Every copy of an input has the same latent: only the state moves, unless inputs leave.
        self.select(rows, rows.len() != self.rows());
    }
}

/// For each row, position `t < length` ↦ `length − 1 − t` (padding stays put), `[batch, seq]`:
/// gathering with it reverses each text in place, and gathering again undoes it.
fn reversal_index<B: Backend>(
    lengths: &[usize],
    seq: usize,
    device: &B::Device,
) -> Tensor<B, 2, Int> {
    let index: Vec<i64> = lengths
        .iter()
        .flat_map(|&length| {
            (0..seq).map(move |t| if t < length { length - 1 - t } else { t } as i64)
        })
        .collect();
    Tensor::from_data(TensorData::new(index, [lengths.len(), seq]), device)
}

/// `x[b, index[b, t], :]`, `[batch, seq, d]`.
fn gather_rows<B: Backend>(x: Tensor<B, 3>, index: &Tensor<B, 2, Int>) -> Tensor<B, 3> {
    let [batch, seq, d] = x.dims();
    x.gather(
        1,
        index
            .clone()
            .reshape([batch, seq, 1])
            .expand([batch, seq, d]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    fn tiny_config() -> DisAeConfig {
        let labels = vec!["negative".into(), "positive".into()];
        let mut config = DisAeConfig::new(20, labels, [0, 1, 2]);
        (
            config.d_embed,
            config.d_encoder,
            config.d_latent,
            config.d_decoder,
        ) = (8, 6, 4, 10);
        config
    }

    fn tiny() -> DisAe<Flex> {
        tiny_config().init(&Default::default())
    }

    fn max_abs_diff<const D: usize>(a: Tensor<Flex, D>, b: Tensor<Flex, D>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    #[test]
    fn padding_does_not_change_a_text_s_encoding() {
        let model = tiny();
        let device = Default::default();
        let text = vec![1, 5, 6, 7, 2];
        let alone = model.encode(&PaddedIds::new(std::slice::from_ref(&text), 0, &device));
        let padded = model.encode(&PaddedIds::new(
            &[text, vec![1, 9, 9, 9, 9, 9, 9, 2]],
            0,
            &device,
        ));
        let first = |x: Tensor<Flex, 2>| x.slice([0..1, 0..4]);
        assert!(max_abs_diff(alone.sentiment, first(padded.sentiment)) < 1e-6);
        assert!(max_abs_diff(alone.content, first(padded.content)) < 1e-6);
    }

    #[test]
    fn recombination_takes_content_from_one_text_and_sentiment_from_the_other() {
        let model = tiny();
        let device = Default::default();
        let encoded = model.encode(&PaddedIds::new(
            &[vec![1, 5, 6, 2], vec![1, 11, 12, 13, 2]],
            0,
            &device,
        ));
        let row = |x: &Tensor<Flex, 2>, i: usize| x.clone().slice([i..i + 1, 0..4]);
        // Row 0's content with row 1's sentiment.
        let child = model.latent(
            Sentiment::Encoded(row(&encoded.sentiment, 1)),
            row(&encoded.content, 0),
        );
        let own = model.latent(
            Sentiment::Encoded(encoded.sentiment.clone()),
            encoded.content.clone(),
        );
        let halves = |x: Tensor<Flex, 2>, i: usize| {
            (x.clone().slice([i..i + 1, 0..4]), x.slice([i..i + 1, 4..8]))
        };
        let (child_sentiment, child_content) = halves(child, 0);
        let (_, content_0) = halves(own.clone(), 0);
        let (sentiment_1, _) = halves(own, 1);
        assert_eq!(max_abs_diff(child_content, content_0), 0.0);
        assert_eq!(max_abs_diff(child_sentiment, sentiment_1), 0.0);
        // A label's sentiment is its label vector, whatever the content.
        let labelled = model.latent(Sentiment::Label(0), encoded.content.clone());
        let label_vector = model.label_vectors.val().slice([0..1, 0..4]);
        for i in 0..2 {
            let (sentiment, _) = halves(labelled.clone(), i);
            assert_eq!(max_abs_diff(sentiment, label_vector.clone()), 0.0);
        }
    }

    type A = burn::backend::Autodiff<Flex>;

    /// A two-label Dis-AE of `vocab_size` ids small enough to train in a test (copying if
    /// `copy`).
    fn small_config(vocab_size: usize, copy: bool) -> DisAeConfig {
        let mut config = DisAeConfig::new(
            vocab_size,
            vec!["negative".into(), "positive".into()],
            [0, 1, 2],
        );
        (
            config.d_embed,
            config.d_encoder,
            config.d_latent,
            config.d_decoder,
        ) = (16, 16, 8, 32);
        config.copy = copy.then(|| ContentCopy {
            masked_words: Vec::new(),
        });
        config
    }

    /// 300 steps of Adam (lr 1e-2) on `loss` from fresh weights.
    fn train_small(config: &DisAeConfig, loss: impl Fn(&DisAe<A>) -> Tensor<A, 1>) -> DisAe<Flex> {
        use burn::module::AutodiffModule;
        use burn::optim::{AdamConfig, GradientsParams, Optimizer};

        let mut model: DisAe<A> = config.init(&Default::default());
        let mut optimizer = AdamConfig::new().init();
        for _ in 0..300 {
            let grads = GradientsParams::from_grads(loss(&model).backward(), &model);
            model = optimizer.step(1e-2, model, grads);
        }
        model.valid()
    }

    /// Beam search with 4 beams for at most 10 tokens, never writing `banned`.
    fn beam_search(banned: Vec<u32>) -> DecodeSettings {
        DecodeSettings {
            search: crate::models::search::Search::Beam {
                beams: 4,
                length_penalty: 0.0,
            },
            max_tokens: 10,
            banned,
            logit_bias: Vec::new(),
            sentinels: None,
        }
    }

    #[test]
    fn trained_on_pairs_it_rewrites_content_with_the_other_sentiment() {
        use super::loss::{LabelledBatch, LossWeights};

        let device = Default::default();
        // 0 pad, 1 BOS, 2 EOS; "the film was great/awful", "the cast is superb/dreadful",
        // "the plot was fine/dull".
        let positive = [vec![3, 4, 5, 6], vec![3, 8, 9, 10], vec![3, 12, 5, 13]];
        let negative = [vec![3, 4, 5, 7], vec![3, 8, 9, 11], vec![3, 12, 5, 14]];
        let wrap = |texts: &[Vec<u32>]| -> Vec<Vec<u32>> {
            texts
                .iter()
                .map(|t| [vec![1], t.clone(), vec![2]].concat())
                .collect()
        };
        let batch = |texts: &[Vec<u32>], class: i64| LabelledBatch::<A> {
            tokens: PaddedIds::new(&wrap(texts), 0, &device),
            classes: Tensor::from_data(
                TensorData::new(vec![class; texts.len()], [texts.len()]),
                &device,
            ),
        };
        let (a, b) = (batch(&positive, 1), batch(&negative, 0));
        let config = small_config(15, false);
        let weights = LossWeights {
            alpha: 5.0,
            beta: 1.0,
            gamma: 1.0,
            kl: 1.0,
        };
        let model = train_small(&config, |model| model.pair_losses(&a, &b).total(weights));
        let settings = beam_search(Vec::new());
        let decode = |sentiment: Sentiment<Flex>, content_of: &[Vec<u32>]| -> Vec<Vec<u32>> {
            let encoded = model.encode(&PaddedIds::new(&wrap(content_of), 0, &device));
            let latent = model.latent(sentiment, encoded.content);
            model
                .generate(latent, encoded.memory, config.special_tokens(), &settings)
                .into_iter()
                .map(|mut outputs| outputs.swap_remove(0).tokens)
                .collect()
        };
        // Each positive text's content with the negative label gives its negative twin, and
        // the other way round.
        assert_eq!(decode(Sentiment::Label(0), &positive), negative);
        assert_eq!(decode(Sentiment::Label(1), &negative), positive);
        // With the sentiment of another text (a negative parent of other content).
        let other = model.encode(&PaddedIds::new(&wrap(&negative[2..]), 0, &device));
        let sentiment = other.sentiment.expand([3, config.d_latent]);
        assert_eq!(decode(Sentiment::Encoded(sentiment), &positive), negative);
    }

    #[test]
    fn saved_weights_load_into_the_same_model() {
        let model = tiny();
        let mut config = tiny_config();
        let device = Default::default();
        let loaded: DisAe<Flex> = config
            .load(model.to_safetensors().unwrap(), &device)
            .unwrap();
        let batch = PaddedIds::new(&[vec![1, 5, 6, 2]], 0, &device);
        let (a, b) = (model.encode(&batch), loaded.encode(&batch));
        assert_eq!(max_abs_diff(a.content, b.content), 0.0);
        let latent = model.latent(Sentiment::Label(1), a.sentiment);
        let inputs = batch.ids.clone();
        assert_eq!(
            max_abs_diff(
                model.decode(latent.clone(), None, inputs.clone()),
                loaded.decode(latent, None, inputs)
            ),
            0.0
        );
        // Another size does not load.
        config.d_latent = 5;
        assert!(
            config
                .load::<Flex>(model.to_safetensors().unwrap(), &device)
                .is_err()
        );
    }

    #[test]
    fn a_variational_dis_ae_draws_around_its_mean_only_for_training() {
        let device = Default::default();
        let config = DisAeConfig {
            variational: true,
            ..tiny_config()
        };
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains("\"variational\":true"));
        assert!(
            !serde_json::to_string(&tiny_config())
                .unwrap()
                .contains("variational")
        );
        let model: DisAe<Flex> = config.init(&device);
        let batch = PaddedIds::new(&[vec![1, 5, 6, 2], vec![1, 7, 2]], 0, &device);
        // Encoding reads the mean: the same twice, and the same after saving and loading.
        let (once, twice) = (model.encode(&batch), model.encode(&batch));
        assert_eq!(max_abs_diff(once.content.clone(), twice.content), 0.0);
        let loaded: DisAe<Flex> = config
            .load(model.to_safetensors().unwrap(), &device)
            .unwrap();
        let reloaded = loaded.encode(&batch);
        let [_, content_log_variance] = once.log_variances.clone().expect("log-variances");
        let [_, reloaded_log_variance] = reloaded.log_variances.expect("log-variances");
        assert_eq!(
            max_abs_diff(content_log_variance, reloaded_log_variance),
            0.0
        );
        // Training draws around it and pays a KL term.
        let (drawn, kl) = model.encode(&batch).sampled();
        assert!(max_abs_diff(drawn.content, once.content.clone()) > 1e-3);
        assert!(max_abs_diff(drawn.sentiment, once.sentiment) > 1e-3);
        assert!(kl.expect("a KL term").into_scalar() >= 0.0);
        // A deterministic Dis-AE trains on its encoding itself.
        let plain = tiny();
        let (kept, none) = plain.encode(&batch).sampled();
        assert!(none.is_none() && kept.log_variances.is_none());
        assert_eq!(
            max_abs_diff(kept.content, plain.encode(&batch).content),
            0.0
        );
    }

    fn copying_config() -> DisAeConfig {
        DisAeConfig {
            copy: Some(ContentCopy {
                masked_words: Vec::new(),
            }),
            ..tiny_config()
        }
    }

    #[test]
    fn stepwise_decoding_equals_teacher_forcing() {
        let device = Default::default();
        for config in [tiny_config(), copying_config()] {
            let model: DisAe<Flex> = config.init(&device);
            let encoded = model.encode(&PaddedIds::with_content(
                &[vec![1, 5, 6, 7, 2]],
                &[vec![1, 5, 3, 7, 2]],
                0,
                &device,
            ));
            assert_eq!(encoded.memory.is_some(), config.copy.is_some());
            let latent = model.latent(Sentiment::Label(1), encoded.content);
            let memory = encoded.memory.as_ref();
            let inputs = PaddedIds::<Flex>::new(&[vec![1, 7, 8, 9]], 0, &device).ids;
            let full = model.decode(latent.clone(), memory, inputs.clone());
            let mut state = model.initial_state(&latent);
            let latent_gates = model.latent_gates(latent.clone());
            for t in 0..4 {
                let (logits, next) = model.decode_from(
                    latent_gates.clone(),
                    memory,
                    inputs.clone().slice([0..1, t..t + 1]),
                    state,
                );
                state = next;
                let expected = full.clone().slice([0..1, t..t + 1, 0..20]);
                assert!(max_abs_diff(logits, expected) < 1e-5, "step {t}");
            }
        }
    }

    #[test]
    fn a_copying_dis_ae_reads_its_content_from_the_masked_text_only() {
        let device = Default::default();
        let model: DisAe<Flex> = copying_config().init(&device);
        // Two texts that differ only in a masked word (of one piece in the first, two in the
        // second: one mask each) have the same content and memory, and their sentiments differ.
        let batch = PaddedIds::with_content(
            &[vec![1, 5, 6, 7, 2], vec![1, 5, 9, 10, 7, 2]],
            &[vec![1, 5, 3, 7, 2], vec![1, 5, 3, 7, 2]],
            0,
            &device,
        );
        let encoded = model.encode(&batch);
        let row = |x: &Tensor<Flex, 2>, i: usize| x.clone().slice([i..i + 1, 0..4]);
        assert_eq!(
            max_abs_diff(row(&encoded.content, 0), row(&encoded.content, 1)),
            0.0
        );
        let memory = encoded.memory.unwrap();
        assert_eq!(
            memory.mask.sum_dim(1).into_data().to_vec::<f32>().unwrap(),
            [5.0, 5.0]
        );
        let states = memory.states;
        let d = states.dims()[2];
        assert_eq!(
            max_abs_diff(
                states.clone().slice([0..1, 0..5, 0..d]),
                states.slice([1..2, 0..5, 0..d])
            ),
            0.0
        );
        assert!(max_abs_diff(row(&encoded.sentiment, 0), row(&encoded.sentiment, 1)) > 0.0);
    }

    #[test]
    fn trained_on_unpaired_texts_a_copying_dis_ae_writes_the_target_label_s_words() {
        use super::loss::{LabelledBatch, LossWeights};

        let device = Default::default();
        // 0 pad, 1 BOS, 2 EOS, 3 mask; opinion words 4, 5 (positive), 6, 7 (negative); the
        // rest content. Each content is seen with one word of each sentiment, never as a pair.
        let contents: [&[u32]; 6] = [
            &[8, 9, 10],
            &[11, 12, 10, 13],
            &[14, 9, 15],
            &[16, 17, 10],
            &[18, 19, 15, 20],
            &[21, 9, 10, 22],
        ];
        let opinion = |class: usize, i: usize| [[6, 7], [4, 5]][class][i % 2];
        let text =
            |content: &[u32], word: u32| -> Vec<u32> { [&[1], content, &[word, 2]].concat() };
        let masked = |content: &[u32]| text(content, 3);
        let mut rows = Vec::new();
        let mut classes = Vec::new();
        for (i, content) in contents.iter().enumerate() {
            for class in [0, 1] {
                rows.push(text(content, opinion(class, i + class)));
                classes.push(class as i64);
            }
        }
        let masks: Vec<Vec<u32>> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|&t| if (4..8).contains(&t) { 3 } else { t })
                    .collect()
            })
            .collect();
        let n = rows.len();
        let batch = LabelledBatch::<A> {
            tokens: PaddedIds::with_content(&rows, &masks, 0, &device),
            classes: Tensor::from_data(TensorData::new(classes, [n]), &device),
        };
        // Deterministic, and with BiMeanVAE's posterior (its mean decoded).
        for variational in [false, true] {
            let config = DisAeConfig {
                variational,
                ..small_config(23, true)
            };
            let weights = LossWeights {
                alpha: 5.0,
                beta: 0.0,
                gamma: 0.0,
                kl: 1.0,
            };
            let model = train_small(&config, |model| model.text_losses(&batch).total(weights));
            let settings = beam_search(vec![0, 3]);
            for class in [0, 1] {
                let sources: Vec<Vec<u32>> = contents
                    .iter()
                    .enumerate()
                    .map(|(i, c)| text(c, opinion(1 - class, i)))
                    .collect();
                let source_masks: Vec<Vec<u32>> = contents.iter().map(|c| masked(c)).collect();
                let encoded = model.encode(&PaddedIds::with_content(
                    &sources,
                    &source_masks,
                    0,
                    &device,
                ));
                let latent = model.latent(Sentiment::Label(class), encoded.content);
                let decoded =
                    model.generate(latent, encoded.memory, config.special_tokens(), &settings);
                for (content, mut decoded) in contents.iter().zip(decoded) {
                    let tokens = decoded.swap_remove(0).tokens;
                    // The content copied, and a word of the target sentiment where the masked
                    // one was.
                    assert_eq!(
                        &tokens[..content.len()],
                        *content,
                        "class {class}, variational {variational}"
                    );
                    assert_eq!(tokens.len(), content.len() + 1, "{tokens:?}");
                    let word = tokens[content.len()];
                    assert!(
                        [[6, 7], [4, 5]][class].contains(&word),
                        "class {class}, variational {variational}: {tokens:?}"
                    );
                }
            }
        }
    }
}
