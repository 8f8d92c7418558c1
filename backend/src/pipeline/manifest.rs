//! The manifest of a directory of released counterfactuals (`manifest.json`), as the papers'
//! authors release theirs: each run's output with its record count, the settings the run saved
//! (method, models, prompt, sampling, seed, filter) and the sha256 of every file, so that a copy
//! can be checked and the run repeated.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use flipside_shared::records::{Counterfactual, FailedAttempt};
use serde::{Deserialize, Serialize};

use super::item_of_key;
use super::store::{config_path, failures_path, read_complete};
use crate::model_dirs::{file_sha256, write_atomic};

/// The file name of a manifest.
pub const MANIFEST: &str = "manifest.json";

/// A directory's counterfactual files and how they were made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The Flipside version that wrote the manifest.
    pub flipside: String,
    /// Each run, by its output's file name.
    pub runs: BTreeMap<String, RunEntry>,
    /// Every file of the directory but the manifest → its sha256.
    pub sha256: BTreeMap<String, String>,
}

/// One `flipside generate` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    /// Counterfactuals written.
    pub records: usize,
    /// How many of them the run's classifier judged flipped.
    pub flipped: usize,
    /// Items the run picked (with a record, or failed attempts only).
    pub items: usize,
    /// Failed attempts, in the failure sidecar.
    pub failed_attempts: usize,
    /// The settings the run saved (`OUT.config.json`).
    pub settings: serde_json::Value,
}

impl Manifest {
    /// The manifest of `dir`: every `*.jsonl` output with its saved settings is a run.
    pub fn of(dir: &Path) -> Result<Self> {
        let mut runs = BTreeMap::new();
        let mut sha256 = BTreeMap::new();
        for name in file_names(dir)? {
            let path = dir.join(&name);
            sha256.insert(name.clone(), file_sha256(&path)?);
            let config = config_path(&path);
            if !name.ends_with(".jsonl") || !config.is_file() {
                continue;
            }
            // Read as they are: a partial last line (a run still writing) is an error here.
            let records: Vec<Counterfactual> = read_complete(&path)?;
            let failures: Vec<FailedAttempt> = read_complete(&failures_path(&path))?;
            let mut items: Vec<&str> = records.iter().map(|r| item_of_key(&r.key)).collect();
            items.extend(failures.iter().map(|f| item_of_key(&f.key)));
            items.sort_unstable();
            items.dedup();
            let settings = serde_json::from_slice(&std::fs::read(&config)?)
                .with_context(|| format!("cannot read {}", config.display()))?;
            runs.insert(
                name,
                RunEntry {
                    records: records.len(),
                    flipped: records.iter().filter(|r| r.flipped).count(),
                    items: items.len(),
                    failed_attempts: failures.len(),
                    settings,
                },
            );
        }
        ensure!(
            !runs.is_empty(),
            "{} holds no `flipside generate` output (FILE.jsonl with FILE.jsonl.config.json)",
            dir.display()
        );
        Ok(Self {
            flipside: env!("CARGO_PKG_VERSION").to_string(),
            runs,
            sha256,
        })
    }

    /// Writes the manifest of `dir` into it.
    pub fn write(dir: &Path) -> Result<Self> {
        let manifest = Self::of(dir)?;
        write_atomic(
            &dir.join(MANIFEST),
            format!("{}\n", serde_json::to_string_pretty(&manifest)?).as_bytes(),
        )?;
        Ok(manifest)
    }

    /// Checks `dir` against its manifest: the same files, each with its sha256.
    pub fn check(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let manifest: Self = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?,
        )
        .with_context(|| format!("invalid manifest {}", path.display()))?;
        let names = file_names(dir)?;
        for name in &names {
            let Some(expected) = manifest.sha256.get(name) else {
                bail!("{} is not in {}", dir.join(name).display(), path.display());
            };
            let actual = file_sha256(&dir.join(name))?;
            ensure!(
                &actual == expected,
                "{} has sha256 {actual}, but its manifest says {expected}",
                dir.join(name).display()
            );
        }
        if let Some(missing) = manifest.sha256.keys().find(|name| !names.contains(name)) {
            bail!("{} lists {missing}, which is missing", path.display());
        }
        Ok(manifest)
    }
}

/// The names of the files in `dir` but the manifest, sorted; anything but a plain file is an
/// error (a manifest covers one flat directory).
fn file_names(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        ensure!(
            entry.file_type()?.is_file(),
            "{} is not a plain file: a manifest covers the files of one directory",
            entry.path().display()
        );
        if name != MANIFEST {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_lists_each_run_and_catches_a_changed_or_extra_file() {
        let dir = tempfile::tempdir().unwrap();
        let record = |key: &str, flipped: bool| {
            let (item, target) = key.split_once('→').unwrap();
            serde_json::json!({
                "key": key, "item": item, "method": "core", "original": "o", "edited": "e",
                "label": "positive", "target": target, "attempt": 1, "prediction": target,
                "target_probability": 0.9, "flipped": flipped,
                "timing": {"context_ms": 1.0, "edit_ms": 1.0, "judge_ms": 1.0}
            })
            .to_string()
        };
        let out = dir.path().join("core.jsonl");
        std::fs::write(
            &out,
            [record("a→negative", true), record("b→positive", false)].join("\n") + "\n",
        )
        .unwrap();
        let failure = FailedAttempt {
            key: "c→negative".into(),
            attempt: 1,
            reason: "empty reply".into(),
            reply: None,
            others: Vec::new(),
        };
        std::fs::write(
            failures_path(&out),
            serde_json::to_string(&failure).unwrap() + "\n",
        )
        .unwrap();
        std::fs::write(config_path(&out), r#"{"method": "core", "seed": 1}"#).unwrap();
        let written = Manifest::write(dir.path()).unwrap();
        let run = &written.runs["core.jsonl"];
        assert_eq!(
            (run.records, run.flipped, run.items, run.failed_attempts),
            (2, 1, 3, 1)
        );
        assert_eq!(run.settings["seed"], 1);
        assert_eq!(written.sha256.len(), 3);
        assert_eq!(Manifest::check(dir.path()).unwrap(), written);

        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let error = Manifest::check(dir.path()).unwrap_err().to_string();
        assert!(error.contains("notes.txt is not in"), "{error}");
        std::fs::remove_file(dir.path().join("notes.txt")).unwrap();
        std::fs::write(config_path(&out), r#"{"method": "core", "seed": 2}"#).unwrap();
        let error = Manifest::check(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("core.jsonl.config.json has sha256"),
            "{error}"
        );

        // A run still writing (a partial last line) is refused, and the file left as it is.
        let mut file = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
        std::io::Write::write_all(&mut file, b"{\"key\": \"d").unwrap();
        let before = std::fs::read(&out).unwrap();
        let error = format!("{:#}", Manifest::write(dir.path()).unwrap_err());
        assert!(error.contains("line 3: not a complete record"), "{error}");
        assert_eq!(std::fs::read(&out).unwrap(), before);
        // So is a subdirectory.
        std::fs::write(&out, &before[..before.len() - 8]).unwrap();
        std::fs::create_dir(dir.path().join("more")).unwrap();
        let error = Manifest::write(dir.path()).unwrap_err().to_string();
        assert!(error.contains("more is not a plain file"), "{error}");
    }

    #[test]
    fn the_shipped_counterfactuals_match_their_manifests() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/data");
        let mut checked = 0;
        for entry in std::fs::read_dir(&data).unwrap() {
            let dir = entry.unwrap().path();
            if !dir.is_dir() {
                continue;
            }
            let shipped = Manifest::check(&dir).unwrap_or_else(|e| panic!("{e:#}"));
            // The counts too, read again from the files the sha256 sums vouch for.
            let read = Manifest::of(&dir).unwrap();
            assert_eq!(shipped.runs, read.runs, "{}", dir.display());
            checked += 1;
        }
        assert!(checked >= 1, "no counterfactuals in {}", data.display());
    }
}
