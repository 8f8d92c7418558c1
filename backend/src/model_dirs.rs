//! Model directories on disk: Hugging Face BERT checkpoints and Flipside classifiers.
//!
//! A classifier directory is a Hugging Face checkpoint that `transformers` loads with
//! `AutoModelForSequenceClassification`: `config.json` (see [`ClassifierConfig::to_json`]),
//! `model.safetensors` (PyTorch layout, HF key names) and `tokenizer.json`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::tensor::backend::Backend;
use flipside_shared::models::CheckpointFiles;
use flipside_shared::models::bert::{BertConfig, BertModel};
use flipside_shared::models::classifier::{
    Architecture, ClassifierConfig, SequenceClassifier, TextClassifier, encoder_family,
    save_classifier_weights,
};
use flipside_shared::models::compact::compact;
use flipside_shared::models::encoder::SentenceEncoder;
use flipside_shared::ops::int8::Kernel;
use flipside_shared::tokenize::TextTokenizer;

use crate::home::Home;

/// The file a model directory keeps its weights in.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// The default encoder: the `minilm` asset.
pub const DEFAULT_ENCODER: &str = "minilm";

/// A model given as a directory path, the name of a model trained into the Flipside home's
/// `models/`, or the name of a fetched asset.
pub fn resolve_model_dir(home: &Home, model: &str) -> Result<PathBuf> {
    let path = Path::new(model);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let trained = home.models().join(model);
    if !model.contains('/') && trained.is_dir() {
        return Ok(trained);
    }
    if home.manifest().get(model).is_ok() {
        return home.asset(model);
    }
    anyhow::bail!(
        "{model:?} is neither a model directory, nor a model in {}, nor a model asset (e.g. \
         {DEFAULT_ENCODER})",
        home.models().display()
    )
}

/// The files of a Hugging Face BERT checkpoint directory.
pub struct BertFiles {
    pub dir: PathBuf,
    /// The family `config.json` names (BERT, RoBERTa or DistilBERT); `config` in BERT's terms.
    pub architecture: Architecture,
    pub config: BertConfig,
    pub tokenizer_json: Vec<u8>,
    /// sentence-transformers' `max_seq_length` if given, else the position limit.
    pub max_len: usize,
}

impl BertFiles {
    /// Reads `config.json`, `tokenizer.json` and the optional `sentence_bert_config.json`.
    pub fn read(dir: &Path) -> Result<Self> {
        let (architecture, config) =
            encoder_family(read_text(&dir.join("config.json"))?.as_bytes())
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("in {}", dir.display()))?;
        let max_len = sentence_max_len(dir)?.unwrap_or(config.max_position_embeddings);
        Ok(Self {
            dir: dir.to_path_buf(),
            tokenizer_json: read_bytes(&dir.join("tokenizer.json"))?,
            architecture,
            config,
            max_len,
        })
    }

    /// The tokenizer, truncating at `max_len` tokens.
    pub fn tokenizer(&self, max_len: usize) -> Result<TextTokenizer> {
        TextTokenizer::from_json(&self.tokenizer_json, max_len)
            .with_context(|| format!("in {}", self.dir.display()))
    }

    /// The BERT weights (a `bert.` key prefix is accepted too).
    pub fn load_model<B: Backend>(&self, device: &B::Device) -> Result<BertModel<B>> {
        self.config
            .load(self.weights()?, device)
            .with_context(|| format!("loading {}", self.dir.display()))
    }

    /// The bytes of `model.safetensors`.
    pub fn weights(&self) -> Result<Vec<u8>> {
        read_bytes(&self.dir.join(WEIGHTS_FILE))
    }
}

/// sentence-transformers' `max_seq_length`, from the optional `sentence_bert_config.json`.
fn sentence_max_len(dir: &Path) -> Result<Option<usize>> {
    Ok(
        match fs::read_to_string(dir.join("sentence_bert_config.json")) {
            Ok(text) => serde_json::from_str::<serde_json::Value>(&text)?["max_seq_length"]
                .as_u64()
                .map(|n| n as usize),
            Err(_) => None,
        },
    )
}

/// The `config.json`, `tokenizer.json` and `model.safetensors` of a model directory.
pub fn read_checkpoint(dir: &Path) -> Result<CheckpointFiles> {
    Ok(CheckpointFiles {
        config: read_bytes(&dir.join("config.json"))?,
        tokenizer: read_bytes(&dir.join("tokenizer.json"))?,
        weights: read_bytes(&dir.join(WEIGHTS_FILE))?,
    })
}

/// Loads a sentence encoder from an HF BERT directory.
pub fn load_encoder<B: Backend>(dir: &Path, device: &B::Device) -> Result<SentenceEncoder<B>> {
    SentenceEncoder::from_files(read_checkpoint(dir)?, sentence_max_len(dir)?, device)
        .with_context(|| format!("loading {}", dir.display()))
}

/// `model` (an encoder, or a classifier's) multiplying in int8 with `kernel` where it runs here,
/// by default where this CPU has a kernel worth it ([`Kernel::best`]: AMX, AVX-512 VNNI, or AVX2
/// without AVX-512), and the backend is the CPU's; elsewhere unchanged, with a warning.
pub fn int8_where_possible<B: Backend>(
    model: BertModel<B>,
    kernel: Option<Kernel>,
) -> BertModel<B> {
    let model = match kernel.or_else(Kernel::best) {
        Some(kernel) => model.with_int8_copies(kernel),
        None => model,
    };
    if let Some(kernel) = model.int8_kernel() {
        tracing::info!("multiplying in int8 with the {} kernel", kernel.name());
    } else {
        tracing::warn!(
            "int8 needs the CPU backend on a CPU with AMX, AVX-512 VNNI, or AVX2 without \
             AVX-512: computing in f32"
        );
    }
    model
}

/// Writes a classifier directory (creating it), replacing any previous files atomically.
pub fn save_classifier<B: Backend>(
    dir: &Path,
    model: &SequenceClassifier<B>,
    config: &ClassifierConfig,
    tokenizer_json: &[u8],
) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomic(&dir.join("tokenizer.json"), tokenizer_json)?;
    write_atomic(&dir.join(WEIGHTS_FILE), &save_classifier_weights(model)?)?;
    write_atomic(
        &dir.join("config.json"),
        &serde_json::to_vec_pretty(&config.to_json())?,
    )?;
    Ok(())
}

/// Loads a classifier directory written by [`save_classifier`], for inference.
pub fn load_classifier<B: Backend>(dir: &Path, device: &B::Device) -> Result<TextClassifier<B>> {
    TextClassifier::from_files(read_checkpoint(dir)?, device)
        .with_context(|| format!("loading the classifier in {}", dir.display()))
}

/// What [`compact_model_dir`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct CompactedDir {
    /// Bytes of `model.safetensors` before and after.
    pub weights_bytes: (u64, u64),
    /// Other files copied unchanged.
    pub copied: usize,
}

/// Copies the model directory `from` (a classifier, an encoder, a Dis-AE, a T5) into `to`
/// with its `model.safetensors` in the compact int8 form the browser downloads, with `bits`
/// significant bits per weight ([`compact`]): a quarter of the bytes, and it loads wherever the
/// original does. The other files at the top of `from` are copied as they are;
/// subdirectories (training checkpoints) are left out.
pub fn compact_model_dir(from: &Path, to: &Path, bits: u32) -> Result<CompactedDir> {
    let weights = from.join(WEIGHTS_FILE);
    anyhow::ensure!(
        weights.is_file(),
        "{} has no {WEIGHTS_FILE}: not a model directory",
        from.display()
    );
    anyhow::ensure!(
        fs::canonicalize(from)? != fs::canonicalize(to).unwrap_or_default(),
        "the compact copy must go to another directory than {}",
        from.display()
    );
    fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let mut copied = 0;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if !entry.file_type()?.is_file() || name == WEIGHTS_FILE {
            continue;
        }
        fs::copy(entry.path(), to.join(&name))
            .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        copied += 1;
    }
    let full = read_bytes(&weights)?;
    let small =
        compact(&full, bits).with_context(|| format!("compacting {}", weights.display()))?;
    write_atomic(&to.join(WEIGHTS_FILE), &small)?;
    Ok(CompactedDir {
        weights_bytes: (full.len() as u64, small.len() as u64),
        copied,
    })
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The sha256 of a file's bytes, in hex.
pub fn file_sha256(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut file =
        fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash)?;
    Ok(hex::encode(hash.finalize()))
}

fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}
