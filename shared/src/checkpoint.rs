//! Loading and saving burn modules as Hugging Face-style safetensors.
//!
//! Tensors are stored in PyTorch layout (linear weights `[out, in]`, LayerNorm `weight`/`bias`)
//! under Hugging Face key names, so a checkpoint Flipside writes can be read by `transformers`
//! and any HF BERT checkpoint can be read by Flipside. Works on bytes, so it runs in the browser.

use burn::tensor::backend::Backend;
use burn_store::{BurnToPyTorchAdapter, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};

/// Renames from Hugging Face keys to Flipside field names (regex, replacement).
const HF_TO_FLIPSIDE: &[(&str, &str)] = &[
    (r"\.attention\.self\.", ".attention.self_attention."),
    (r"LayerNorm", "layer_norm"),
];

/// Renames from Flipside field names to Hugging Face keys (regex, replacement).
const FLIPSIDE_TO_HF: &[(&str, &str)] = &[
    (r"\.attention\.self_attention\.", ".attention.self."),
    (r"layer_norm", "LayerNorm"),
];

/// Why a checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint does not fit the model: {0}")]
    Mismatch(String),
    #[error("could not serialise the checkpoint: {0}")]
    Serialise(String),
}

/// Loads Hugging Face safetensors bytes into `module`.
///
/// `strip_prefix` drops a leading key segment (e.g. `"bert"` to load the encoder of a
/// `BertForSequenceClassification` checkpoint into a bare [`crate::bert::BertModel`]).
/// Every parameter of `module` must be present; extra tensors (pooler, `position_ids`) are ignored.
pub fn load_safetensors<B: Backend, M: ModuleSnapshot<B>>(
    module: &mut M,
    bytes: Vec<u8>,
    strip_prefix: Option<&str>,
) -> Result<(), CheckpointError> {
    let mut store =
        SafetensorsStore::from_bytes(Some(bytes)).with_from_adapter(PyTorchToBurnAdapter);
    if let Some(prefix) = strip_prefix {
        store = store.with_key_remapping(format!(r"^{}\.", regex_escape(prefix)), "");
    }
    for (from, to) in HF_TO_FLIPSIDE {
        store = store.with_key_remapping(*from, *to);
    }
    module
        .load_from(&mut store)
        .map(|_| ())
        .map_err(|e| CheckpointError::Mismatch(e.to_string()))
}

/// Serialises `module` to Hugging Face safetensors bytes (the inverse of [`load_safetensors`]).
pub fn save_safetensors<B: Backend, M: ModuleSnapshot<B>>(
    module: &M,
) -> Result<Vec<u8>, CheckpointError> {
    // Only `format: pt` as metadata: what `transformers` expects, and a deterministic header
    // (burn's default metadata is a hash map serialised in random order).
    let mut store = SafetensorsStore::from_bytes(None)
        .clear_metadata()
        .metadata("format", "pt")
        .with_to_adapter(BurnToPyTorchAdapter);
    for (from, to) in FLIPSIDE_TO_HF {
        store = store.with_key_remapping(*from, *to);
    }
    module
        .save_into(&mut store)
        .map_err(|e| CheckpointError::Serialise(e.to_string()))?;
    store
        .get_bytes()
        .map_err(|e| CheckpointError::Serialise(e.to_string()))
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = !c.is_ascii_alphanumeric() && c != '_';
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}
