//! Model architectures in burn, generic over the backend, one module each with its Hugging Face
//! checkpoint key map. Checkpoints are built from bytes ([`CheckpointFiles`]), so native code
//! (reading a directory) and the browser (downloading the files) load them the same way.

pub mod bert;
pub mod biencoder;
pub mod checkpoint;
pub mod classifier;
pub mod compact;
pub mod contrast;
pub mod dis_ae;
pub mod encoder;
pub mod lstm;
pub mod pooling;
pub mod search;
pub mod sequence_loss;
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
