//! `flipside index …`

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use flipside_shared::data::Input;

use super::corpus::CorpusArg;
use crate::compute::DeviceChoice;
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, resolve_model_dir};
use crate::retrieval::ann::HnswParams;
use crate::retrieval::corpus::Corpus;
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::{
    BuildOptions, BuildOutcome, SentenceIndex, build_index, embed_queries, index_dir,
};
use crate::retrieval::reranker::{DEFAULT_RERANKER, rerank_results};
use crate::with_backend;

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Encode a corpus with a retriever's document encoder and build its HNSW index
    /// (resumable: a killed run continues where it stopped)
    Build(BuildArgs),
    /// Retrieve the corpus sentences nearest to queries
    Search(SearchArgs),
}

/// Which index: a corpus and the retriever that encoded it.
#[derive(Debug, Clone, Args)]
pub struct IndexArg {
    #[command(flatten)]
    pub corpus: CorpusArg,
    /// Retriever: a trained CF-DPR directory, a BERT directory or a model asset name
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub encoder: String,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub index: IndexArg,
    /// Sentences per forward pass
    #[arg(long, default_value_t = BuildOptions::default().batch_size)]
    pub batch_size: usize,
    /// HNSW neighbours per node (M)
    #[arg(long, default_value_t = HnswParams::default().max_connections)]
    pub m: usize,
    /// HNSW candidate list size while building
    #[arg(long, default_value_t = HnswParams::default().ef_construction)]
    pub ef_construction: usize,
    /// Rows per HNSW graph: a larger corpus gets a graph per this many sentences, built one
    /// after the other (a killed build resumes after the last finished one) and searched
    /// together; fewer, larger shards search faster
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().shard_rows,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub shard_rows: usize,
    /// Stop after encoding this many new sentences (the next run resumes)
    #[arg(long, value_name = "N")]
    pub pause_after: Option<usize>,
    /// Encode with int8 matrix products (CPU backend; AMX or AVX-512 VNNI, or AVX2 on CPUs
    /// without AVX-512; f32 elsewhere): about 2-2.5x the sentences per second, embeddings within
    /// cosine 0.996 of f32 (AVX2: 1.4x, 0.988; docs/src/benchmarks.md)
    #[arg(long)]
    pub int8: bool,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Query texts
    pub queries: Vec<String>,
    /// Also read queries from this file, one per line
    #[arg(long, value_name = "FILE")]
    pub queries_file: Option<PathBuf>,
    #[command(flatten)]
    pub index: IndexArg,
    /// Results per query
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// HNSW candidate list size while searching (≥ k; larger is slower and more exact)
    #[arg(long, default_value_t = 64)]
    pub ef: usize,
    /// Print JSON lines instead of a table
    #[arg(long)]
    pub json: bool,
    /// NLI: the premise of every query, which then are hypotheses (the query encoder reads
    /// premise [SEP] hypothesis; CORE §4.2)
    #[arg(long)]
    pub premise: Option<String>,
    /// Re-order the top K results with a cross-encoder re-ranker (K may exceed -k: the
    /// re-ranker then picks the best k of K)
    #[arg(long, value_name = "K")]
    pub rerank: Option<usize>,
    /// The re-ranker: a directory or a model name in the home's models/
    #[arg(long, value_name = "MODEL", default_value = DEFAULT_RERANKER, requires = "rerank")]
    pub reranker: String,
}

pub fn run(home: &Home, command: IndexCommand) -> Result<()> {
    match command {
        IndexCommand::Build(args) => build(home, args),
        IndexCommand::Search(args) => search(home, args),
    }
}

pub fn build(home: &Home, args: BuildArgs) -> Result<()> {
    let corpus_dir = args.index.corpus.dir(home);
    let corpus = Corpus::open(&corpus_dir)?;
    let encoders = RetrieverEncoders::resolve(home, &args.index.encoder)?;
    let dir = index_dir(&corpus_dir, &args.index.encoder);
    let options = BuildOptions {
        batch_size: args.batch_size,
        hnsw: HnswParams {
            max_connections: args.m,
            ef_construction: args.ef_construction,
        },
        shard_rows: args.shard_rows,
        stop_after: args.pause_after,
        int8: args.int8,
        ..BuildOptions::default()
    };
    tracing::info!(
        "indexing {} sentences of {} with {} into {}",
        corpus.len(),
        corpus_dir.display(),
        args.index.encoder,
        dir.display()
    );
    let outcome = with_backend!(
        args.index.device,
        build_index(&corpus, &encoders, &dir, &options)
    )?;
    match outcome {
        BuildOutcome::Built(meta) => tracing::info!(
            "indexed {} sentences ({}-d): encoding {:.0} s, graph {:.0} s{}",
            meta.sentences,
            meta.dim,
            meta.encode_seconds,
            meta.graph_seconds,
            meta.shard_rows.map_or(String::new(), |rows| format!(
                " ({} shards of up to {rows} rows)",
                meta.sentences.div_ceil(rows)
            ))
        ),
        BuildOutcome::UpToDate(_) => tracing::info!("{} is up to date", dir.display()),
        BuildOutcome::Paused { encoded, total } => tracing::info!(
            "paused after {encoded} of {total} sentences; run the same command to continue"
        ),
    }
    Ok(())
}

fn search(home: &Home, args: SearchArgs) -> Result<()> {
    let mut queries = args.queries.clone();
    if let Some(path) = &args.queries_file {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            if !line.trim().is_empty() {
                queries.push(line);
            }
        }
    }
    if queries.is_empty() {
        bail!("no query: give query texts as arguments or --queries-file FILE");
    }
    if args.k == 0 {
        bail!("-k must be at least 1");
    }
    let corpus_dir = args.index.corpus.dir(home);
    let encoders = RetrieverEncoders::resolve(home, &args.index.encoder)?;
    let index = SentenceIndex::open(
        &corpus_dir,
        &index_dir(&corpus_dir, &args.index.encoder),
        &encoders,
    )?;
    let inputs: Vec<Input> = queries
        .iter()
        .map(|text| Input::with_premise(args.premise.as_deref(), text))
        .collect();
    let vectors = with_backend!(
        args.index.device,
        embed_queries(&encoders, &inputs.iter().collect::<Vec<_>>(), 32)
    )?;
    let depth = args.k.max(args.rerank.unwrap_or(0));
    let mut results = index.search(&vectors, depth, args.ef.max(depth));
    if let Some(k) = args.rerank {
        let reranker = resolve_model_dir(home, &args.reranker)?;
        results = with_backend!(
            args.index.device,
            rerank_results(&reranker, &inputs, results, k)
        )?;
    }
    for hits in &mut results {
        hits.truncate(args.k);
    }
    for (query, hits) in queries.iter().zip(&results) {
        if args.json {
            let record = serde_json::json!({
                "query": query, "premise": args.premise, "results": hits
            });
            println!("{record}");
            continue;
        }
        match &args.premise {
            Some(premise) => println!("premise: {premise}\nhypothesis: {query}"),
            None => println!("query: {query}"),
        }
        for (rank, hit) in hits.iter().enumerate() {
            println!(
                "{:>3}  {:.3}{}  {}  [{} {}#{}{}]",
                rank + 1,
                hit.score,
                hit.rerank_score
                    .map_or(String::new(), |p| format!("  re-ranked {p:.3}")),
                hit.sentence.text,
                hit.source,
                hit.sentence.doc,
                hit.sentence.pos,
                hit.sentence
                    .label
                    .as_deref()
                    .map_or(String::new(), |l| format!(", review {l}"))
            );
        }
        println!();
    }
    Ok(())
}
