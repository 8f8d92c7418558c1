//! Model architectures in burn, generic over the backend, one module each with its Hugging Face
//! checkpoint key map. Checkpoints are built from bytes ([`CheckpointFiles`]), so native code
//! (reading a directory) and the browser (downloading the files) load them the same way.

#[cfg(target_arch = "x86_64")]
pub mod amx;
pub mod bert;
#[cfg(not(target_arch = "wasm32"))]
pub mod bf16;
pub mod biencoder;
pub mod checkpoint;
pub mod chunks;
pub mod classifier;
pub mod compact;
#[cfg(not(target_arch = "wasm32"))]
pub mod cpu_products;
pub mod dis_ae;
pub mod dropout;
pub mod encoder;
pub mod gelu;
pub mod heads;
pub mod int8;
pub mod layer_norm;
pub mod lstm;
pub mod pooling;
pub mod portable;
pub mod search;
pub mod sequence_loss;
pub mod softmax;
pub mod t5;

use checkpoint::CheckpointError;

use crate::tokenize::TokenizeError;

/// The files of a model directory: `config.json`, `tokenizer.json` and `model.safetensors`.
#[derive(Debug, Clone)]
pub struct CheckpointFiles {
    pub config: Vec<u8>,
    pub tokenizer: Vec<u8>,
    pub weights: Vec<u8>,
}

/// Why checkpoint files could not be built into a model.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid config.json: {0}")]
    Config(String),
    #[error("invalid tokenizer.json: {0}")]
    Tokenizer(#[from] TokenizeError),
    #[error(transparent)]
    Weights(#[from] CheckpointError),
}

/// `value` as `U`, which it is: the fast paths on burn's CPU backend match a generic backend's
/// tensors by downcasting, and hand their results back through this.
pub fn same_type<T: 'static, U: 'static>(value: T) -> U {
    *(Box::new(value) as Box<dyn std::any::Any>)
        .downcast::<U>()
        .expect("the value has the type it was matched as")
}
