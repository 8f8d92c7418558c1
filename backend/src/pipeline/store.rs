//! A run's output: an append-only JSON-lines file of counterfactuals and a sidecar of failed
//! attempts (`OUT.failures.jsonl`), written one flushed line at a time.
//!
//! A run killed at any moment leaves at most one partial last line; opening the file again
//! cuts it off, so that item is redone. Items with a record are never redone, so nothing is
//! lost or duplicated.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use flipside_shared::records::{Counterfactual, FailedAttempt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The output file and its failure sidecar.
pub struct RecordStore {
    records: File,
    failures: File,
    /// Keys with a counterfactual.
    pub done: HashSet<String>,
    /// Failed attempts per key.
    pub failed: HashMap<String, usize>,
}

/// The failure sidecar of an output file.
pub fn failures_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".failures.jsonl");
    output.with_file_name(name)
}

/// Where `flipside generate` saves the settings of the run that writes `output`.
pub fn config_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".config.json");
    output.with_file_name(name)
}

impl RecordStore {
    /// Opens (or creates) `output` and its sidecar, cutting off a partial last line.
    pub fn open(output: &Path) -> Result<Self> {
        if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let records: Vec<Counterfactual> = read_repairing(output)?;
        let failures: Vec<FailedAttempt> = read_repairing(&failures_path(output))?;
        let mut failed = HashMap::new();
        for failure in failures {
            *failed.entry(failure.key).or_default() += 1;
        }
        let append = |path: &Path| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {} for appending", path.display()))
        };
        Ok(RecordStore {
            records: append(output)?,
            failures: append(&failures_path(output))?,
            done: records.into_iter().map(|r| r.key).collect(),
            failed,
        })
    }

    /// Appends a counterfactual (one flushed line).
    pub fn add(&mut self, record: &Counterfactual) -> Result<()> {
        write_line(&mut self.records, record)?;
        self.done.insert(record.key.clone());
        Ok(())
    }

    /// Appends a failed attempt.
    pub fn add_failure(&mut self, failure: &FailedAttempt) -> Result<()> {
        write_line(&mut self.failures, failure)?;
        *self.failed.entry(failure.key.clone()).or_default() += 1;
        Ok(())
    }
}

/// Appends one line and syncs it. A write that fails midway (a full disk) is undone, so no
/// partial line stays behind even before the file is opened again.
fn write_line(file: &mut File, value: &impl Serialize) -> Result<()> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    let before = file.seek(SeekFrom::End(0))?;
    let written = file
        .write_all(&line)
        .and_then(|()| file.flush())
        .and_then(|()| file.sync_data());
    if let Err(error) = written {
        let _ = file.set_len(before);
        return Err(error).context("cannot append to the output (is the disk full?)");
    }
    Ok(())
}

/// Reads a JSON-lines file of `T` (none if it does not exist). A last line without its newline
/// (a write cut short: each line is written whole with its newline) is removed from the file; a
/// complete line that is not a `T` is an error, wherever it is (a record from a newer version
/// is never cut off).
pub fn read_repairing<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    read_lines(path, PartialLine::CutOff)
}

/// Reads a JSON-lines file of `T` (none if it does not exist) as it is: a last line without its
/// newline (a run still writing) is an error, and the file is never changed.
pub fn read_complete<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    read_lines(path, PartialLine::Refuse)
}

/// What to do with a last line that lacks its newline.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PartialLine {
    CutOff,
    Refuse,
}

fn read_lines<T: DeserializeOwned>(path: &Path, partial: PartialLine) -> Result<Vec<T>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    let mut reader = BufReader::new(file);
    let mut values = Vec::new();
    let (mut good_bytes, mut number) = (0u64, 0usize);
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line)?;
        if read == 0 {
            break;
        }
        number += 1;
        if !line.ends_with('\n') {
            // Only the last line can lack its newline.
            if partial == PartialLine::Refuse {
                bail!(
                    "{} line {number}: not a complete record (is a run still writing it?)",
                    path.display()
                );
            }
            tracing::warn!(
                "{}:{number}: cutting off a partial last line (an interrupted write)",
                path.display()
            );
            OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(good_bytes)?;
            break;
        }
        let value = serde_json::from_str::<T>(line.trim_end())
            .with_context(|| format!("{}:{number}: not a valid record", path.display()))?;
        values.push(value);
        good_bytes += read as u64;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(key: &str) -> FailedAttempt {
        FailedAttempt {
            key: key.into(),
            attempt: 1,
            reason: "empty reply".into(),
            reply: None,
            others: Vec::new(),
        }
    }

    #[test]
    fn a_partial_last_line_is_cut_off_and_later_lines_append() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        {
            let mut store = RecordStore::open(&out).unwrap();
            store.add_failure(&failure("a")).unwrap();
            store.add_failure(&failure("a")).unwrap();
        }
        let sidecar = failures_path(&out);
        assert_eq!(sidecar, dir.path().join("out.jsonl.failures.jsonl"));
        let mut file = OpenOptions::new().append(true).open(&sidecar).unwrap();
        file.write_all(b"{\"key\": \"b\", \"att").unwrap();
        drop(file);
        let mut store = RecordStore::open(&out).unwrap();
        assert_eq!(store.failed.get("a"), Some(&2));
        assert!(!store.failed.contains_key("b"));
        store.add_failure(&failure("c")).unwrap();
        let lines = std::fs::read_to_string(&sidecar).unwrap();
        assert_eq!(lines.lines().count(), 3, "{lines}");
        assert!(
            lines
                .lines()
                .all(|l| l.starts_with('{') && l.ends_with('}'))
        );
    }

    #[test]
    fn a_run_written_before_typed_provenance_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("old.jsonl");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        std::fs::copy(fixtures.join("records-0.1.0.jsonl"), &out).unwrap();
        std::fs::copy(
            fixtures.join("records-0.1.0.jsonl.failures.jsonl"),
            failures_path(&out),
        )
        .unwrap();
        let store = RecordStore::open(&out).unwrap();
        assert_eq!(
            store.done.len(),
            4,
            "7 records of 4 items (three methods' files joined)"
        );
        assert!(store.done.contains("line-5→positive"));
        assert_eq!(store.failed.values().sum::<usize>(), 6);
        assert_eq!(store.failed["line-2→negative"], 2);
    }

    #[test]
    fn a_bad_line_in_the_middle_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(
            &path,
            "not json\n{\"key\":\"a\",\"attempt\":1,\"reason\":\"r\"}\n",
        )
        .unwrap();
        let error = read_repairing::<FailedAttempt>(&path).unwrap_err();
        assert!(error.to_string().contains("x.jsonl:1"), "{error}");
    }

    #[test]
    fn a_complete_last_line_it_cannot_read_is_an_error_and_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let text =
            "{\"key\":\"a\",\"attempt\":1,\"reason\":\"r\"}\n{\"from\":\"a newer version\"}\n";
        std::fs::write(&path, text).unwrap();
        let error = read_repairing::<FailedAttempt>(&path).unwrap_err();
        assert!(error.to_string().contains("x.jsonl:2"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
