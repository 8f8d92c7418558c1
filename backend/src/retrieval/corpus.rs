//! The retrieval corpus: review sentences from many sources, de-duplicated, on disk.
//!
//! A corpus is a directory holding `corpus.json` (the list of sources, in order) and one
//! JSON-lines shard per source. Sentence ids are positions in the concatenation of the shards,
//! so adding a source appends ids and never renumbers the sentences already there (an index
//! built on the first sources stays valid for them). A shard is written in full before the
//! manifest names it, so a killed build leaves the corpus as it was.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use flipside_shared::data::stable_hash;
use flipside_shared::sentences::split_sentences;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::data::UNLABELLED;
use crate::home::Home;
use crate::model_dirs::write_atomic;
use flipside_shared::data::{Dataset, Input};

const MANIFEST: &str = "corpus.json";
const FORMAT_VERSION: u32 = 1;

/// One sentence and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sentence {
    pub text: String,
    /// The id of the document (review) it was cut from.
    pub doc: String,
    /// Its position among the document's sentences (0-based, before filtering).
    pub pos: u32,
    /// The document's label, when the source had labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A document to be split into sentences.
#[derive(Debug, Clone)]
pub struct Document {
    pub id: String,
    pub text: String,
    pub label: Option<String>,
}

/// Which sentences are kept.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct SentenceFilter {
    /// Sentences with fewer whitespace-separated words are dropped.
    pub min_words: usize,
    /// Sentences with more words are dropped (run-ons without punctuation).
    pub max_words: usize,
}

impl Default for SentenceFilter {
    fn default() -> Self {
        Self {
            min_words: 4,
            max_words: 64,
        }
    }
}

/// A source in the corpus manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SourceEntry {
    /// What the user named: `imdb:train`, a file path, …
    pub name: String,
    /// The shard file, relative to the corpus directory.
    pub shard: String,
    pub documents: usize,
    pub sentences: usize,
    /// Sentences dropped because an earlier one (in this or an earlier source) had the same
    /// text, ignoring case and spacing.
    pub duplicates: usize,
    /// Sentences dropped by the length filter.
    pub filtered: usize,
    pub filter: SentenceFilter,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct Manifest {
    version: u32,
    sources: Vec<SourceEntry>,
}

/// A corpus directory.
#[derive(Debug)]
pub struct Corpus {
    dir: PathBuf,
    manifest: Manifest,
}

impl Corpus {
    /// Opens the corpus at `dir`, or an empty one if there is none yet.
    pub fn open_or_new(dir: &Path) -> Result<Self> {
        if dir.join(MANIFEST).exists() {
            return Self::open(dir);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest: Manifest {
                version: FORMAT_VERSION,
                sources: Vec::new(),
            },
        })
    }

    /// Opens an existing corpus.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let text = fs::read_to_string(&path).with_context(|| {
            format!(
                "no corpus at {} (build one with `flipside corpus build`)",
                dir.display()
            )
        })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a corpus manifest", path.display()))?;
        if manifest.version != FORMAT_VERSION {
            bail!(
                "{} has corpus format {}, this Flipside reads {FORMAT_VERSION}",
                path.display(),
                manifest.version
            );
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sources(&self) -> &[SourceEntry] {
        &self.manifest.sources
    }

    /// The number of sentences in all sources.
    pub fn len(&self) -> usize {
        self.manifest.sources.iter().map(|s| s.sentences).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains_source(&self, name: &str) -> bool {
        self.manifest.sources.iter().any(|s| s.name == name)
    }

    /// A fingerprint of the first `sources` sources (their names and sizes): an index records
    /// it to check that the corpus it was built on still starts the same way.
    pub fn fingerprint(&self, sources: usize) -> String {
        let mut hash = Sha256::new();
        for source in &self.manifest.sources[..sources] {
            hash.update(serde_json::to_vec(source).expect("serialisable"));
        }
        hex::encode(&hash.finalize()[..8])
    }

    /// Splits `documents` into sentences, drops short, long and already-present ones, and
    /// appends the rest as a new source called `name`. Returns its manifest entry.
    pub fn add_source(
        &mut self,
        name: &str,
        documents: &[Document],
        filter: SentenceFilter,
    ) -> Result<SourceEntry> {
        if self.contains_source(name) {
            bail!("the corpus already has a source called {name:?}");
        }
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let mut seen = self.sentence_keys()?;
        let shard = format!("{:03}.jsonl", self.manifest.sources.len());
        let tmp = self.dir.join(format!("{shard}.partial"));
        let mut out = BufWriter::new(
            File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?,
        );
        let mut entry = SourceEntry {
            name: name.to_string(),
            shard: shard.clone(),
            documents: documents.len(),
            sentences: 0,
            duplicates: 0,
            filtered: 0,
            filter,
        };
        for document in documents {
            for (pos, text) in split_sentences(&document.text).into_iter().enumerate() {
                let words = text.split_whitespace().count();
                if words < filter.min_words || words > filter.max_words {
                    entry.filtered += 1;
                    continue;
                }
                if !seen.insert(sentence_key(text)) {
                    entry.duplicates += 1;
                    continue;
                }
                let sentence = Sentence {
                    text: text.split_whitespace().collect::<Vec<_>>().join(" "),
                    doc: document.id.clone(),
                    pos: pos as u32,
                    label: document.label.clone(),
                };
                serde_json::to_writer(&mut out, &sentence)?;
                out.write_all(b"\n")?;
                entry.sentences += 1;
            }
        }
        out.into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, self.dir.join(&shard))?;
        self.manifest.sources.push(entry.clone());
        write_atomic(
            &self.dir.join(MANIFEST),
            &serde_json::to_vec_pretty(&self.manifest)?,
        )?;
        Ok(entry)
    }

    /// Reads every sentence, in id order.
    pub fn sentences(&self) -> Result<Vec<Sentence>> {
        let mut sentences = Vec::with_capacity(self.len());
        for source in &self.manifest.sources {
            let path = self.dir.join(&source.shard);
            let file =
                File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            for (i, line) in BufReader::new(file).lines().enumerate() {
                let line = line.with_context(|| format!("cannot read {}", path.display()))?;
                let sentence = serde_json::from_str(&line).with_context(|| {
                    format!("{}:{}: not a corpus sentence", path.display(), i + 1)
                })?;
                sentences.push(sentence);
            }
            let read = sentences.len();
            let expected: usize = self.sentences_before(source) + source.sentences;
            if read != expected {
                bail!(
                    "{} holds {} sentences, the manifest says {}; the corpus is damaged",
                    path.display(),
                    read - self.sentences_before(source),
                    source.sentences
                );
            }
        }
        Ok(sentences)
    }

    /// The name of the source that sentence `id` comes from.
    pub fn source_of(&self, id: usize) -> Option<&str> {
        let mut end = 0;
        for source in &self.manifest.sources {
            end += source.sentences;
            if id < end {
                return Some(&source.name);
            }
        }
        None
    }

    fn sentences_before(&self, source: &SourceEntry) -> usize {
        self.manifest
            .sources
            .iter()
            .take_while(|s| s.shard != source.shard)
            .map(|s| s.sentences)
            .sum()
    }

    fn sentence_keys(&self) -> Result<HashSet<u64>> {
        Ok(self
            .sentences()?
            .iter()
            .map(|s| sentence_key(&s.text))
            .collect())
    }
}

/// The de-duplication key of a sentence: its words, lower-cased.
fn sentence_key(text: &str) -> u64 {
    let normalised: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    stable_hash(0, &normalised.join(" "))
}

/// The directory of corpus `name`: a path if it contains a `/`, else `HOME/corpora/NAME`.
pub fn corpus_dir(home: &Home, name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        home.root().join("corpora").join(name)
    }
}

/// Adds each of `sources` that the corpus in `dir` does not have yet (creating it), reading
/// each with `read`; returns the corpus.
pub fn build_corpus(
    dir: &Path,
    sources: &[String],
    filter: SentenceFilter,
    read: impl Fn(&str) -> Result<Vec<Document>>,
) -> Result<Corpus> {
    anyhow::ensure!(
        filter.min_words <= filter.max_words,
        "--min-words {} is above --max-words {}",
        filter.min_words,
        filter.max_words
    );
    let mut corpus = Corpus::open_or_new(dir)?;
    for source in sources {
        if corpus.contains_source(source) {
            tracing::info!("{source} is already in the corpus");
            continue;
        }
        let documents = read(source)?;
        let spinner = crate::progress::spinner(format!(
            "splitting {} documents of {source}",
            documents.len()
        ));
        let entry = corpus.add_source(source, &documents, filter)?;
        spinner.finish_and_clear();
        tracing::info!(
            "{source}: {} documents → {} sentences ({} duplicates and {} outside {}–{} words dropped)",
            entry.documents,
            entry.sentences,
            entry.duplicates,
            entry.filtered,
            filter.min_words,
            filter.max_words
        );
    }
    Ok(corpus)
}

/// A dataset's texts as corpus documents, with their labels when it has them.
pub fn dataset_documents(dataset: &Dataset, source: &str) -> Result<Vec<Document>> {
    dataset
        .examples
        .iter()
        .map(|example| {
            let Input::Text { text } = &example.input else {
                bail!("{source}: corpus documents are single texts, not pairs");
            };
            let label = dataset.labels.name(example.label);
            Ok(Document {
                id: example.id.clone(),
                text: text.clone(),
                label: (label != UNLABELLED).then(|| label.to_string()),
            })
        })
        .collect()
}

/// Reads a plain text file as documents, one per non-blank line (`line-N` ids).
pub fn read_text_documents(path: &Path) -> Result<Vec<Document>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| Document {
            id: format!("line-{}", i + 1),
            text: line.to_string(),
            label: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, text: &str) -> Document {
        Document {
            id: id.into(),
            text: text.into(),
            label: Some("positive".into()),
        }
    }

    #[test]
    fn sources_append_dedupe_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut corpus = Corpus::open_or_new(dir.path()).unwrap();
        let filter = SentenceFilter {
            min_words: 2,
            max_words: 6,
        };
        let first = corpus
            .add_source(
                "a",
                &[
                    doc("a-0", "The acting was superb. Wow. I loved it."),
                    doc(
                        "a-1",
                        "the  acting was SUPERB. A very very very long sentence here.",
                    ),
                ],
                filter,
            )
            .unwrap();
        assert_eq!(
            (first.sentences, first.duplicates, first.filtered),
            (2, 1, 2)
        );
        let second = corpus
            .add_source("b", &[doc("b-0", "I loved it. It was dull.")], filter)
            .unwrap();
        assert_eq!((second.sentences, second.duplicates), (1, 1));
        assert!(corpus.add_source("b", &[], filter).is_err());

        let reopened = Corpus::open(dir.path()).unwrap();
        let sentences = reopened.sentences().unwrap();
        let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            vec!["The acting was superb.", "I loved it.", "It was dull."]
        );
        assert_eq!((sentences[1].doc.as_str(), sentences[1].pos), ("a-0", 2));
        assert_eq!(reopened.source_of(2), Some("b"));
        assert_eq!(reopened.source_of(3), None);
        assert_eq!(reopened.fingerprint(1), corpus.fingerprint(1));
        assert_ne!(reopened.fingerprint(1), reopened.fingerprint(2));
    }

    #[test]
    fn a_damaged_shard_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut corpus = Corpus::open_or_new(dir.path()).unwrap();
        corpus
            .add_source(
                "a",
                &[doc("0", "One two three. Four five six.")],
                SentenceFilter::default().with_min(1),
            )
            .unwrap();
        fs::write(
            dir.path().join("000.jsonl"),
            "{\"text\":\"x\",\"doc\":\"0\",\"pos\":0}\n",
        )
        .unwrap();
        let error = Corpus::open(dir.path()).unwrap().sentences().unwrap_err();
        assert!(error.to_string().contains("damaged"), "{error}");
    }

    impl SentenceFilter {
        fn with_min(self, min_words: usize) -> Self {
            Self { min_words, ..self }
        }
    }
}
