//! The infiller that ships with Flipside (`backend/models/infiller/`: compact int8 weights, its
//! config and its training record), embedded in the binary so that AutoCAD works with no
//! training step. On first use it is written to HOME/models/infiller-shipped, where it loads like
//! any trained infiller and `infiller train --base infiller-shipped` starts from it. Its
//! vocabulary is the `t5-tokenizer` asset's (not shipped).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::home::Home;
use crate::model_dirs::{WEIGHTS_FILE, resolve_model_dir, write_atomic};

/// The name the shipped infiller takes under HOME/models.
pub const SHIPPED_INFILLER: &str = "infiller-shipped";

/// The shipped infiller's files, by name.
const FILES: [(&str, &[u8]); 5] = [
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
];

/// `sha256sum` lines for [`FILES`] (checked by the tests, and by `sha256sum -c` in the folder).
#[cfg(test)]
const SHA256SUMS: &str = include_str!("../../models/infiller/SHA256SUMS");

/// The shipped infiller's directory, HOME/models/infiller-shipped, written from the binary when
/// a file there is missing or differs (another build of Flipside ships another infiller).
pub fn shipped_infiller(home: &Home) -> Result<PathBuf> {
    let dir = home.models().join(SHIPPED_INFILLER);
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, bytes) in FILES {
        let path = dir.join(name);
        if fs::read(&path).ok().as_deref() != Some(bytes) {
            write_atomic(&path, bytes)?;
        }
    }
    Ok(dir)
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
    use flipside_shared::models::compact::is_compact;
    use flipside_shared::models::t5::T5Config;
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn every_shipped_file_matches_its_checksum_and_the_weights_are_compact() {
        let mut listed: Vec<(&str, &str)> = SHA256SUMS
            .lines()
            .map(|line| {
                let (sum, name) = line.split_once("  ").expect("sha256sum's format");
                (name, sum)
            })
            .collect();
        listed.sort_unstable();
        let mut embedded: Vec<(&str, String)> = FILES
            .iter()
            .map(|(name, bytes)| (*name, format!("{:x}", Sha256::digest(bytes))))
            .collect();
        embedded.sort_unstable();
        let embedded: Vec<(&str, &str)> = embedded.iter().map(|(n, s)| (*n, s.as_str())).collect();
        assert_eq!(listed, embedded);

        let weights = FILES[1].1;
        assert!(is_compact(weights), "the shipped weights are int8");
        let total: usize = FILES.iter().map(|(_, bytes)| bytes.len()).sum();
        assert!(total <= 25_000_000, "{total} bytes: the cap is 25 MB");
        let config = std::str::from_utf8(FILES[0].1).unwrap();
        T5Config::from_json(config).unwrap();
    }

    #[test]
    fn the_shipped_infiller_is_written_once_and_mended_when_changed() {
        let root = tempfile::tempdir().unwrap();
        let home = Home::new(root.path());
        let dir = infiller_dir(&home, SHIPPED_INFILLER).unwrap();
        assert_eq!(dir, root.path().join("models").join(SHIPPED_INFILLER));
        assert!(is_finished_t5(&dir));
        let config = dir.join("config.json");
        fs::write(&config, b"{}").unwrap();
        shipped_infiller(&home).unwrap();
        assert_eq!(fs::read(&config).unwrap(), FILES[0].1);
    }
}
