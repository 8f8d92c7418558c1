//! Which encoders a retriever uses: one BERT for queries and documents (plain MiniLM), or the
//! query and document encoders of a trained CF-DPR model.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::home::Home;
use crate::model_dirs::resolve_model_dir;

/// The file that marks a directory as a two-encoder retriever.
pub const RETRIEVER_FILE: &str = "retriever.json";

/// `retriever.json`: the sub-directories holding the two encoders (the same one when the
/// weights are shared).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetrieverLayout {
    pub query: String,
    pub document: String,
}

/// The encoder directories of a retriever, and their identities.
#[derive(Debug, Clone)]
pub struct RetrieverEncoders {
    /// What the user called it (`minilm`, a directory).
    pub name: String,
    pub query_dir: PathBuf,
    pub document_dir: PathBuf,
}

impl RetrieverEncoders {
    /// Resolves `spec`: a CF-DPR directory (with `retriever.json`), a BERT directory or a model
    /// asset name (one encoder for both sides).
    pub fn resolve(home: &Home, spec: &str) -> Result<Self> {
        let dir = resolve_model_dir(home, spec)?;
        let layout_path = dir.join(RETRIEVER_FILE);
        let (query_dir, document_dir) = if layout_path.exists() {
            let layout: RetrieverLayout = serde_json::from_slice(
                &std::fs::read(&layout_path)
                    .with_context(|| format!("cannot read {}", layout_path.display()))?,
            )
            .with_context(|| format!("{} is not a retriever layout", layout_path.display()))?;
            (dir.join(layout.query), dir.join(layout.document))
        } else {
            (dir.clone(), dir)
        };
        Ok(Self {
            name: spec.to_string(),
            query_dir,
            document_dir,
        })
    }

    /// The identity of the document encoder (what an index is built with).
    pub fn document_fingerprint(&self) -> Result<String> {
        weights_fingerprint(&self.document_dir)
    }
}

/// A short hash of a model directory's weights: two directories with the same fingerprint
/// embed identically.
pub fn weights_fingerprint(dir: &Path) -> Result<String> {
    let path = dir.join("model.safetensors");
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut hash = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hash.update(&buffer[..n]);
    }
    Ok(hex::encode(&hash.finalize()[..8]))
}
