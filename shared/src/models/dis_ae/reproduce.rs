//! LASS's data reproduction (§3.2.2): the content of each parent text, recombined with a target
//! sentiment (a label's vector, or the sentiment of another text) and decoded. The backend's
//! `lass` method and the browser page both call [`Reproducer::reproduce`].

use std::collections::HashSet;

use burn::tensor::backend::Backend;

use super::vocabulary::{Vocabulary, has_word_in};
use super::{DisAe, DisAeConfig, MASK_ID, PaddedIds, Sentiment};
use crate::models::checkpoint::CheckpointError;
use crate::models::search::{DecodeSettings, Decoded, Search};
use crate::surface::copy_surface;
use crate::tokenize::TokenizeError;

/// Most ids of an encoded parent text (LASS decodes at most 70 tokens; parents are cut to the
/// same length).
pub const MAX_TOKENS: usize = 70;

/// Why a Dis-AE could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum DisAeError {
    #[error("bad config.json: {0}")]
    Config(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
    #[error("the vocabulary has {vocabulary} ids but the model {model}")]
    VocabularyMismatch { vocabulary: usize, model: usize },
    #[error("the Dis-AE knows the labels {known:?}, not {label:?}")]
    UnknownLabel { label: String, known: Vec<String> },
    #[error("{parents} sentiment parents for {contents} content parents")]
    ParentCount { parents: usize, contents: usize },
}

/// Where each output's sentiment comes from.
#[derive(Debug, Clone, Copy)]
pub enum TargetSentiment<'a> {
    /// A label's learnt vector (`Z_r`), for every output.
    Label(&'a str),
    /// The sentiment of one parent text per output.
    Parents(&'a [&'a str]),
}

/// One reproduced text.
#[derive(Debug, Clone, PartialEq)]
pub struct Reproduction {
    /// The decoded text, in the content parent's surface form where it copies it.
    pub text: String,
    /// Generated ids, without `<s>` and `</s>`.
    pub tokens: usize,
    /// The decoder's summed log-probability of its output.
    pub log_prob: f64,
    /// Whether decoding ended with `</s>` (otherwise it reached the length limit).
    pub finished: bool,
}

/// LASS's decoding: beam search with 4 beams, no length penalty, at most [`MAX_TOKENS`]
/// tokens; padding and `<unk>` are never generated.
pub fn lass_decoding() -> DecodeSettings {
    DecodeSettings {
        search: Search::Beam {
            beams: 4,
            length_penalty: 0.0,
        },
        max_tokens: MAX_TOKENS,
        banned: vec![0, 3],
        logit_bias: Vec::new(),
        sentinels: None,
    }
}

/// A trained Dis-AE and its vocabulary: the files `flipside lass train` writes
/// (`config.json`, `model.safetensors`, `tokenizer.json`).
pub struct Reproducer<B: Backend> {
    pub model: DisAe<B>,
    pub config: DisAeConfig,
    pub vocabulary: Vocabulary,
    /// The words a copying Dis-AE's content memory masks.
    masked_words: HashSet<String>,
    device: B::Device,
}

impl<B: Backend> Reproducer<B> {
    /// Loads the three files' contents onto `device`.
    pub fn from_files(
        config_json: &[u8],
        weights: Vec<u8>,
        tokenizer_json: &[u8],
        device: &B::Device,
    ) -> Result<Self, DisAeError> {
        let config: DisAeConfig =
            serde_json::from_slice(config_json).map_err(|e| DisAeError::Config(e.to_string()))?;
        let vocabulary = Vocabulary::from_json(tokenizer_json, MAX_TOKENS)?;
        if vocabulary.size() != config.vocab_size {
            return Err(DisAeError::VocabularyMismatch {
                vocabulary: vocabulary.size(),
                model: config.vocab_size,
            });
        }
        Ok(Self {
            model: config.load(weights, device)?,
            masked_words: config.masked_words(),
            config,
            vocabulary,
            device: device.clone(),
        })
    }

    /// The class index of `label`.
    pub fn class_of(&self, label: &str) -> Result<usize, DisAeError> {
        self.config
            .labels
            .iter()
            .position(|known| known == label)
            .ok_or_else(|| DisAeError::UnknownLabel {
                label: label.to_string(),
                known: self.config.labels.clone(),
            })
    }

    /// `texts` as a batch (with their masked copies for a copying Dis-AE).
    fn encode(&self, texts: &[&str]) -> Result<PaddedIds<B>, DisAeError> {
        let pad = self.config.pad_id;
        if self.config.copy.is_none() {
            let rows = texts
                .iter()
                .map(|text| self.vocabulary.encode(text))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(PaddedIds::new(&rows, pad, &self.device));
        }
        let (rows, content): (Vec<_>, Vec<_>) = texts
            .iter()
            .map(|text| {
                self.vocabulary
                    .encode_masking(text, &self.masked_words, MASK_ID)
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        Ok(PaddedIds::with_content(&rows, &content, pad, &self.device))
    }

    /// Whether the Dis-AE has something of `text` to rewrite: always for the paper's decoder;
    /// for a copying one, a masked (opinion) word — without one, it copies `text` unchanged.
    pub fn can_rewrite(&self, text: &str) -> bool {
        self.config.copy.is_none() || has_word_in(text, &self.masked_words)
    }

    /// One output per text of `contents`: its content vector with `sentiment`, decoded with
    /// `settings` ([`lass_decoding`] is the paper's), in its content text's casing and
    /// punctuation where it copies it ([`copy_surface`]).
    pub fn reproduce(
        &self,
        contents: &[&str],
        sentiment: TargetSentiment,
        settings: &DecodeSettings,
    ) -> Result<Vec<Reproduction>, DisAeError> {
        self.decode(contents, sentiment, settings)?
            .into_iter()
            .zip(contents)
            .map(|(mut outputs, content)| self.reproduction(content, outputs.swap_remove(0)))
            .collect()
    }

    /// As [`Self::reproduce`], with every output the search ends with for each text, the best
    /// first (a beam search's finished hypotheses; never empty).
    pub fn reproduce_all(
        &self,
        contents: &[&str],
        sentiment: TargetSentiment,
        settings: &DecodeSettings,
    ) -> Result<Vec<Vec<Reproduction>>, DisAeError> {
        self.decode(contents, sentiment, settings)?
            .into_iter()
            .zip(contents)
            .map(|(outputs, content)| {
                outputs
                    .into_iter()
                    .map(|decoded| self.reproduction(content, decoded))
                    .collect()
            })
            .collect()
    }

    /// Every output the search ends with for each text of `contents`, as ids.
    fn decode(
        &self,
        contents: &[&str],
        sentiment: TargetSentiment,
        settings: &DecodeSettings,
    ) -> Result<Vec<Vec<Decoded>>, DisAeError> {
        if contents.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = self.model.encode(&self.encode(contents)?);
        let sentiment = match sentiment {
            TargetSentiment::Label(label) => Sentiment::Label(self.class_of(label)?),
            TargetSentiment::Parents(parents) => {
                if parents.len() != contents.len() {
                    return Err(DisAeError::ParentCount {
                        parents: parents.len(),
                        contents: contents.len(),
                    });
                }
                Sentiment::Encoded(self.model.encode(&self.encode(parents)?).sentiment)
            }
        };
        let latent = self.model.latent(sentiment, encoded.content);
        Ok(self.model.generate(
            latent,
            encoded.memory,
            self.config.special_tokens(),
            settings,
        ))
    }

    /// `decoded` as text in `content`'s surface form.
    fn reproduction(&self, content: &str, decoded: Decoded) -> Result<Reproduction, DisAeError> {
        let text = self.vocabulary.decode(&decoded.tokens)?;
        Ok(Reproduction {
            text: copy_surface(content, &text),
            tokens: decoded.tokens.len(),
            log_prob: decoded.log_prob,
            finished: decoded.finished,
        })
    }
}
