//! The T5 infiller AutoCAD edits with: Hugging Face T5 directories (any HF T5
//! `model.safetensors` loads; the directories Flipside writes load in `transformers`), scoring a
//! target given an input, sampling fills ([`Infill`]), and the sequence-to-sequence objective
//! that span-corruption pretraining ([`pretrain`]) and label-controlled infilling ([`train`],
//! on [`rationales`]) share.

pub mod pretrain;
pub mod rationales;
pub mod shipped;
pub mod train;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::module::AutodiffModule;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use flipside_shared::infill::{MAX_FILL_TOKENS, T5Tokenizer, parse_fills, unlikelihood_mask};
use flipside_shared::models::checkpoint::save_safetensors;
use flipside_shared::models::contrast::LabelContrast;
use flipside_shared::models::t5::decode::{DecodeSettings, Search, generate, generate_contrasted};
use flipside_shared::models::t5::loss::{cross_entropy, unlikelihood};
use flipside_shared::models::t5::{T5Config, T5Model};

use crate::home::Home;
use crate::model_dirs::write_atomic;
use crate::training::classifier::Objective;

/// The asset whose `tokenizer.json` is T5's vocabulary (used when a checkpoint has none).
pub const T5_TOKENIZER_ASSET: &str = "t5-tokenizer";

/// A loaded infiller: model, its config and its tokenizer.
pub struct Infiller<B: Backend> {
    pub model: T5Model<B>,
    pub config: T5Config,
    pub tokenizer: T5Tokenizer,
    /// The `tokenizer.json` bytes (saved with the model).
    pub tokenizer_json: Vec<u8>,
}

/// The tokenizer of a T5 directory: its own `tokenizer.json`, else the `t5-tokenizer` asset (every
/// T5 and flan-t5 checkpoint uses that vocabulary).
pub fn read_tokenizer(home: &Home, dir: &Path) -> Result<Vec<u8>> {
    let own = dir.join("tokenizer.json");
    let path = if own.is_file() {
        own
    } else {
        home.asset(T5_TOKENIZER_ASSET)?.join("tokenizer.json")
    };
    fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// Loads a Hugging Face T5 directory (`config.json`, `model.safetensors`, optional
/// `tokenizer.json`), with dropout off, for inference.
pub fn load_infiller<B: Backend>(
    home: &Home,
    dir: &Path,
    device: &B::Device,
) -> Result<Infiller<B>> {
    Infiller::from_dir(dir, read_tokenizer(home, dir)?, device)
}

impl<B: Backend> Infiller<B> {
    /// The T5 in `dir` with `tokenizer_json` ([`read_tokenizer`]), dropout off.
    pub fn from_dir(dir: &Path, tokenizer_json: Vec<u8>, device: &B::Device) -> Result<Self> {
        let (model, config) = load_t5::<B>(dir, device)?;
        let tokenizer = T5Tokenizer::from_json(&tokenizer_json)?;
        if tokenizer.vocab_size() > config.vocab_size {
            bail!(
                "{}: the tokenizer has {} tokens, the model only {}",
                dir.display(),
                tokenizer.vocab_size(),
                config.vocab_size
            );
        }
        Ok(Infiller {
            model: model.without_dropout(),
            config,
            tokenizer,
            tokenizer_json,
        })
    }
}

/// Loads the model of a T5 directory, as it was saved (dropout as configured).
pub fn load_t5<B: Backend>(dir: &Path, device: &B::Device) -> Result<(T5Model<B>, T5Config)> {
    let config_path = dir.join("config.json");
    let json = fs::read_to_string(&config_path)
        .with_context(|| format!("{} is not a T5 directory: no config.json", dir.display()))?;
    let config = T5Config::from_json(&json).map_err(anyhow::Error::msg)?;
    let weights_path = dir.join("model.safetensors");
    let weights = fs::read(&weights_path)
        .with_context(|| format!("cannot read {}", weights_path.display()))?;
    let model = config
        .load::<B>(weights, device)
        .with_context(|| format!("loading {}", weights_path.display()))?;
    Ok((model, config))
}

/// Writes a T5 directory that `transformers` loads as `T5ForConditionalGeneration`.
pub fn save_t5<B: Backend>(
    dir: &Path,
    model: &T5Model<B>,
    config: &T5Config,
    tokenizer_json: &[u8],
) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomic(&dir.join("model.safetensors"), &save_safetensors(model)?)?;
    write_atomic(&dir.join("config.json"), config.to_json().as_bytes())?;
    write_atomic(&dir.join("tokenizer.json"), tokenizer_json)?;
    Ok(())
}

/// A default directory under the home's models for `name`.
pub fn default_dir(home: &Home, name: &str) -> PathBuf {
    home.models().join(name)
}

impl<B: Backend> Infiller<B> {
    /// The mean per-token log-likelihood of `target` (its tokens and `</s>`) given `input`,
    /// teacher-forced, and the number of target tokens.
    pub fn score(&self, input: &str, target: &str) -> Result<(f64, usize)> {
        let device = self.model.shared.weight.device();
        let input = self.tokenizer.encode(input)?;
        let target = self.tokenizer.encode(target)?;
        let batch = Seq2SeqBatch::new(&[(&input, &target)], &[], self.model.pad_token_id, &device);
        let logits =
            self.model
                .forward(batch.input_ids, batch.attention_mask, batch.labels.clone());
        let nll = cross_entropy(logits, batch.labels, batch.target_mask)
            .into_scalar()
            .elem::<f64>();
        Ok((-nll, target.len()))
    }
}

/// AutoCAD's sampling (nucleus p 0.9, temperature 0.7).
pub const FILL_TOP_P: f64 = 0.9;
pub const FILL_TEMPERATURE: f64 = 0.7;

/// What the infiller wrote for a masked input.
#[derive(Debug, Clone)]
pub struct Fill {
    /// The generated text with its sentinels.
    pub reply: String,
    /// Each span's fill, or why the reply cannot be used (cut off before its last span: decoding
    /// keeps the sentinels in order and ends only after the last fill).
    pub fills: std::result::Result<Vec<String>, String>,
}

/// What to fill: a masked input and how to sample it.
#[derive(Debug, Clone, Copy)]
pub struct FillRequest<'a> {
    /// The masked input, with the label the fills are for.
    pub input: &'a str,
    /// The same masked text with the item's own label: the fills are steered away from what
    /// it makes likely ([`LabelContrast`]); `None`, or a contrast weight of 0, samples from `input`
    /// alone.
    pub contrast: Option<&'a str>,
    /// How many sentinels `input` has.
    pub spans: usize,
    /// Words never written.
    pub banned: &'a [String],
    /// Lower-case words never written as one piece (any case): the opinion words of the
    /// item's own polarity, when AutoCAD's rationales mask them (its default).
    pub avoided: Option<&'a HashSet<String>>,
    /// Lower-case words favoured when written as one piece (any case), and by how much (a
    /// logit bias): the opinion words of the target's polarity.
    pub favoured: Option<(&'a HashSet<String>, f32)>,
    pub seed: u64,
}

/// The default logit bias of the target polarity's opinion words in AutoCAD's fills (see the
/// results: it makes most fills carry the target's sentiment, at some cost in fluency).
pub const FILL_OPINION_BIAS: f32 = 1.0;

/// The default label contrast: off (weight 0), as AutoCAD samples. At weight W
/// each token is scored by (1 + W)·log p(target) − W·log p(the item's label), among the tokens
/// at least a tenth as likely as the target's best; with the shipped infiller, W = 1 halved the
/// median perplexity of `bench cf`'s accepted edits but accepted fewer (see the results).
pub const FILL_CONTRAST: LabelContrast = LabelContrast {
    weight: 0.0,
    plausibility: 0.1,
};

/// Fills masked inputs: the infiller, behind a lock, for the pipeline's editor.
pub trait Infill: Send + Sync {
    /// The model's name for records.
    fn name(&self) -> &str;
    /// Samples the fills of `request`'s sentinels.
    fn fill(&self, request: FillRequest) -> Result<Fill>;
    /// Whether it was trained with retrieved keywords in its inputs (`infiller train
    /// --retrieval`).
    fn guided(&self) -> bool;
    /// The label words it was trained to fill for (`None` for a T5 not trained here).
    fn labels(&self) -> Option<&[String]>;
    /// How a request's contrast steers its fills.
    fn label_contrast(&self) -> LabelContrast;
}

/// An [`Infiller`] shared by the pipeline's workers.
pub struct SharedInfiller<B: Backend> {
    pub name: String,
    pub infiller: std::sync::Mutex<Infiller<B>>,
    pub guided: bool,
    pub labels: Option<Vec<String>>,
    /// How the contrast of a [`FillRequest`] steers its fills.
    pub label_contrast: LabelContrast,
}

impl<B: Backend> Infill for SharedInfiller<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn guided(&self) -> bool {
        self.guided
    }

    fn labels(&self) -> Option<&[String]> {
        self.labels.as_deref()
    }

    fn label_contrast(&self) -> LabelContrast {
        self.label_contrast
    }

    fn fill(&self, request: FillRequest) -> Result<Fill> {
        let infiller = self.infiller.lock().expect("infiller lock");
        infiller.fill(request, self.label_contrast)
    }
}

impl<B: Backend> Infiller<B> {
    /// [`Infill::fill`]: nucleus sampling with AutoCAD's settings, steered from the request's
    /// contrast by `label_contrast`, constrained to the span format (every sentinel in order, each
    /// with a worded fill of a few tokens), padding and the first piece of each banned word
    /// never generated.
    pub fn fill(&self, request: FillRequest, label_contrast: LabelContrast) -> Result<Fill> {
        let device = self.model.shared.weight.device();
        let contrast = request.contrast.filter(|_| label_contrast.weight != 0.0);
        let mut inputs = vec![self.tokenizer.encode(request.input)?];
        if let Some(contrast) = contrast {
            inputs.push(self.tokenizer.encode(contrast)?);
        }
        let (input_ids, mask) = padded_inputs::<B>(&inputs, self.tokenizer.pad, &device);
        let encoded = self.model.encode(input_ids, mask);
        // No fill token: padding (a span "filled" with it would come back empty), `<unk>`, and
        // the model's rows beyond the vocabulary (they decode to nothing).
        let mut banned_ids = vec![self.tokenizer.pad];
        banned_ids.extend(self.tokenizer.piece_id("<unk>"));
        banned_ids.extend(self.tokenizer.vocab_size() as u32..self.config.vocab_size as u32);
        for word in request.banned {
            // The word's first real piece (not a bare word-start marker `▁`).
            let pieces = self.tokenizer.encode_plain(word)?;
            let first = pieces
                .iter()
                .find(|&&id| self.tokenizer.piece(id).is_some_and(|p| p != "\u{2581}"));
            banned_ids.extend(first);
        }
        if let Some(words) = request.avoided {
            banned_ids.extend(self.tokenizer.whole_word_ids(words));
        }
        let logit_bias = match request.favoured {
            Some((words, bias)) if bias != 0.0 => self
                .tokenizer
                .whole_word_ids(words)
                .into_iter()
                .map(|id| (id, bias))
                .collect(),
            _ => Vec::new(),
        };
        let spans = request.spans;
        let settings = DecodeSettings {
            search: Search::Nucleus {
                top_p: FILL_TOP_P,
                temperature: FILL_TEMPERATURE,
                seed: request.seed,
            },
            // Room for every fill at its longest, its sentinel, and the end: the limit never
            // cuts a reply short.
            max_tokens: spans * (MAX_FILL_TOKENS + 1) + 1,
            banned: banned_ids,
            logit_bias,
            sentinels: Some(self.tokenizer.sentinel_order(spans)),
        };
        let decoded = match contrast {
            Some(_) => generate_contrasted(&self.model, &encoded, label_contrast, &settings),
            None => generate(&self.model, &encoded, &settings),
        }
        .remove(0);
        Ok(Fill {
            reply: self.tokenizer.decode_with_sentinels(&decoded.tokens)?,
            fills: parse_fills(&decoded.tokens, spans, &self.tokenizer).map_err(|e| {
                if decoded.finished {
                    e.to_string()
                } else {
                    format!("{e} (cut off at {} tokens)", settings.max_tokens)
                }
            }),
        })
    }
}

/// Token ids of `inputs` padded to the longest, and their attention mask.
fn padded_inputs<B: Backend>(
    inputs: &[Vec<u32>],
    pad: u32,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Tensor<B, 2>) {
    let (rows, width) = (inputs.len(), inputs.iter().map(Vec::len).max().unwrap_or(1));
    let mut ids = vec![i64::from(pad); rows * width];
    let mut mask = vec![0f32; rows * width];
    for (r, input) in inputs.iter().enumerate() {
        for (j, &id) in input.iter().enumerate() {
            ids[r * width + j] = i64::from(id);
            mask[r * width + j] = 1.0;
        }
    }
    (
        Tensor::from_data(TensorData::new(ids, [rows, width]), device),
        Tensor::from_data(TensorData::new(mask, [rows, width]), device),
    )
}

/// One training pair: encoder input and target ids (both closed by `</s>`), and the inputs
/// whose target must become unlikely (AutoCAD: the same masked text with another label).
#[derive(Debug, Clone, PartialEq)]
pub struct Seq2SeqExample {
    pub input: Vec<u32>,
    pub target: Vec<u32>,
    pub negatives: Vec<Vec<u32>>,
}

/// A padded batch: rows of (input, target) pairs.
struct Seq2SeqBatch<B: Backend> {
    input_ids: Tensor<B, 2, Int>,
    attention_mask: Tensor<B, 2>,
    labels: Tensor<B, 2, Int>,
    /// 1 for real target tokens.
    target_mask: Tensor<B, 2>,
    /// 1 for target tokens the unlikelihood term penalises (negative rows only).
    unlikely_mask: Tensor<B, 2>,
}

impl<B: Backend> Seq2SeqBatch<B> {
    /// `positives` are learned (cross-entropy); `negatives` (input, target, unlikelihood mask)
    /// are made unlikely. Both padded to the longest input and target.
    fn new(
        positives: &[(&[u32], &[u32])],
        negatives: &[(&[u32], &[u32], Vec<bool>)],
        pad: u32,
        device: &B::Device,
    ) -> Self {
        let rows: Vec<(&[u32], &[u32])> = positives
            .iter()
            .copied()
            .chain(negatives.iter().map(|(i, t, _)| (*i, *t)))
            .collect();
        let source = rows.iter().map(|(i, _)| i.len()).max().unwrap_or(1);
        let steps = rows.iter().map(|(_, t)| t.len()).max().unwrap_or(1);
        let n = rows.len();
        let mut input_ids = vec![pad as i64; n * source];
        let mut attention = vec![0f32; n * source];
        let mut labels = vec![pad as i64; n * steps];
        let mut target_mask = vec![0f32; n * steps];
        let mut unlikely_mask = vec![0f32; n * steps];
        for (r, (input, target)) in rows.iter().enumerate() {
            for (j, &id) in input.iter().enumerate() {
                input_ids[r * source + j] = id as i64;
                attention[r * source + j] = 1.0;
            }
            for (j, &id) in target.iter().enumerate() {
                labels[r * steps + j] = id as i64;
                if r < positives.len() {
                    target_mask[r * steps + j] = 1.0;
                }
            }
        }
        for (k, (_, _, mask)) in negatives.iter().enumerate() {
            let r = positives.len() + k;
            for (j, &penalise) in mask.iter().enumerate() {
                unlikely_mask[r * steps + j] = if penalise { 1.0 } else { 0.0 };
            }
        }
        let ints =
            |v: Vec<i64>, w| Tensor::<B, 2, Int>::from_data(TensorData::new(v, [n, w]), device);
        let floats = |v: Vec<f32>, w| Tensor::<B, 2>::from_data(TensorData::new(v, [n, w]), device);
        Self {
            input_ids: ints(input_ids, source),
            attention_mask: floats(attention, source),
            labels: ints(labels, steps),
            target_mask: floats(target_mask, steps),
            unlikely_mask: floats(unlikely_mask, steps),
        }
    }
}

/// MLE on every example's target, plus `alpha` × unlikelihood of the target under each of its
/// negative inputs (penalising span words only, see [`unlikelihood_mask`]).
pub fn seq2seq_loss<B: Backend>(
    model: &T5Model<B>,
    examples: &[&Seq2SeqExample],
    alpha: f64,
    tokenizer: &T5Tokenizer,
    device: &B::Device,
) -> Tensor<B, 1> {
    let positives: Vec<(&[u32], &[u32])> = examples
        .iter()
        .map(|e| (e.input.as_slice(), e.target.as_slice()))
        .collect();
    let negatives: Vec<(&[u32], &[u32], Vec<bool>)> = if alpha > 0.0 {
        examples
            .iter()
            .flat_map(|e| {
                let mask = unlikelihood_mask(&e.target, tokenizer);
                e.negatives
                    .iter()
                    .map(move |n| (n.as_slice(), e.target.as_slice(), mask.clone()))
            })
            .collect()
    } else {
        Vec::new()
    };
    let batch = Seq2SeqBatch::<B>::new(&positives, &negatives, model.pad_token_id, device);
    let logits = model.forward(batch.input_ids, batch.attention_mask, batch.labels.clone());
    let mle = cross_entropy(logits.clone(), batch.labels.clone(), batch.target_mask);
    if negatives.is_empty() {
        return mle;
    }
    mle + unlikelihood(logits, batch.labels, batch.unlikely_mask) * alpha
}

/// Training a T5 on [`Seq2SeqExample`]s: from `start` (a T5 directory) or, without one, from
/// `config`'s random initialisation.
pub struct Seq2SeqObjective {
    pub examples: Vec<Seq2SeqExample>,
    /// Held-out examples whose loss picks the best epoch (none: the last epoch's model).
    pub validation: Vec<Seq2SeqExample>,
    /// Held-out examples whose loss is measured at every checkpoint (the learning curve).
    pub curve: Vec<Seq2SeqExample>,
    pub config: T5Config,
    pub start: Option<PathBuf>,
    pub alpha: f64,
    pub tokenizer: T5Tokenizer,
}

impl<B: AutodiffBackend> Objective<B> for Seq2SeqObjective {
    type Model = T5Model<B>;

    fn items(&self) -> usize {
        self.examples.len()
    }

    fn init(&self, device: &B::Device) -> Result<Self::Model> {
        let Some(dir) = &self.start else {
            return Ok(self.config.init::<B>(device));
        };
        let weights = fs::read(dir.join("model.safetensors"))
            .with_context(|| format!("cannot read {}/model.safetensors", dir.display()))?;
        Ok(self.config.load::<B>(weights, device)?)
    }

    fn skeleton(&self, device: &B::Device) -> Self::Model {
        self.config.init::<B>(device)
    }

    fn loss(
        &self,
        model: &Self::Model,
        batch: &[usize],
        _step: usize,
        device: &B::Device,
    ) -> Result<Tensor<B, 1>> {
        let examples: Vec<&Seq2SeqExample> = batch.iter().map(|&i| &self.examples[i]).collect();
        Ok(seq2seq_loss(
            model,
            &examples,
            self.alpha,
            &self.tokenizer,
            device,
        ))
    }

    fn validation_loss(&self, model: &Self::Model, device: &B::Device) -> Option<f64> {
        (!self.validation.is_empty()).then(|| {
            held_out_loss(
                &model.valid(),
                &self.validation,
                &self.tokenizer,
                16,
                device,
            )
        })
    }

    fn curve_loss(&self, model: &Self::Model, device: &B::Device) -> Option<f64> {
        (!self.curve.is_empty())
            .then(|| held_out_loss(&model.valid(), &self.curve, &self.tokenizer, 16, device))
    }
}

/// Mean cross-entropy per target token over `examples` (no gradients), in batches.
pub fn held_out_loss<B: Backend>(
    model: &T5Model<B>,
    examples: &[Seq2SeqExample],
    tokenizer: &T5Tokenizer,
    batch_size: usize,
    device: &B::Device,
) -> f64 {
    let mut total = 0.0;
    let mut tokens = 0usize;
    for chunk in examples.chunks(batch_size.max(1)) {
        let refs: Vec<&Seq2SeqExample> = chunk.iter().collect();
        let count: usize = chunk.iter().map(|e| e.target.len()).sum();
        let loss = seq2seq_loss(model, &refs, 0.0, tokenizer, device)
            .into_scalar()
            .elem::<f64>();
        total += loss * count as f64;
        tokens += count;
    }
    total / tokens.max(1) as f64
}
