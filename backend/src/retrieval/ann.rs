//! Approximate nearest-neighbour search over unit vectors: an HNSW graph (hnsw_rs) under the
//! inner-product distance `1 − a·b`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use hnsw_rs::prelude::{AnnT, Distance, Hnsw, HnswIo};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The file name stem of the dumped graph (`hnsw.hnsw.graph`, `hnsw.hnsw.data`).
const BASENAME: &str = "hnsw";

/// `max(0, 1 − a·b)`: for unit vectors, the cosine distance. Written with independent accumulators
/// so that it vectorises (a single running sum cannot be reordered by the compiler).
#[derive(Debug, Clone, Copy, Default)]
pub struct DotDistance;

impl Distance<f32> for DotDistance {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        // hnsw_rs asserts distances are non-negative; rounding can take a unit vector's
        // product with itself just above 1.
        (1.0 - dot(a, b)).max(0.0)
    }
}

/// The inner product of two equally long vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut sums = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..LANES {
            sums[i] += x[i] * y[i];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// How the graph is built.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct HnswParams {
    /// Neighbours kept per node and layer (M; layer 0 keeps 2M).
    pub max_connections: usize,
    /// Candidate list size while inserting.
    pub ef_construction: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            max_connections: 16,
            ef_construction: 200,
        }
    }
}

/// A neighbour: the row id and its inner product with the query.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hit {
    pub id: usize,
    pub score: f32,
}

/// An HNSW index over the rows of a matrix.
pub struct AnnIndex {
    hnsw: Hnsw<'static, f32, DotDistance>,
    dim: usize,
}

impl AnnIndex {
    /// Builds the graph over `rows` (row-major, `dim` wide), inserting in parallel and calling
    /// `on_progress` with the number of rows inserted since the last call. Parallel insertion
    /// makes the graph depend on thread timing: searches of two builds can differ slightly.
    pub fn build(
        rows: &[f32],
        dim: usize,
        params: HnswParams,
        on_progress: &(dyn Fn(usize) + Sync),
    ) -> Self {
        let count = rows.len() / dim;
        let hnsw = Hnsw::new(
            params.max_connections,
            count.max(1),
            16,
            params.ef_construction,
            DotDistance,
        );
        let all: Vec<(&[f32], usize)> = rows.chunks_exact(dim).zip(0..).collect();
        for chunk in all.chunks(4096) {
            hnsw.parallel_insert_slice(&chunk.to_vec());
            on_progress(chunk.len());
        }
        Self { hnsw, dim }
    }

    /// The number of indexed rows.
    pub fn len(&self) -> usize {
        self.hnsw.get_nb_point()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The hnsw_rs graph.
    pub(super) fn hnsw(&self) -> &Hnsw<'static, f32, DotDistance> {
        &self.hnsw
    }

    /// Writes the graph and its vectors into `dir` (replacing what is there).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let partial = dir.with_extension("partial");
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        std::fs::create_dir_all(&partial)?;
        let written = self
            .hnsw
            .file_dump(&partial, BASENAME)
            .with_context(|| format!("cannot write the HNSW graph into {}", partial.display()))?;
        if written != BASENAME {
            bail!("hnsw_rs wrote {written:?} instead of {BASENAME:?}");
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::rename(&partial, dir)?;
        Ok(())
    }

    /// Reads a graph written by [`AnnIndex::save`].
    pub fn load(dir: &Path, dim: usize) -> Result<Self> {
        for suffix in ["graph", "data"] {
            let path = dir.join(format!("{BASENAME}.hnsw.{suffix}"));
            if !path.is_file() {
                bail!("{} is missing: rebuild the index", path.display());
            }
        }
        // The loader lends its buffers to the graph for the graph's lifetime; an index is loaded
        // once per process, so the loader is leaked to give the graph a 'static lifetime.
        let io: &'static mut HnswIo = Box::leak(Box::new(HnswIo::new(dir, BASENAME)));
        let hnsw = io
            .load_hnsw::<f32, DotDistance>()
            .with_context(|| format!("cannot read the HNSW graph in {}", dir.display()))?;
        let stored_dim = hnsw.get_point_indexation().get_data_dimension();
        if hnsw.get_nb_point() > 0 && stored_dim != dim {
            bail!(
                "the graph in {} holds {}-d vectors, expected {dim}",
                dir.display(),
                stored_dim
            );
        }
        Ok(Self { hnsw, dim })
    }

    /// The `k` nearest rows to `query`, best first; `ef` (≥ k) trades speed for recall.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit> {
        assert_eq!(query.len(), self.dim, "query width");
        self.hnsw
            .search(query, k, ef.max(k))
            .into_iter()
            .map(|n| Hit {
                id: n.d_id,
                score: 1.0 - n.distance,
            })
            .collect()
    }

    /// [`AnnIndex::search`] for many queries, in parallel.
    pub fn search_many(&self, queries: &[Vec<f32>], k: usize, ef: usize) -> Vec<Vec<Hit>> {
        queries
            .par_iter()
            .map(|query| self.search(query, k, ef))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn unit_rows(count: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut rows: Vec<f32> = (0..count * dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        for row in rows.chunks_exact_mut(dim) {
            let norm = dot(row, row).sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        rows
    }

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.5).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| (x * y) as f64).sum();
        assert!((dot(&a, &b) as f64 - plain).abs() < 1e-3, "{plain}");
    }

    #[test]
    fn finds_exact_neighbours_and_survives_a_reload() {
        let dim = 24;
        let rows = unit_rows(2000, dim, 7);
        let index = AnnIndex::build(&rows, dim, HnswParams::default(), &|_| {});
        assert_eq!(index.len(), 2000);
        // Each row's nearest neighbour is itself, with score 1.
        let queries: Vec<Vec<f32>> = rows
            .chunks_exact(dim)
            .take(200)
            .map(<[f32]>::to_vec)
            .collect();
        let hits = index.search_many(&queries, 5, 64);
        let found = hits
            .iter()
            .enumerate()
            .filter(|(i, h)| h[0].id == *i)
            .count();
        assert!(found >= 198, "{found}/200 rows found themselves");
        assert!((hits[0][0].score - 1.0).abs() < 1e-5);
        assert!(hits[0].windows(2).all(|w| w[0].score >= w[1].score));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph");
        index.save(&path).unwrap();
        let reloaded = AnnIndex::load(&path, dim).unwrap();
        assert_eq!(reloaded.len(), 2000);
        assert_eq!(
            reloaded.search(&queries[3], 5, 64),
            index.search(&queries[3], 5, 64)
        );
        assert!(AnnIndex::load(&path, dim + 1).is_err());
    }
}
