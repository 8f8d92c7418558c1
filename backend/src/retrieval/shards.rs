//! An index in shards: its rows split into runs of at most `shard_rows`, each with an HNSW graph
//! of its own, built one after the other and searched side by side with the hits merged. A build
//! over millions of rows then holds one shard's hnsw_rs graph in memory at a time (hnsw_rs keeps
//! ~1.6 KB per row while building, the flat graph ~0.9 KB), and a killed build resumes after the
//! last saved shard instead of starting the hours-long graph over. A search costs about one
//! graph search per shard.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use half::f16;
use serde::{Deserialize, Serialize};

use super::ann::{Hit, HnswParams, NearestRows};
use super::flat::FlatGraph;
use crate::compute::process_cpu_seconds;
use crate::model_dirs::write_atomic;

/// Rows per shard unless told otherwise: a corpus up to this size keeps one graph.
pub const DEFAULT_SHARD_ROWS: usize = 1_000_000;

/// The record a saved shard's graph directory holds (`shard.json`).
const RECORD: &str = "shard.json";

/// How rows `0..rows` are split into shards of `shard_rows` (the last one shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLayout {
    rows: usize,
    shard_rows: usize,
}

impl ShardLayout {
    /// `rows` in shards of `shard_rows`; `None`: one shard.
    pub fn new(rows: usize, shard_rows: Option<usize>) -> Self {
        Self {
            rows,
            shard_rows: shard_rows.unwrap_or(rows).max(1),
        }
    }

    /// The rows of every shard together.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The number of shards (at least one, even over no rows).
    pub fn count(&self) -> usize {
        self.rows.div_ceil(self.shard_rows).max(1)
    }

    /// The rows of shard `shard`.
    pub fn range(&self, shard: usize) -> Range<usize> {
        let start = (shard * self.shard_rows).min(self.rows);
        start..(start + self.shard_rows).min(self.rows)
    }
}

/// What `shard.json` says about a saved shard.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardRecord {
    /// The index's first row in the shard (its row 0).
    #[serde(default)]
    pub first: usize,
    /// The number of rows in the shard.
    pub rows: usize,
    pub hnsw: HnswParams,
    /// Wall time of its graph build.
    pub build_seconds: f64,
    /// CPU time of the process (all threads) during the build: unlike the wall time, not
    /// stretched by other work on the machine or by the process being stopped.
    #[serde(default)]
    pub cpu_seconds: f64,
}

/// Times a shard's build: wall and CPU time from its start.
pub struct BuildClock {
    wall: Instant,
    cpu: f64,
}

impl BuildClock {
    pub fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: process_cpu_seconds(),
        }
    }

    /// The record of a shard over the index's rows `rows` built with `hnsw` since the clock
    /// started.
    pub fn record(&self, rows: Range<usize>, hnsw: HnswParams) -> ShardRecord {
        ShardRecord {
            first: rows.start,
            rows: rows.len(),
            hnsw,
            build_seconds: self.wall.elapsed().as_secs_f64(),
            cpu_seconds: process_cpu_seconds() - self.cpu,
        }
    }
}

/// The directory of shard `shard`'s graph under `dir`: `graph` for the first (an index of one
/// shard is laid out as before sharding), `graph-1`, `graph-2`, … after it.
pub fn shard_dir(dir: &Path, shard: usize) -> PathBuf {
    if shard == 0 {
        dir.join("graph")
    } else {
        dir.join(format!("graph-{shard}"))
    }
}

/// Marks the graph just saved in `graph_dir` as a complete shard.
pub fn write_record(graph_dir: &Path, record: &ShardRecord) -> Result<()> {
    write_atomic(&graph_dir.join(RECORD), &serde_json::to_vec_pretty(record)?)
}

/// The record of the shard saved in `graph_dir` if it was built over the index's rows `rows`
/// with `hnsw`.
pub fn saved_shard(graph_dir: &Path, rows: Range<usize>, hnsw: HnswParams) -> Option<ShardRecord> {
    let bytes = std::fs::read(graph_dir.join(RECORD)).ok()?;
    let record: ShardRecord = serde_json::from_slice(&bytes).ok()?;
    let same = record.first == rows.start && record.rows == rows.len() && record.hnsw == hnsw;
    (same && FlatGraph::is_saved_in(graph_dir)).then_some(record)
}

/// Removes the graph directories of shards from `count` on under `dir` (left by a build with
/// smaller shards; from 0: every graph), and their half-written `.partial` copies.
pub fn remove_shards_from(dir: &Path, count: usize) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let name = name.strip_suffix(".partial").unwrap_or(name);
        let shard = match name.strip_prefix("graph") {
            Some("") => Some(0),
            Some(rest) => rest.strip_prefix('-').and_then(|n| n.parse::<usize>().ok()),
            None => None,
        };
        if shard.is_some_and(|shard| shard >= count) {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

/// The graphs of every shard, searched together.
pub struct ShardedGraph {
    /// Each shard's first row and its graph (whose ids count from 0).
    shards: Vec<(usize, FlatGraph)>,
}

impl ShardedGraph {
    /// Shards given as their first row and graph.
    pub fn new(shards: Vec<(usize, FlatGraph)>) -> Self {
        Self { shards }
    }

    /// Reads the graph of every shard of `layout` saved under `dir`, `rows(range)` giving each
    /// shard's rows.
    pub fn load(
        dir: &Path,
        layout: ShardLayout,
        mut rows: impl FnMut(Range<usize>) -> Result<Vec<f16>>,
    ) -> Result<Self> {
        let shards = (0..layout.count())
            .map(|shard| {
                let range = layout.range(shard);
                let graph = FlatGraph::load(&shard_dir(dir, shard), rows(range.clone())?)?;
                Ok((range.start, graph))
            })
            .collect::<Result<_>>()?;
        Ok(Self { shards })
    }

    /// The number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Bytes held by the graphs and their rows.
    pub fn memory_bytes(&self) -> usize {
        self.shards.iter().map(|(_, g)| g.memory_bytes()).sum()
    }
}

impl NearestRows for ShardedGraph {
    /// The `k` nearest rows to `query` over every shard, best first: each shard searched with
    /// `ef`, the hits merged.
    fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit> {
        let mut hits: Vec<Hit> = Vec::with_capacity(k * self.shards.len());
        for (first, graph) in &self.shards {
            hits.extend(graph.search(query, k, ef).into_iter().map(|hit| Hit {
                id: first + hit.id,
                score: hit.score,
            }));
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(k);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::ann::AnnIndex;
    use crate::retrieval::ann::tests::unit_rows;
    use crate::retrieval::exact::{exact_top_k, recall_at_k};

    #[test]
    fn the_cpu_clock_runs() {
        let clock = BuildClock::start();
        let mut x = 1u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        let record = clock.record(0..1, HnswParams::default());
        assert!(record.cpu_seconds > 0.0, "{record:?} {x}");
        assert!(record.build_seconds > 0.0);
    }

    #[test]
    fn layouts_cover_every_row_once() {
        let layout = ShardLayout::new(10, Some(4));
        assert_eq!(layout.count(), 3);
        let ranges: Vec<_> = (0..3).map(|s| layout.range(s)).collect();
        assert_eq!(ranges, vec![0..4, 4..8, 8..10]);
        assert_eq!(ShardLayout::new(10, None).count(), 1);
        assert_eq!(ShardLayout::new(10, None).range(0), 0..10);
        assert_eq!(ShardLayout::new(8, Some(4)).count(), 2);
        assert_eq!(ShardLayout::new(0, Some(4)).count(), 1);
        assert_eq!(ShardLayout::new(0, Some(4)).range(0), 0..0);
    }

    #[test]
    fn shards_searched_together_find_what_one_graph_finds() {
        let (dim, count) = (32, 3000);
        let rows = unit_rows(count, dim, 5);
        let queries: Vec<Vec<f32>> = unit_rows(100, dim, 6)
            .chunks(dim)
            .map(<[f32]>::to_vec)
            .collect();
        let truth = exact_top_k(&rows, dim, &queries, 10);
        let layout = ShardLayout::new(count, Some(1100));
        let dir = tempfile::tempdir().unwrap();
        let hnsw = HnswParams::default();
        for shard in 0..layout.count() {
            let range = layout.range(shard);
            let part = &rows[range.start * dim..range.end * dim];
            let index = AnnIndex::build(part, dim, hnsw, &|_| {});
            let graph_dir = shard_dir(dir.path(), shard);
            FlatGraph::save_graph_of(&index, &graph_dir).unwrap();
            assert!(saved_shard(&graph_dir, range.clone(), hnsw).is_none());
            let record = BuildClock::start().record(range.clone(), hnsw);
            write_record(&graph_dir, &record).unwrap();
            assert_eq!(saved_shard(&graph_dir, range.clone(), hnsw), Some(record));
            // Not over other rows, even as many (another `--shard-rows`), nor other parameters.
            let shifted = range.start + 1..range.end + 1;
            assert!(saved_shard(&graph_dir, shifted, hnsw).is_none());
            assert!(saved_shard(&graph_dir, range.start..range.end + 1, hnsw).is_none());
            let other = HnswParams {
                ef_construction: 100,
                ..hnsw
            };
            assert!(saved_shard(&graph_dir, range.clone(), other).is_none());
        }
        let halves = |range: Range<usize>| -> Result<Vec<f16>> {
            Ok(rows[range.start * dim..range.end * dim]
                .iter()
                .map(|&x| f16::from_f32(x))
                .collect())
        };
        let sharded = ShardedGraph::load(dir.path(), layout, halves).unwrap();
        assert_eq!(sharded.len(), 3);
        let found = sharded.search_many(&queries, 10, 64);
        let ids: Vec<Vec<usize>> = found
            .iter()
            .map(|hits| hits.iter().map(|h| h.id).collect())
            .collect();
        let recall = recall_at_k(&truth, &ids, 10);
        assert!(recall > 0.95, "{recall}");
        // Ids are the rows' own, hits best first across shards, scores the rows' products.
        for (hits, query) in found.iter().zip(&queries) {
            assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
            for hit in hits {
                let row = &rows[hit.id * dim..(hit.id + 1) * dim];
                let exact: f32 = row.iter().zip(query).map(|(a, b)| a * b).sum();
                assert!((hit.score - exact).abs() < 1e-3);
            }
        }
        // Every shard contributes: the best hits do not all come from one.
        let shards_hit: std::collections::HashSet<usize> =
            ids.iter().flatten().map(|&id| id / 1100).collect();
        assert_eq!(shards_hit.len(), 3);
        // A build with fewer shards leaves none of the old ones behind.
        std::fs::create_dir(dir.path().join("graph-2.partial")).unwrap();
        remove_shards_from(dir.path(), 1).unwrap();
        assert!(!dir.path().join("graph-2.partial").exists());
        assert!(shard_dir(dir.path(), 0).exists());
        assert!(!shard_dir(dir.path(), 1).exists() && !shard_dir(dir.path(), 2).exists());
        remove_shards_from(dir.path(), 0).unwrap();
        assert!(!shard_dir(dir.path(), 0).exists());
    }
}
