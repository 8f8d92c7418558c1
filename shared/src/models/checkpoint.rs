//! Loading and saving burn modules as Hugging Face-style safetensors.
//!
//! Tensors are stored in PyTorch layout (linear weights `[out, in]`, LayerNorm `weight`/`bias`)
//! under Hugging Face key names (each architecture's own [`KeyMap`]), so a checkpoint Flipside
//! writes can be read by `transformers` and any HF checkpoint of a supported architecture can
//! be read by Flipside. Works on bytes, so it runs in the browser.

use burn::tensor::backend::Backend;
use burn_store::{BurnToPyTorchAdapter, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};

/// How one architecture's Hugging Face key names differ from its burn field paths: regex
/// renames applied when loading and their inverses applied when saving. Each architecture
/// declares its own ([`HfCheckpoint::KEYS`]), so one model's renames never touch another's keys.
#[derive(Debug, Clone, Copy)]
pub struct KeyMap {
    /// (Hugging Face key regex, burn path replacement), applied in order when loading.
    pub load: &'static [(&'static str, &'static str)],
    /// (burn path regex, Hugging Face key replacement), applied in order when saving.
    pub save: &'static [(&'static str, &'static str)],
}

/// A module stored as a Hugging Face checkpoint under its architecture's key names.
pub trait HfCheckpoint<B: Backend>: ModuleSnapshot<B> {
    const KEYS: KeyMap;
}

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
/// `BertForSequenceClassification` checkpoint into a bare [`super::bert::BertModel`]).
/// Every parameter of `module` must be present; extra tensors (pooler, `position_ids`) are ignored.
pub fn load_safetensors<B: Backend, M: HfCheckpoint<B>>(
    module: &mut M,
    bytes: Vec<u8>,
    strip_prefix: Option<&str>,
) -> Result<(), CheckpointError> {
    let strip = strip_prefix.map(|prefix| format!(r"^{}\.", regex_escape(prefix)));
    let renames: Vec<(&str, &str)> = strip
        .as_deref()
        .map(|pattern| (pattern, ""))
        .into_iter()
        .chain(M::KEYS.load.iter().copied())
        .collect();
    load_renamed(module, bytes, &renames, false).map(|_| ())
}

/// Loads safetensors bytes (ordinary, or [`super::compact`]'s int8 form) into `module` after
/// applying `renames` (regex, replacement) in order to every key. With `partial`, parameters the checkpoint lacks keep their values
/// (a pretrained encoder loaded into a classifier whose head is new); the paths that were not
/// loaded are returned.
pub fn load_renamed<B: Backend, M: ModuleSnapshot<B>>(
    module: &mut M,
    bytes: Vec<u8>,
    renames: &[(&str, &str)],
    partial: bool,
) -> Result<Vec<String>, CheckpointError> {
    let bytes = super::compact::expand(bytes)?;
    let mut store = SafetensorsStore::from_bytes(Some(bytes))
        .with_from_adapter(PyTorchToBurnAdapter)
        .allow_partial(partial);
    for (from, to) in renames {
        store = store.with_key_remapping(*from, *to);
    }
    module
        .load_from(&mut store)
        .map(|result| result.missing.into_iter().map(|(path, _)| path).collect())
        .map_err(|e| CheckpointError::Mismatch(e.to_string()))
}

/// Serialises `module` to Hugging Face safetensors bytes (the inverse of [`load_safetensors`]).
pub fn save_safetensors<B: Backend, M: HfCheckpoint<B>>(
    module: &M,
) -> Result<Vec<u8>, CheckpointError> {
    save_renamed(module, M::KEYS.save)
}

/// Serialises `module` to safetensors bytes, applying `renames` in order to every key.
pub fn save_renamed<B: Backend, M: ModuleSnapshot<B>>(
    module: &M,
    renames: &[(&str, &str)],
) -> Result<Vec<u8>, CheckpointError> {
    // Only `format: pt` as metadata: what `transformers` expects, and a deterministic header
    // (burn's default metadata is a hash map serialised in random order).
    let mut store = SafetensorsStore::from_bytes(None)
        .clear_metadata()
        .metadata("format", "pt")
        .with_to_adapter(BurnToPyTorchAdapter);
    for (from, to) in renames {
        store = store.with_key_remapping(*from, *to);
    }
    module
        .save_into(&mut store)
        .map_err(|e| CheckpointError::Serialise(e.to_string()))?;
    store
        .get_bytes()
        .map_err(|e| CheckpointError::Serialise(e.to_string()))
}

/// Whether any tensor key of safetensors `bytes` starts with `prefix`.
pub fn has_key_prefix(bytes: &[u8], prefix: &str) -> bool {
    let Some(len) = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    else {
        return false;
    };
    let header = bytes.get(8..8 + len as usize).unwrap_or_default();
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(header)
        .is_ok_and(|keys| keys.keys().any(|k| k.starts_with(prefix)))
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = !c.is_ascii_alphanumeric() && c != '_';
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::bert::{BertConfig, BertModel};
    use burn::backend::Flex;
    use burn::module::Module;
    use burn::nn::{LayerNorm, LayerNormConfig};

    /// A module of another architecture whose Hugging Face keys say `layer_norm` (as T5's do).
    #[derive(Module, Debug)]
    struct OtherArchitecture<B: Backend> {
        layer_norm: LayerNorm<B>,
    }

    impl<B: Backend> HfCheckpoint<B> for OtherArchitecture<B> {
        const KEYS: KeyMap = KeyMap {
            load: &[],
            save: &[],
        };
    }

    fn keys(bytes: &[u8]) -> Vec<String> {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        let mut keys: Vec<String> = header
            .keys()
            .filter(|k| *k != "__metadata__")
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn each_architecture_keeps_its_own_key_names() {
        let device = Default::default();
        let other = OtherArchitecture::<Flex> {
            layer_norm: LayerNormConfig::new(4).init(&device),
        };
        let saved = save_safetensors(&other).unwrap();
        assert_eq!(keys(&saved), ["layer_norm.bias", "layer_norm.weight"]);
        let mut loaded = OtherArchitecture::<Flex> {
            layer_norm: LayerNormConfig::new(4).init(&device),
        };
        load_safetensors(&mut loaded, saved, None).unwrap();

        let config = BertConfig::from_json(
            r#"{"vocab_size": 10, "hidden_size": 4, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 8}"#,
        )
        .unwrap();
        let bert: BertModel<Flex> = config.init(&device);
        let saved = keys(&save_safetensors(&bert).unwrap());
        assert!(
            saved.contains(&"embeddings.LayerNorm.weight".to_string()),
            "{saved:?}"
        );
        assert!(
            saved.contains(&"encoder.layer.0.attention.self.query.weight".to_string()),
            "{saved:?}"
        );
        assert!(saved.iter().all(|k| !k.contains("layer_norm")), "{saved:?}");
    }
}
