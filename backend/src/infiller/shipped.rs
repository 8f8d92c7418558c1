//! The infiller that ships with Flipside (`backend/models/infiller/`: compact int8 weights, its
//! config and its training record), embedded in the binary so that AutoCAD works with no
//! training step. On first use it is written to HOME/models/infiller-shipped, where it loads like
//! any trained infiller and `infiller train --base infiller-shipped` starts from it. Its
//! vocabulary is the `t5-tokenizer` asset's (not shipped).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::home::Home;
use crate::model_dirs::{WEIGHTS_FILE, resolve_model_dir};
use crate::shipped::ShippedModel;

/// The name the shipped infiller takes under HOME/models.
pub const SHIPPED_INFILLER: &str = "infiller-shipped";

/// The shipped infiller.
pub const INFILLER: ShippedModel = ShippedModel {
    name: SHIPPED_INFILLER,
    files: &[
        (
            "config.json",
            include_bytes!("../../models/infiller/config.json"),
        ),
        (
            "model.safetensors",
            include_bytes!("../../models/infiller/model.safetensors"),
        ),
        (
            "pretrain.json",
            include_bytes!("../../models/infiller/pretrain.json"),
        ),
        (
            "infill.json",
            include_bytes!("../../models/infiller/infill.json"),
        ),
        (
            "training.json",
            include_bytes!("../../models/infiller/training.json"),
        ),
    ],
};

/// The shipped infiller's directory, HOME/models/infiller-shipped ([`ShippedModel::dir`]).
pub fn shipped_infiller(home: &Home) -> Result<PathBuf> {
    INFILLER.dir(home)
}

/// A T5 directory named on the command line: [`SHIPPED_INFILLER`] is the shipped infiller
/// (written now if needed), any other name a model directory ([`resolve_model_dir`]).
pub fn infiller_dir(home: &Home, name: &str) -> Result<PathBuf> {
    match name {
        SHIPPED_INFILLER => shipped_infiller(home),
        _ => resolve_model_dir(home, name),
    }
}

/// Whether `dir` holds a finished T5 (a training still under way has only its `train-state`).
pub fn is_finished_t5(dir: &Path) -> bool {
    dir.join("config.json").is_file() && dir.join(WEIGHTS_FILE).is_file()
}

/// `trained` (a default output under HOME/models) when it holds a finished T5, else the shipped
/// infiller.
pub fn trained_or_shipped(home: &Home, trained: PathBuf) -> Result<PathBuf> {
    match is_finished_t5(&trained) {
        true => Ok(trained),
        false => shipped_infiller(home),
    }
}

#[cfg(test)]
mod tests {
    use flipside_shared::models::t5::T5Config;

    use super::*;

    #[test]
    fn every_shipped_file_matches_its_checksum_and_the_weights_are_compact() {
        INFILLER.check(include_str!("../../models/infiller/SHA256SUMS"), 25_000_000);
        let config = std::str::from_utf8(INFILLER.file("config.json")).unwrap();
        T5Config::from_json(config).unwrap();
    }

    #[test]
    fn the_shipped_infiller_is_a_finished_t5_under_its_name() {
        let root = tempfile::tempdir().unwrap();
        let home = Home::new(root.path());
        let dir = infiller_dir(&home, SHIPPED_INFILLER).unwrap();
        assert_eq!(dir, root.path().join("models").join(SHIPPED_INFILLER));
        assert!(is_finished_t5(&dir));
    }
}
