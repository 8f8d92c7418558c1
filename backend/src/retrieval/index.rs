//! A sentence index: a corpus encoded by a retriever's document encoder, searchable through an
//! HNSW graph. Encoding is resumable (rows are appended in durable chunks), and the index
//! records which encoder and which corpus it was built from so that a mismatched search is an
//! error instead of silent garbage.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;
use flipside_shared::ops::int8::Kernel;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ann::{AnnIndex, Hit, HnswParams, NearestRows};
use super::embeddings::EmbeddingFile;
use super::encoders::RetrieverEncoders;
use super::flat::FlatGraph;
use super::shards::{
    BuildClock, DEFAULT_SHARD_ROWS, ShardLayout, ShardedGraph, remove_shards_from, saved_shard,
    shard_dir, write_record,
};
use crate::compute::Compute;
use crate::model_dirs::{int8_where_possible, load_encoder, write_atomic};
use crate::progress;
use crate::retrieval::corpus::{Corpus, Sentence};

const META: &str = "index.json";
const EMBEDDINGS: &str = "embeddings.f32";
const EMBEDDINGS_META: &str = "embeddings.json";

/// `index.json`: what an index was built from and how.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IndexMeta {
    /// The retriever as the user named it.
    pub encoder: String,
    /// The weights fingerprint of its document encoder.
    pub document_fingerprint: String,
    pub dim: usize,
    /// The corpus sources covered, and their fingerprint.
    pub corpus_sources: usize,
    pub corpus_fingerprint: String,
    pub sentences: usize,
    pub hnsw: HnswParams,
    /// Rows per shard when the graph is in shards ([`super::shards`]); none: one graph.
    #[serde(default)]
    pub shard_rows: Option<usize>,
    /// The int8 kernel the documents were encoded with (`BuildOptions::int8`); none: f32.
    #[serde(default)]
    pub int8: Option<Kernel>,
    /// Wall time of the last encoding run and of the graph build.
    pub encode_seconds: f64,
    pub graph_seconds: f64,
}

/// `embeddings.json`: whose rows `embeddings.f32` holds, so that a resumed run never mixes
/// the rows of two encoders or two corpora.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct EmbeddingsMeta {
    document_fingerprint: String,
    dim: usize,
    corpus_sources: usize,
    corpus_fingerprint: String,
    #[serde(default)]
    int8: Option<Kernel>,
}

/// How to build an index.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Sentences per forward pass.
    pub batch_size: usize,
    /// Sentences encoded between two durable writes.
    pub chunk: usize,
    pub hnsw: HnswParams,
    /// Rows per graph: a larger corpus is built and searched in shards of this many rows
    /// ([`super::shards`]).
    pub shard_rows: usize,
    /// Stop after encoding this many new sentences (for testing resumption).
    pub stop_after: Option<usize>,
    /// Encode with int8 products where the CPU has a kernel worth it
    /// ([`flipside_shared::ops::int8::Kernel::best`]); f32 elsewhere.
    pub int8: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            batch_size: 64,
            chunk: 2048,
            hnsw: HnswParams::default(),
            shard_rows: DEFAULT_SHARD_ROWS,
            stop_after: None,
            int8: false,
        }
    }
}

/// Whether the index in `dir` is (being) encoded in int8, so that a caller without a preference
/// (the server's first-run preparation) keeps it instead of encoding it again in f32.
pub fn encoded_in_int8(dir: &Path) -> bool {
    std::fs::read(dir.join(EMBEDDINGS_META))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<EmbeddingsMeta>(&bytes).ok())
        .is_some_and(|meta| meta.int8.is_some())
}

/// The directory of the index of `corpus_dir` built with retriever `encoder`.
pub fn index_dir(corpus_dir: &Path, encoder: &str) -> PathBuf {
    let label: String = Path::new(encoder)
        .file_name()
        .map_or_else(|| encoder.into(), |n| n.to_string_lossy().into_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    corpus_dir.join("indexes").join(label)
}

/// A short fingerprint of what made the embedding rows in `dir` (encoder weights, corpus
/// sources, precision): rows with the same fingerprint are the same numbers.
pub fn rows_fingerprint(dir: &Path) -> Result<String> {
    let path = dir.join(EMBEDDINGS_META);
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(&Sha256::digest(bytes)[..6]))
}

/// The embedding rows of the index in `dir` (complete once the index is built).
pub fn embeddings_path(dir: &Path) -> PathBuf {
    dir.join(EMBEDDINGS)
}

/// What [`build_index`] did.
#[derive(Debug)]
pub enum BuildOutcome {
    Built(IndexMeta),
    /// The index was already built from the same encoder, corpus and parameters.
    UpToDate(IndexMeta),
    /// `stop_after` was reached before every sentence was encoded.
    Paused {
        encoded: usize,
        total: usize,
    },
}

/// Encodes the sentences of `corpus` not yet encoded into `dir`, then builds and saves the
/// graph over all of them.
pub fn build_index<B: Backend>(
    compute: Compute<B>,
    corpus: &Corpus,
    encoders: &RetrieverEncoders,
    dir: &Path,
    options: &BuildOptions,
) -> Result<BuildOutcome> {
    if corpus.is_empty() {
        bail!(
            "the corpus at {} is empty: add sources with `flipside corpus build`",
            corpus.dir().display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut encoder = load_encoder::<B>(&encoders.document_dir, &compute.device)?;
    if options.int8 {
        encoder.model = int8_where_possible(encoder.model, None);
    }
    let wanted = EmbeddingsMeta {
        document_fingerprint: encoders.document_fingerprint()?,
        dim: encoder.dim(),
        corpus_sources: corpus.sources().len(),
        corpus_fingerprint: corpus.fingerprint(corpus.sources().len()),
        int8: encoder.model.int8_kernel(),
    };
    let shard_rows = (corpus.len() > options.shard_rows).then_some(options.shard_rows);
    if let Some(built) = up_to_date(dir, &wanted, corpus.len(), options.hnsw, shard_rows) {
        return Ok(BuildOutcome::UpToDate(built));
    }
    let rows = open_embeddings(corpus, dir, &wanted)?;
    let sentences = corpus.sentences()?;
    let done = rows.rows()?;
    if done > 0 && done < sentences.len() {
        tracing::info!(
            "resuming: {done} of {} sentences already encoded",
            sentences.len()
        );
    }

    let started = Instant::now();
    let todo = &sentences[done..];
    let limit = options.stop_after.unwrap_or(usize::MAX).min(todo.len());
    let bar = progress::items(todo.len() as u64, "encoding");
    for chunk in todo[..limit].chunks(options.chunk.max(1)) {
        let texts: Vec<&str> = chunk.iter().map(|s| s.text.as_str()).collect();
        let vectors = encoder.embed_all(&texts, options.batch_size, &compute.batches, &|n| {
            bar.inc(n as u64)
        })?;
        rows.append(&vectors)?;
    }
    bar.finish_and_clear();
    let encode_seconds = started.elapsed().as_secs_f64();
    if limit < todo.len() {
        return Ok(BuildOutcome::Paused {
            encoded: done + limit,
            total: sentences.len(),
        });
    }

    // Until every graph is built, no index.json describes them (a killed build then reads as
    // no index, not as one whose graphs do not match).
    let _ = std::fs::remove_file(dir.join(META));
    let layout = ShardLayout::new(sentences.len(), shard_rows);
    let graph_seconds = build_graphs(dir, &rows, layout, wanted.dim, options.hnsw)?;
    let meta = IndexMeta {
        encoder: encoders.name.clone(),
        document_fingerprint: wanted.document_fingerprint,
        dim: wanted.dim,
        corpus_sources: wanted.corpus_sources,
        corpus_fingerprint: wanted.corpus_fingerprint,
        sentences: sentences.len(),
        hnsw: options.hnsw,
        shard_rows,
        int8: wanted.int8,
        encode_seconds,
        graph_seconds,
    };
    write_atomic(&dir.join(META), &serde_json::to_vec_pretty(&meta)?)?;
    Ok(BuildOutcome::Built(meta))
}

/// Builds the graph of every shard of `layout` over the rows of `rows` and saves it under `dir`,
/// skipping the shards a killed run already saved (same rows and parameters): the rows go from
/// the file into the graph a chunk at a time (hnsw_rs keeps them as f16). Returns the seconds
/// the graphs took, summed over shards (as recorded for those saved before).
fn build_graphs(
    dir: &Path,
    rows: &EmbeddingFile,
    layout: ShardLayout,
    dim: usize,
    hnsw: HnswParams,
) -> Result<f64> {
    let mut seconds = 0.0;
    remove_shards_from(dir, layout.count())?;
    let bar = progress::items(layout.rows() as u64, "graph");
    for shard in 0..layout.count() {
        let range = layout.range(shard);
        let graph_dir = shard_dir(dir, shard);
        if let Some(saved) = saved_shard(&graph_dir, range.clone(), hnsw) {
            seconds += saved.build_seconds;
            bar.inc(range.len() as u64);
            bar.reset_eta();
            continue;
        }
        if layout.count() > 1 {
            bar.set_message(format!("graph, shard {} of {}", shard + 1, layout.count()));
        }
        let clock = BuildClock::start();
        let ann = AnnIndex::new(dim, range.len(), hnsw);
        let mut inserted = 0;
        rows.for_each_chunk_in(range.clone(), |chunk| {
            ann.insert(inserted, chunk, &|n| bar.inc(n as u64));
            inserted += chunk.len() / dim;
        })?;
        FlatGraph::save_graph_of(&ann, &graph_dir)?;
        let record = clock.record(range, hnsw);
        seconds += record.build_seconds;
        write_record(&graph_dir, &record)?;
    }
    bar.finish_and_clear();
    Ok(seconds)
}

/// The index in `dir` if it was built by the same encoder over the same corpus sources, covers
/// `sentences` sentences and used `hnsw` and `shard_rows`.
fn up_to_date(
    dir: &Path,
    wanted: &EmbeddingsMeta,
    sentences: usize,
    hnsw: HnswParams,
    shard_rows: Option<usize>,
) -> Option<IndexMeta> {
    let meta: IndexMeta = serde_json::from_slice(&std::fs::read(dir.join(META)).ok()?).ok()?;
    let same = meta.document_fingerprint == wanted.document_fingerprint
        && meta.corpus_sources == wanted.corpus_sources
        && meta.corpus_fingerprint == wanted.corpus_fingerprint
        && meta.sentences == sentences
        && meta.hnsw == hnsw
        && meta.shard_rows == shard_rows
        && same_precision(meta.int8, wanted.int8)
        && (0..ShardLayout::new(sentences, shard_rows).count())
            .all(|shard| FlatGraph::is_saved_in(&shard_dir(dir, shard)));
    same.then_some(meta)
}

/// Whether rows encoded with `a` and with `b` (an int8 kernel, or f32) are the same numbers:
/// an index built with AMX stays up to date on a CPU with VNNI alone, and the other way round.
fn same_precision(a: Option<Kernel>, b: Option<Kernel>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.same_results(b),
        (a, b) => a == b,
    }
}

/// Opens `embeddings.f32`, starting over when its rows belong to another encoder or corpus.
fn open_embeddings(corpus: &Corpus, dir: &Path, wanted: &EmbeddingsMeta) -> Result<EmbeddingFile> {
    let meta_path = dir.join(EMBEDDINGS_META);
    let existing: Option<EmbeddingsMeta> = std::fs::read(&meta_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let reusable = existing.as_ref().is_some_and(|old| {
        old.document_fingerprint == wanted.document_fingerprint
            && old.dim == wanted.dim
            && same_precision(old.int8, wanted.int8)
            && old.corpus_sources <= corpus.sources().len()
            && corpus.fingerprint(old.corpus_sources) == old.corpus_fingerprint
    });
    if !reusable {
        if existing.is_some() {
            tracing::info!(
                "the stored embeddings are from another encoder, corpus or precision: starting over"
            );
        }
        // The old index goes first: until the new one is built, `index.json` and the graph
        // would describe rows that are no longer there (a paused or killed build in another
        // precision then looked up to date, and searched rows the graph was not built over).
        let _ = std::fs::remove_file(dir.join(META));
        remove_shards_from(dir, 0)?;
        let _ = std::fs::remove_file(dir.join(EMBEDDINGS));
    }
    write_atomic(&meta_path, &serde_json::to_vec_pretty(wanted)?)?;
    let rows = EmbeddingFile::open(&dir.join(EMBEDDINGS), wanted.dim)?;
    if rows.rows()? > corpus.len() {
        rows.truncate(corpus.len())?;
    }
    Ok(rows)
}

/// A built index, its corpus sentences and its graph, ready to search.
pub struct SentenceIndex {
    pub meta: IndexMeta,
    pub sentences: Vec<Sentence>,
    corpus: Corpus,
    graph: ShardedGraph,
}

/// A search result: the sentence id, its score and the sentence.
#[derive(Debug, Clone, Serialize)]
pub struct Retrieved<'a> {
    pub id: usize,
    pub score: f32,
    pub source: &'a str,
    #[serde(flatten)]
    pub sentence: &'a Sentence,
    /// The re-ranker's probability that the sentence is a counterfactual of the query, when
    /// the results were re-ranked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
}

impl SentenceIndex {
    /// Opens the index in `dir` over the corpus in `corpus_dir`, checking that `encoders` is the
    /// retriever it was built with and that the corpus still starts with the indexed sources.
    pub fn open(corpus_dir: &Path, dir: &Path, encoders: &RetrieverEncoders) -> Result<Self> {
        let meta_path = dir.join(META);
        let meta: IndexMeta =
            serde_json::from_slice(&std::fs::read(&meta_path).with_context(|| {
                format!(
                    "no index at {} (build it with `flipside index build --encoder {}`)",
                    dir.display(),
                    encoders.name
                )
            })?)
            .with_context(|| format!("{} is not an index description", meta_path.display()))?;
        let fingerprint = encoders.document_fingerprint()?;
        if fingerprint != meta.document_fingerprint {
            bail!(
                "the index in {} was built with encoder {:?} (weights {}), but {:?} has weights \
                 {fingerprint}: its vectors are not comparable; build an index for it with \
                 `flipside index build --encoder {}`",
                dir.display(),
                meta.encoder,
                meta.document_fingerprint,
                encoders.name,
                encoders.name
            );
        }
        let corpus = Corpus::open(corpus_dir)?;
        if corpus.sources().len() < meta.corpus_sources
            || corpus.fingerprint(meta.corpus_sources) != meta.corpus_fingerprint
        {
            bail!(
                "the corpus at {} changed since the index was built: rebuild the index",
                corpus_dir.display()
            );
        }
        if corpus.len() > meta.sentences {
            tracing::warn!(
                "the corpus has {} sentences the index does not cover: run `flipside index build`",
                corpus.len() - meta.sentences
            );
        }
        let mut sentences = corpus.sentences()?;
        sentences.truncate(meta.sentences);
        let rows = EmbeddingFile::open(&dir.join(EMBEDDINGS), meta.dim)?;
        if rows.rows()? < meta.sentences {
            bail!(
                "{} holds fewer vectors than the index's {} sentences: rebuild the index",
                dir.join(EMBEDDINGS).display(),
                meta.sentences
            );
        }
        let layout = ShardLayout::new(meta.sentences, meta.shard_rows);
        let graph = ShardedGraph::load(dir, layout, |range| rows.read_half_range(range))?;
        Ok(Self {
            meta,
            sentences,
            corpus,
            graph,
        })
    }

    /// The `k` nearest sentences to each query vector, best first.
    pub fn search(&self, queries: &[Vec<f32>], k: usize, ef: usize) -> Vec<Vec<Retrieved<'_>>> {
        self.graph
            .search_many(queries, k, ef)
            .into_iter()
            .map(|hits| hits.into_iter().map(|hit| self.retrieved(hit)).collect())
            .collect()
    }

    fn retrieved(&self, hit: Hit) -> Retrieved<'_> {
        Retrieved {
            id: hit.id,
            score: hit.score,
            source: self.corpus.source_of(hit.id).unwrap_or("?"),
            sentence: &self.sentences[hit.id],
            rerank_score: None,
        }
    }
}

/// Embeds queries (texts, or premise–hypothesis pairs) with the retriever's query encoder.
pub fn embed_queries<B: Backend>(
    compute: Compute<B>,
    encoders: &RetrieverEncoders,
    queries: &[&Input],
    batch_size: usize,
) -> Result<Vec<Vec<f32>>> {
    let encoder = load_encoder::<B>(&encoders.query_dir, &compute.device)?;
    Ok(encoder.embed_inputs(queries, batch_size, &compute.batches, &|_| {})?)
}
