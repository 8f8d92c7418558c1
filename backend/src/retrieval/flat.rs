//! A flat copy of an HNSW graph for fast search: row vectors in one contiguous f16 matrix,
//! layer-0 neighbour lists as fixed-width `u32` rows, and a visited set that is a reusable
//! array of generation stamps. hnsw_rs keeps each neighbour as a reference-counted pointer
//! behind a lock, which costs memory (~2 KB per vector) and time on every hop; the graph it
//! builds is good, so it is copied into this layout once built. f16 rows take half the memory
//! and memory traffic of f32 ones; queries stay f32, and `bench retrieval` measures the recall
//! against exact f32 search.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use anyhow::{Context, Result, bail};
use half::f16;
use serde::{Deserialize, Serialize};

use crate::model_dirs::write_atomic;

use super::ann::{AnnIndex, Hit, NearestRows, dot_half};

const NONE: u32 = u32::MAX;
const LAYER0_FILE: &str = "layer0.u32";
const UPPER_FILE: &str = "upper.json";

/// `upper.json`: everything but layer 0 and the vectors.
#[derive(Serialize, Deserialize)]
struct UpperLayers {
    dim: usize,
    width: usize,
    entry: u32,
    top_level: usize,
    upper: HashMap<u32, Vec<Vec<u32>>>,
}

/// An HNSW graph in flat arrays.
pub struct FlatGraph {
    dim: usize,
    vectors: Vec<f16>,
    /// `width` neighbour ids per row on layer 0, padded with [`NONE`].
    layer0: Vec<u32>,
    width: usize,
    /// The neighbours of the rows that reach above layer 0: `upper[id][l - 1]` on layer `l`.
    upper: HashMap<u32, Vec<Vec<u32>>>,
    entry: u32,
    top_level: usize,
}

/// A distance with a total order, for the heaps.
#[derive(Clone, Copy, PartialEq)]
struct Near(f32, u32);

impl Eq for Near {}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Near {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

thread_local! {
    /// Per-thread visited stamps (row → generation in which it was visited).
    static VISITED: RefCell<(Vec<u32>, u32)> = const { RefCell::new((Vec::new(), 0)) };
}

impl FlatGraph {
    /// Copies the graph of `index` and its f16 rows.
    pub fn from_hnsw(index: &AnnIndex) -> Self {
        let mut graph = Self::graph_of(index);
        let dim = graph.dim;
        graph.vectors = vec![f16::ZERO; index.len() * dim];
        for point in index.hnsw().get_point_indexation() {
            let id = point.get_origin_id();
            graph.vectors[id * dim..(id + 1) * dim].copy_from_slice(point.get_v());
        }
        graph
    }

    /// Writes the graph of `index` into the directory `dir` without copying its rows (the
    /// embeddings file keeps them), so that a build never holds them twice.
    pub fn save_graph_of(index: &AnnIndex, dir: &Path) -> Result<()> {
        Self::graph_of(index).save(dir)
    }

    /// The graph of `index` without its rows: only to save, or to fill in.
    fn graph_of(index: &AnnIndex) -> Self {
        let dim = index.dim();
        let count = index.len();
        let hnsw = index.hnsw();
        let width = 2 * hnsw.get_max_nb_connection() as usize;
        let mut layer0 = vec![NONE; count * width];
        let mut upper = HashMap::new();
        // Any row on the top layer is an entry point.
        let mut entry: Option<(usize, u32)> = None;
        for point in hnsw.get_point_indexation() {
            let id = point.get_origin_id();
            let level = point.get_point_id().0 as usize;
            let neighbourhood = point.get_neighborhood_id();
            let ids = |layer: usize| -> Vec<u32> {
                neighbourhood
                    .get(layer)
                    .map(|ns| ns.iter().map(|n| n.d_id as u32).collect())
                    .unwrap_or_default()
            };
            for (slot, neighbour) in layer0[id * width..(id + 1) * width].iter_mut().zip(ids(0)) {
                *slot = neighbour;
            }
            if level > 0 {
                upper.insert(id as u32, (1..=level).map(ids).collect());
            }
            if entry.is_none_or(|(top, _)| level > top) {
                entry = Some((level, id as u32));
            }
        }
        let (top_level, entry) = entry.unwrap_or((0, 0));
        Self {
            dim,
            vectors: Vec::new(),
            layer0,
            width,
            upper,
            entry,
            top_level,
        }
    }

    /// Writes the graph (not the vectors, which the caller keeps) into the directory `dir`,
    /// replacing it.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let partial = dir.with_extension("partial");
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        std::fs::create_dir_all(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let bytes: Vec<u8> = self.layer0.iter().flat_map(|n| n.to_le_bytes()).collect();
        write_atomic(&partial.join(LAYER0_FILE), &bytes)?;
        let upper = UpperLayers {
            dim: self.dim,
            width: self.width,
            entry: self.entry,
            top_level: self.top_level,
            upper: self.upper.clone(),
        };
        write_atomic(&partial.join(UPPER_FILE), &serde_json::to_vec(&upper)?)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::rename(&partial, dir)?;
        Ok(())
    }

    /// Whether `dir` holds a saved graph.
    pub fn is_saved_in(dir: &Path) -> bool {
        dir.join(LAYER0_FILE).is_file() && dir.join(UPPER_FILE).is_file()
    }

    /// Reads a graph written by [`FlatGraph::save`] over `vectors` (its rows, row-major).
    pub fn load(dir: &Path, vectors: Vec<f16>) -> Result<Self> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path)
                .with_context(|| format!("cannot read {}: rebuild the index", path.display()))
        };
        let upper: UpperLayers = serde_json::from_slice(&read(UPPER_FILE)?)
            .with_context(|| format!("{} is damaged: rebuild the index", dir.display()))?;
        let layer0: Vec<u32> = read(LAYER0_FILE)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        let rows = vectors.len() / upper.dim.max(1);
        if layer0.len() != rows * upper.width {
            bail!(
                "the graph in {} has {} rows, the vectors {rows}: rebuild the index",
                dir.display(),
                layer0.len() / upper.width.max(1)
            );
        }
        if layer0.iter().any(|&n| n != NONE && n as usize >= rows) {
            bail!(
                "the graph in {} names rows that do not exist",
                dir.display()
            );
        }
        Ok(Self {
            dim: upper.dim,
            vectors,
            layer0,
            width: upper.width,
            upper: upper.upper,
            entry: upper.entry,
            top_level: upper.top_level,
        })
    }

    /// Bytes held by the graph and the vectors.
    pub fn memory_bytes(&self) -> usize {
        let upper: usize = self
            .upper
            .values()
            .map(|layers| 48 + layers.iter().map(|l| 24 + 4 * l.len()).sum::<usize>())
            .sum();
        2 * self.vectors.len() + 4 * self.layer0.len() + upper
    }

    /// Hints the CPU to fetch row `id`'s vector into cache.
    #[inline]
    fn prefetch(&self, id: u32) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let start = id as usize * self.dim;
            let row = &self.vectors[start..start + self.dim];
            for line in row.chunks(32) {
                // SAFETY: a prefetch never faults, and the address is inside `row`.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = id;
    }

    fn distance(&self, query: &[f32], id: u32) -> f32 {
        let start = id as usize * self.dim;
        1.0 - dot_half(query, &self.vectors[start..start + self.dim])
    }
}

impl NearestRows for FlatGraph {
    fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit> {
        let count = self.vectors.len() / self.dim;
        if count == 0 {
            return Vec::new();
        }
        let ef = ef.max(k);
        // Greedy descent through the upper layers.
        let mut current = Near(self.distance(query, self.entry), self.entry);
        for level in (1..=self.top_level).rev() {
            loop {
                let mut improved = false;
                let neighbours = self
                    .upper
                    .get(&current.1)
                    .and_then(|layers| layers.get(level - 1));
                for &n in neighbours.into_iter().flatten() {
                    let candidate = Near(self.distance(query, n), n);
                    if candidate < current {
                        current = candidate;
                        improved = true;
                    }
                }
                if !improved {
                    break;
                }
            }
        }
        // Beam search on layer 0.
        VISITED.with(|visited| {
            let (stamps, generation) = &mut *visited.borrow_mut();
            if stamps.len() < count {
                stamps.resize(count, 0);
            }
            *generation = generation.wrapping_add(1);
            if *generation == 0 {
                stamps.fill(0);
                *generation = 1;
            }
            let generation = *generation;
            let mut candidates = BinaryHeap::new();
            let mut results = BinaryHeap::new();
            stamps[current.1 as usize] = generation;
            candidates.push(Reverse(current));
            results.push(current);
            let mut fresh = Vec::with_capacity(self.width);
            while let Some(Reverse(nearest)) = candidates.pop() {
                let worst = results.peek().map_or(f32::INFINITY, |w: &Near| w.0);
                if results.len() >= ef && nearest.0 > worst {
                    break;
                }
                // Mark the unvisited neighbours and start loading their vectors, then score
                // them: the loads overlap instead of stalling one distance at a time.
                let row = nearest.1 as usize * self.width;
                fresh.clear();
                for &n in &self.layer0[row..row + self.width] {
                    if n == NONE {
                        break;
                    }
                    if stamps[n as usize] != generation {
                        stamps[n as usize] = generation;
                        self.prefetch(n);
                        fresh.push(n);
                    }
                }
                for &n in &fresh {
                    let candidate = Near(self.distance(query, n), n);
                    let worst = results.peek().map_or(f32::INFINITY, |w: &Near| w.0);
                    if results.len() < ef || candidate.0 < worst {
                        candidates.push(Reverse(candidate));
                        results.push(candidate);
                        if results.len() > ef {
                            results.pop();
                        }
                    }
                }
            }
            let mut found = results.into_sorted_vec();
            found.truncate(k);
            found
                .into_iter()
                .map(|Near(d, id)| Hit {
                    id: id as usize,
                    score: 1.0 - d,
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::ann::tests::unit_rows;
    use crate::retrieval::ann::{HnswParams, dot};
    use crate::retrieval::exact::{exact_top_k, recall_at_k};
    use rand::{Rng, SeedableRng};

    #[test]
    fn flat_search_finds_what_hnsw_rs_finds() {
        let (dim, count) = (32, 3000);
        let rows = unit_rows(count, dim, 3);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let index = AnnIndex::build(&rows, dim, HnswParams::default(), &|_| {});
        let queries: Vec<Vec<f32>> = (0..200)
            .map(|_| (0..dim).map(|_| rng.random::<f32>() - 0.5).collect())
            .collect();
        let truth = exact_top_k(&rows, dim, &queries, 10);
        let ids = |hits: Vec<Vec<Hit>>| -> Vec<Vec<usize>> {
            hits.into_iter()
                .map(|h| h.into_iter().map(|h| h.id).collect())
                .collect()
        };
        let theirs = recall_at_k(&truth, &ids(index.search_many(&queries, 10, 64)), 10);
        let flat = FlatGraph::from_hnsw(&index);
        let found = flat.search_many(&queries, 10, 64);
        let ours = recall_at_k(&truth, &ids(found.clone()), 10);
        assert!(ours >= theirs - 0.01, "flat {ours} vs hnsw_rs {theirs}");
        assert!(ours > 0.9, "{ours}");
        // Scores are inner products, best first.
        let first = &found[0];
        assert!(first.windows(2).all(|w| w[0].score >= w[1].score));
        let exact = dot(
            &queries[0],
            &rows[first[0].id * dim..(first[0].id + 1) * dim],
        );
        // Rows are kept as f16: the score is the exact one to within its rounding.
        assert!((first[0].score - exact).abs() < 1e-3);
    }
}
