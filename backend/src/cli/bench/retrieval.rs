//! `flipside bench retrieval`: Flipside's HNSW index against faiss `IndexIVFFlat` (CORE's
//! setting: 300 lists, 30 probed) and `IndexHNSWFlat`, on the same vectors and queries, in one
//! run: build time, memory, recall@k against exact search, and queries per second.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use flipside_shared::data::Input;
use flipside_shared::sentences::split_sentences;
use half::f16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{reference_python, run_reference_script};
use crate::cli::data::ReadArgs;
use crate::compute::DeviceChoice;
use crate::home::Home;
use crate::model_dirs::DEFAULT_ENCODER;
use crate::retrieval::ann::{AnnIndex, Hit, HnswParams, NearestRows};
use crate::retrieval::corpus::corpus_dir;
use crate::retrieval::embeddings::EmbeddingFile;
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::exact::{exact_top_k_into, recall_at_k};
use crate::retrieval::flat::FlatGraph;
use crate::retrieval::index::{embed_queries, embeddings_path, index_dir, rows_fingerprint};
use crate::retrieval::shards::{
    BuildClock, DEFAULT_SHARD_ROWS, ShardLayout, ShardRecord, ShardedGraph, saved_shard, shard_dir,
    write_record,
};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/faiss_retrieval.py");

/// The recall a configuration must reach to count.
const TARGET_RECALL: f64 = 0.95;

#[derive(Debug, Args)]
pub struct RetrievalBenchArgs {
    /// Vectors to index: the real MiniLM embeddings of the corpus's index, topped up with
    /// perturbed copies when there are fewer
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    /// Queries: MiniLM embeddings of IMDb test-split sentences (not in the corpus)
    #[arg(long, default_value_t = 2000)]
    pub queries: usize,
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// The corpus whose `minilm` index provides the real vectors
    #[arg(long, default_value = "movies")]
    pub corpus: String,
    /// HNSW neighbours per node (M), for Flipside and faiss alike
    #[arg(long, default_value_t = HnswParams::default().max_connections)]
    pub m: usize,
    /// HNSW candidate list size while building, for both
    #[arg(long, default_value_t = HnswParams::default().ef_construction)]
    pub ef_construction: usize,
    /// HNSW search candidate list sizes to try
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,16,24,32,48,64,96,128,192,256,384,512"
    )]
    pub ef: Vec<usize>,
    /// IndexIVFFlat lists
    #[arg(long, default_value_t = 300)]
    pub nlist: usize,
    /// IndexIVFFlat lists probed (CORE used 30)
    #[arg(long, value_delimiter = ',', default_value = "10,20,30,50,80")]
    pub nprobe: Vec<usize>,
    /// Relative norm of the noise added to make perturbed copies
    #[arg(long, default_value_t = 0.75)]
    pub noise: f32,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Rows per HNSW graph: more vectors are built and searched in shards, as `index build`
    /// does (faiss still builds one index over all of them: IndexHNSWFlat keeps every vector as
    /// f32, about 13 GB for 8M)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHARD_ROWS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub shard_rows: usize,
    /// Keep each shard's graph in DIR once built and reuse it in a later run with the same
    /// settings, so that a build of hours can stop and go on (its build time is the one
    /// recorded when it was built)
    #[arg(long, value_name = "DIR")]
    pub keep_graphs: Option<PathBuf>,
    /// Skip faiss (no Python environment needed)
    #[arg(long)]
    pub no_reference: bool,
    /// Python virtual environment for faiss-cpu, created if missing [default: HOME/bench/faiss]
    #[arg(long, value_name = "DIR")]
    pub venv: Option<PathBuf>,
    /// Where to write the results as JSON [default: HOME/bench/retrieval-N.json]
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// A search over a batch of queries at a given `ef`.
type SearchFn<'a> = dyn Fn(&[Vec<f32>], usize) -> Vec<Vec<Hit>> + 'a;

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
struct Run {
    index: String,
    parameter: String,
    value: usize,
    build_seconds: f64,
    memory_bytes: i64,
    recall: f64,
    queries_per_second: f64,
}

#[derive(Deserialize)]
struct ReferenceRun {
    index: String,
    parameter: String,
    value: usize,
    build_seconds: f64,
    memory_bytes: i64,
    search_seconds: f64,
    ids: Vec<Vec<i64>>,
}

#[derive(Deserialize)]
struct ReferenceOutput {
    faiss: String,
    threads: usize,
    runs: Vec<ReferenceRun>,
}

pub fn bench_retrieval(home: &Home, args: RetrievalBenchArgs) -> Result<()> {
    let threads = rayon::current_num_threads();
    let encoders = RetrieverEncoders::resolve(home, DEFAULT_ENCODER)?;
    let dim = 384;
    let layout = ShardLayout::new(
        args.n,
        (args.n > args.shard_rows).then_some(args.shard_rows),
    );
    let rows = BenchRows::new(home, &args, dim)?;
    println!(
        "retrieval bench: {} × {dim} vectors ({} real MiniLM sentence embeddings, {} perturbed \
         copies with noise {:.2}){}, {} queries, recall@{}, {threads} threads",
        args.n,
        rows.real,
        args.n - rows.real,
        args.noise,
        if layout.count() > 1 {
            format!(
                ", {} shards of up to {} rows",
                layout.count(),
                args.shard_rows
            )
        } else {
            String::new()
        },
        args.queries,
        args.k
    );
    let queries = query_vectors(home, &encoders, args.queries)?;
    let params = HnswParams {
        max_connections: args.m,
        ef_construction: args.ef_construction,
    };
    let kept = args.keep_graphs.as_ref().map(|dir| {
        dir.join(format!(
            "{}-{}-n{}-real{}-noise{}-seed{}-m{}-efc{}-shard{}",
            args.corpus,
            rows.fingerprint,
            args.n,
            rows.real,
            args.noise,
            args.seed,
            args.m,
            args.ef_construction,
            args.shard_rows
        ))
    });

    // Shard by shard: its rows, the exact top-k over them, its graph (built, or read back).
    let mut truth = vec![Vec::with_capacity(args.k + 1); queries.len()];
    let mut exact_seconds = 0.0;
    let mut build = ShardBuilds::default();
    let mut graphs = Vec::with_capacity(layout.count());
    let mut runs = Vec::new();
    // faiss's vectors: every shard's rows, written as they are made, read by faiss at the end.
    let reference_input = if args.no_reference {
        None
    } else {
        let python =
            reference_python(home, args.venv.as_deref(), "faiss", &["faiss-cpu", "numpy"])?;
        Some(ReferenceInput::create(home, python, dim)?)
    };
    let bar = crate::progress::items(args.n as u64, "graph");
    for shard in 0..layout.count() {
        let range = layout.range(shard);
        let part = rows.shard(layout, shard);
        let started = Instant::now();
        exact_top_k_into(&mut truth, &part, range.start, dim, &queries, args.k);
        exact_seconds += started.elapsed().as_secs_f64();
        if let Some(input) = &reference_input {
            input.append(&part)?;
        }
        bar.reset_eta();
        let graph_dir = kept.as_ref().map(|dir| shard_dir(dir, shard));
        let saved = graph_dir
            .as_deref()
            .and_then(|dir| Some((dir, saved_shard(dir, range.clone(), params)?)));
        if let Some((dir, record)) = saved {
            let half = part.iter().map(|&x| f16::from_f32(x)).collect();
            graphs.push((range.start, FlatGraph::load(dir, half)?));
            build.add(&record);
            build.reused += 1;
            bar.inc(range.len() as u64);
            continue;
        }
        let before = resident_bytes();
        let clock = BuildClock::start();
        let ann = AnnIndex::build(&part, dim, params, &|n| bar.inc(n as u64));
        build.hnsw_rs_bytes = build.hnsw_rs_bytes.max(resident_bytes() - before);
        let built = clock.record(range.clone(), params);
        let flat = FlatGraph::from_hnsw(&ann);
        let record = clock.record(range.clone(), params);
        build.add(&record);
        if layout.count() == 1 {
            // One graph: hnsw_rs's own search of it too.
            runs.extend(sweep(
                &args,
                &queries,
                &truth,
                &format!("flipside HNSW (hnsw_rs, f16 rows, M={})", args.m),
                built.build_seconds,
                build.hnsw_rs_bytes,
                &|q, ef| ann.search_many(q, args.k, ef),
            ));
        }
        drop(ann);
        if let Some(graph_dir) = &graph_dir {
            flat.save(graph_dir)?;
            write_record(graph_dir, &record)?;
        }
        graphs.push((range.start, flat));
    }
    bar.finish_and_clear();
    if build.reused > 0 {
        println!(
            "{} of {} shard graphs read back from {} (their build times as recorded)",
            build.reused,
            layout.count(),
            kept.as_ref().expect("kept").display()
        );
    }
    println!(
        "graph build: {:.0} s, {:.0} CPU-seconds over all threads",
        build.seconds, build.cpu_seconds
    );
    runs.insert(
        0,
        Run {
            index: "exact (brute force)".into(),
            parameter: "-".into(),
            value: 0,
            build_seconds: 0.0,
            memory_bytes: 0,
            recall: 1.0,
            queries_per_second: queries.len() as f64 / exact_seconds,
        },
    );
    let graph = ShardedGraph::new(graphs);
    let name = if graph.len() > 1 {
        format!(
            "flipside HNSW, flat search, f16 rows (M={}), {} shards",
            args.m,
            graph.len()
        )
    } else {
        format!("flipside HNSW, flat search, f16 rows (M={})", args.m)
    };
    let graph_bytes = graph.memory_bytes() as i64;
    runs.extend(sweep(
        &args,
        &queries,
        &truth,
        &name,
        build.seconds,
        graph_bytes,
        &|q, ef| graph.search_many(q, args.k, ef),
    ));
    // faiss runs alone: Flipside's graphs are freed first (at 8M, 7.2 GB beside faiss's 13).
    drop(graph);
    let reference = reference_input
        .map(|input| input.run(&args, &queries, dim, threads))
        .transpose()?;

    if let Some(reference) = &reference {
        for run in &reference.runs {
            let found: Vec<Vec<usize>> = run
                .ids
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|&id| usize::try_from(id).unwrap_or(usize::MAX))
                        .collect()
                })
                .collect();
            runs.push(Run {
                index: run.index.clone(),
                parameter: run.parameter.clone(),
                value: run.value,
                build_seconds: run.build_seconds,
                memory_bytes: run.memory_bytes,
                recall: recall_at_k(&truth, &found, args.k),
                queries_per_second: queries.len() as f64 / run.search_seconds,
            });
        }
    }
    print_table(&runs, args.k);
    if let Some(reference) = &reference {
        println!(
            "\n(faiss-cpu {}, {} OpenMP threads)",
            reference.faiss, reference.threads
        );
        print_ratios(&runs, args.nlist);
    }
    println!();
    if build.reused < layout.count() {
        let largest = (0..layout.count()).map(|s| layout.range(s).len()).max();
        print_extrapolation(
            "hnsw_rs graph (largest shard built)",
            build.hnsw_rs_bytes,
            largest.unwrap_or(args.n),
            dim,
        );
    }
    print_extrapolation("flat graph", graph_bytes, args.n, dim);

    let output = args.output.clone().unwrap_or_else(|| {
        home.root()
            .join("bench")
            .join(format!("retrieval-{}.json", args.n))
    });
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(
        &output,
        serde_json::to_vec_pretty(&serde_json::json!({
            "n": args.n, "real": rows.real, "dim": dim, "queries": args.queries, "k": args.k,
            "noise": args.noise, "seed": args.seed, "threads": threads,
            "shards": layout.count(), "shard_rows": args.shard_rows,
            "shards_reused": build.reused, "runs": runs,
        }))?,
    )?;
    println!("results saved to {}", output.display());
    Ok(())
}

/// What building the shards' graphs took.
#[derive(Default)]
struct ShardBuilds {
    /// Seconds, summed over shards (as recorded for shards read back).
    seconds: f64,
    /// CPU seconds (all threads), summed likewise.
    cpu_seconds: f64,
    /// The most resident memory one shard's hnsw_rs graph added while built.
    hnsw_rs_bytes: i64,
    /// Shards read back from `--keep-graphs` instead of built.
    reused: usize,
}

impl ShardBuilds {
    /// Counts the times of a shard built now or before.
    fn add(&mut self, record: &ShardRecord) {
        self.seconds += record.build_seconds;
        self.cpu_seconds += record.cpu_seconds;
    }
}

/// One run per `ef`: a warm-up on a few queries, then all of them timed.
fn sweep(
    args: &RetrievalBenchArgs,
    queries: &[Vec<f32>],
    truth: &[Vec<Hit>],
    index: &str,
    build_seconds: f64,
    memory_bytes: i64,
    search: &SearchFn,
) -> Vec<Run> {
    args.ef
        .iter()
        .map(|&ef| {
            search(&queries[..queries.len().min(64)], ef);
            let started = Instant::now();
            let found = search(queries, ef);
            let seconds = started.elapsed().as_secs_f64();
            Run {
                index: index.to_string(),
                parameter: "ef".into(),
                value: ef,
                build_seconds,
                memory_bytes,
                recall: recall_at_k(truth, &ids(&found), args.k),
                queries_per_second: queries.len() as f64 / seconds,
            }
        })
        .collect()
}

fn ids(found: &[Vec<Hit>]) -> Vec<Vec<usize>> {
    found
        .iter()
        .map(|hits| hits.iter().map(|h| h.id).collect())
        .collect()
}

/// The bench's vectors: the real embeddings of the corpus index (up to `n`), then perturbed
/// copies of random real rows until there are `n`, made a shard at a time (each shard's copies
/// from its own random stream, so that any shard can be made again alone).
struct BenchRows {
    /// The real rows, row-major.
    real_rows: Vec<f32>,
    /// Which encoder, corpus and precision made them ([`rows_fingerprint`]).
    fingerprint: String,
    real: usize,
    dim: usize,
    noise: f32,
    seed: u64,
}

impl BenchRows {
    fn new(home: &Home, args: &RetrievalBenchArgs, dim: usize) -> Result<Self> {
        let path = embeddings_path(&index_dir(&corpus_dir(home, &args.corpus), DEFAULT_ENCODER));
        if !path.exists() {
            bail!(
                "no MiniLM embeddings at {}: build them with `flipside corpus build && flipside \
                 index build` (corpus {:?})",
                path.display(),
                args.corpus
            );
        }
        // The real rows stay in memory as f32 (the movie corpus's 238,203: 366 MB), every copy
        // being made from any of them.
        let mut real_rows = Vec::new();
        EmbeddingFile::open(&path, dim)?
            .for_each_chunk_in(0..args.n, |chunk| real_rows.extend_from_slice(chunk))?;
        let real = real_rows.len() / dim;
        if real == 0 {
            bail!("{} holds no embeddings yet", path.display());
        }
        Ok(Self {
            fingerprint: rows_fingerprint(path.parent().expect("in an index directory"))?,
            real_rows,
            real,
            dim,
            noise: args.noise,
            seed: args.seed,
        })
    }

    /// The rows of shard `shard` of `layout`, row-major.
    fn shard(&self, layout: ShardLayout, shard: usize) -> Vec<f32> {
        let range = layout.range(shard);
        let dim = self.dim;
        let mut rows = Vec::with_capacity(range.len() * dim);
        let real_end = range.end.min(self.real);
        if range.start < real_end {
            rows.extend_from_slice(&self.real_rows[range.start * dim..real_end * dim]);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(shard as u64);
        let sigma = self.noise / (dim as f32).sqrt();
        for _ in range.start.max(self.real)..range.end {
            let source = rng.random_range(0..self.real) * dim;
            let mut row: Vec<f32> = (0..dim)
                .map(|i| self.real_rows[source + i] + sigma * gaussian(&mut rng))
                .collect();
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
            rows.extend_from_slice(&row);
        }
        rows
    }
}

/// A standard normal sample (Box–Muller).
fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    let u: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
    let v: f32 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

/// MiniLM embeddings of the first `count` sentences (of at least 4 words) of IMDb test reviews.
fn query_vectors(home: &Home, encoders: &RetrieverEncoders, count: usize) -> Result<Vec<Vec<f32>>> {
    let test = ReadArgs::defaults().load(home, "imdb:test")?;
    let sentences: Vec<String> = test
        .examples
        .iter()
        .flat_map(|e| {
            split_sentences(e.input.texts()[0])
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|s| s.split_whitespace().count() >= 4)
        .take(count)
        .collect();
    let inputs: Vec<Input> = sentences
        .into_iter()
        .map(|text| Input::Text { text })
        .collect();
    with_backend!(
        DeviceChoice::Cpu,
        embed_queries(encoders, &inputs.iter().collect::<Vec<_>>(), 64)
    )
}

/// The vectors faiss is given, in a scratch directory under the Flipside home: an
/// [`EmbeddingFile`] (raw little-endian f32 rows) appended a shard at a time (faiss maps the
/// file rather than reading it into memory, so the 8M rows' 12 GB need not fit twice).
struct ReferenceInput {
    python: PathBuf,
    scratch: PathBuf,
    vectors: EmbeddingFile,
}

impl ReferenceInput {
    fn create(home: &Home, python: PathBuf, dim: usize) -> Result<Self> {
        let scratch = home
            .root()
            .join("bench")
            .join(format!("scratch-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        let vectors = EmbeddingFile::open(&scratch.join("vectors.f32"), dim)?;
        Ok(Self {
            python,
            scratch,
            vectors,
        })
    }

    /// Appends row-major `rows`.
    fn append(&self, rows: &[f32]) -> Result<()> {
        let rows: Vec<&[f32]> = rows.chunks(self.vectors.dim()).collect();
        self.vectors.append(&rows)
    }

    /// Runs the faiss script on the rows appended and the queries (the scratch directory goes
    /// when `self` does, whether faiss ran or the bench failed before).
    fn run(
        self,
        args: &RetrievalBenchArgs,
        queries: &[Vec<f32>],
        dim: usize,
        threads: usize,
    ) -> Result<ReferenceOutput> {
        let queries_path = self.scratch.join("queries.f32");
        EmbeddingFile::open(&queries_path, dim)?.append(queries)?;
        let request = serde_json::json!({
            "vectors": self.vectors.path(), "queries": queries_path, "dim": dim,
            "k": args.k, "threads": threads,
            "ivf": { "nlist": args.nlist, "nprobes": args.nprobe },
            "hnsw": { "m": args.m, "ef_construction": args.ef_construction, "ef_searches": args.ef },
        });
        let spinner = crate::progress::spinner("faiss: building and searching");
        let stdout = run_reference_script(
            Command::new(&self.python),
            REFERENCE_SCRIPT,
            &request,
            "faiss",
        );
        spinner.finish_and_clear();
        serde_json::from_slice(&stdout?).context("the faiss reference printed no result")
    }
}

impl Drop for ReferenceInput {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.scratch) {
            tracing::warn!("cannot remove {}: {error}", self.scratch.display());
        }
    }
}

/// This process's resident memory, in bytes (0 where /proc is unavailable).
fn resident_bytes() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<i64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn print_table(runs: &[Run], k: usize) {
    println!(
        "\n| index | setting | build s | memory MB | recall@{k} | queries/s |\n|---|---|---:|---:|---:|---:|"
    );
    for run in runs {
        println!(
            "| {} | {}={} | {:.1} | {:.0} | {:.4} | {:.0} |",
            run.index,
            run.parameter,
            run.value,
            run.build_seconds,
            run.memory_bytes as f64 / 1e6,
            run.recall,
            run.queries_per_second
        );
    }
}

/// The fastest run of `index` whose recall reaches the target.
fn fastest_at_target<'a>(runs: &'a [Run], index: &str) -> Option<&'a Run> {
    runs.iter()
        .filter(|r| r.index.starts_with(index) && r.recall >= TARGET_RECALL)
        .max_by(|a, b| a.queries_per_second.total_cmp(&b.queries_per_second))
}

fn print_ratios(runs: &[Run], nlist: usize) {
    let ours = fastest_at_target(runs, "flipside HNSW, flat");
    let core = runs
        .iter()
        .find(|r| r.index == "faiss IndexIVFFlat" && r.value == 30);
    let describe = |run: Option<&Run>| {
        run.map_or("none reaches the target".to_string(), |r| {
            format!(
                "{}={}: recall {:.3}, {:.0} queries/s",
                r.parameter, r.value, r.recall, r.queries_per_second
            )
        })
    };
    println!("\nat recall@k ≥ {TARGET_RECALL}:");
    println!("  flipside HNSW, flat  {}", describe(ours));
    println!(
        "  flipside HNSW (hnsw_rs search) {}",
        describe(fastest_at_target(runs, "flipside HNSW (hnsw_rs"))
    );
    println!(
        "  faiss IndexHNSWFlat  {}",
        describe(fastest_at_target(runs, "faiss IndexHNSWFlat"))
    );
    println!(
        "  faiss IndexIVFFlat   {}",
        describe(fastest_at_target(runs, "faiss IndexIVFFlat"))
    );
    println!(
        "  CORE's setting (IndexIVFFlat nlist={nlist}, nprobe=30): {}",
        describe(core)
    );
    let ratio = |theirs: Option<&Run>, name: &str| {
        if let (Some(ours), Some(theirs)) = (ours, theirs) {
            println!(
                "queries/s ratio flipside / {name}: {:.2}x",
                ours.queries_per_second / theirs.queries_per_second
            );
        }
    };
    ratio(core, "IndexIVFFlat nprobe=30");
    ratio(
        fastest_at_target(runs, "faiss IndexIVFFlat"),
        "IndexIVFFlat at the target",
    );
    ratio(
        fastest_at_target(runs, "faiss IndexHNSWFlat"),
        "IndexHNSWFlat at the target",
    );
}

/// Memory per vector measured at `n` vectors (each kept as f16), and what it comes to for 8M
/// sentences.
fn print_extrapolation(what: &str, memory_bytes: i64, n: usize, dim: usize) {
    let per_vector = memory_bytes as f64 / n as f64;
    let vectors = dim as f64 * 2.0;
    println!(
        "memory, {what}: {per_vector:.0} bytes per vector ({vectors:.0} of them the f16 vector, {:.0} the \
         graph and bookkeeping); 8M sentences → {:.1} GB",
        per_vector - vectors,
        per_vector * 8e6 / 1e9
    );
}
