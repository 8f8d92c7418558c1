//! The models Flipside ships (`backend/models/NAME/`: compact int8 weights, their config and
//! training record, a `SHA256SUMS`), embedded in the binary so that the methods that need them
//! work with no training step. On first use each is written to HOME/models/NAME, where it loads
//! like any trained model of its kind.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::home::Home;
use crate::model_dirs::write_atomic;

/// A model directory embedded in the binary.
pub struct ShippedModel {
    /// Its directory's name under HOME/models.
    pub name: &'static str,
    /// Its files, by name.
    pub files: &'static [(&'static str, &'static [u8])],
}

impl ShippedModel {
    /// HOME/models/NAME, written from the binary when a file there is missing or differs
    /// (another build of Flipside ships another model).
    pub fn dir(&self, home: &Home) -> Result<PathBuf> {
        let dir = home.models().join(self.name);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, bytes) in self.files {
            let path = dir.join(name);
            if fs::read(&path).ok().as_deref() != Some(*bytes) {
                write_atomic(&path, bytes)?;
            }
        }
        Ok(dir)
    }

    /// The bytes of the file `name`.
    ///
    /// # Panics
    /// If the model has no such file.
    pub fn file(&self, name: &str) -> &'static [u8] {
        self.files
            .iter()
            .find(|(file, _)| *file == name)
            .unwrap_or_else(|| panic!("{} ships no {name}", self.name))
            .1
    }

    /// Checks the embedded files against `sha256sums` (`sha256sum`'s lines, every file listed),
    /// that the weights are compact and that all of them take at most `cap` bytes.
    #[cfg(test)]
    pub fn check(&self, sha256sums: &str, cap: usize) {
        use flipside_shared::models::compact::is_compact;
        use sha2::{Digest, Sha256};

        let mut listed: Vec<(&str, String)> = sha256sums
            .lines()
            .map(|line| {
                let (sum, name) = line.split_once("  ").expect("sha256sum's format");
                (name, sum.to_string())
            })
            .collect();
        listed.sort_unstable();
        let mut embedded: Vec<(&str, String)> = self
            .files
            .iter()
            .map(|(name, bytes)| (*name, format!("{:x}", Sha256::digest(bytes))))
            .collect();
        embedded.sort_unstable();
        assert_eq!(listed, embedded);
        let weights = self.file(crate::model_dirs::WEIGHTS_FILE);
        assert!(is_compact(weights), "the shipped weights are int8");
        let total: usize = self.files.iter().map(|(_, bytes)| bytes.len()).sum();
        assert!(total <= cap, "{total} bytes: the cap is {cap}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shipped_model_is_written_once_and_mended_when_changed() {
        const MODEL: ShippedModel = ShippedModel {
            name: "tiny-shipped",
            files: &[("config.json", b"{\"size\": 1}"), ("notes.txt", b"shipped")],
        };
        let root = tempfile::tempdir().unwrap();
        let home = Home::new(root.path());
        let dir = MODEL.dir(&home).unwrap();
        assert_eq!(dir, root.path().join("models").join("tiny-shipped"));
        let config = dir.join("config.json");
        assert_eq!(fs::read(&config).unwrap(), MODEL.file("config.json"));
        fs::write(&config, b"{}").unwrap();
        MODEL.dir(&home).unwrap();
        assert_eq!(fs::read(&config).unwrap(), MODEL.file("config.json"));
        assert_eq!(fs::read(dir.join("notes.txt")).unwrap(), b"shipped");
    }
}
