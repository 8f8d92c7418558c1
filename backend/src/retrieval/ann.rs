//! Approximate nearest-neighbour search over unit vectors: an HNSW graph built by hnsw_rs under
//! the inner-product distance `1 − a·b` over rows rounded to f16 (searched here, or copied into
//! a [`super::flat::FlatGraph`] to be saved and searched faster). hnsw_rs keeps its own copy of
//! every row while building: f16 halves it, and rows can be inserted a chunk at a time, so the
//! caller never needs the whole f32 matrix in memory.

use half::f16;
use half::slice::HalfFloatSliceExt;
use hnsw_rs::prelude::{Distance, Hnsw};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use flipside_shared::ops::dot::dot;
#[cfg(target_arch = "x86_64")]
use flipside_shared::ops::dot::{FMA_STEP, fma_sum};

/// `max(0, 1 − a·b)` between f16 rows: for unit vectors, the cosine distance.
#[derive(Debug, Clone, Copy, Default)]
pub struct DotDistance;

impl Distance<f16> for DotDistance {
    fn eval(&self, a: &[f16], b: &[f16]) -> f32 {
        // hnsw_rs asserts distances are non-negative; rounding can take a unit vector's
        // product with itself just above 1.
        (1.0 - dot_halves(a, b)).max(0.0)
    }
}

/// The inner product of a query with a row stored as f16: AVX2 + FMA + F16C when the CPU has
/// them, portable code otherwise.
pub fn dot_half(query: &[f32], row: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the CPU has the features `dot_half_avx2` is compiled for.
        return unsafe { dot_half_avx2(query, row) };
    }
    dot_half_portable(query, row)
}

/// [`dot_half`] in plain Rust.
fn dot_half_portable(query: &[f32], row: &[f16]) -> f32 {
    query.iter().zip(row).map(|(x, y)| x * y.to_f32()).sum()
}

/// [`dot_half`] with the row widened to f32 8 lanes at a time (F16C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_half_avx2(query: &[f32], row: &[f16]) -> f32 {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_loadu_ps};
    let n = query.len().min(row.len());
    let body = n - n % FMA_STEP;
    // SAFETY: `fma_sum` asks for 8 lanes at `at + 8 <= body <= n`, within both slices; 8 f16
    // are the 16 bytes loaded.
    let sum = fma_sum(body, |at| unsafe {
        (
            _mm256_loadu_ps(query.as_ptr().add(at)),
            _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(at).cast::<__m128i>())),
        )
    });
    sum + dot_half_portable(&query[body..n], &row[body..n])
}

/// The inner product of two f16 rows: AVX2 + FMA + F16C when the CPU has them, portable code
/// otherwise.
pub fn dot_halves(a: &[f16], b: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the CPU has the features `dot_halves_avx2` is compiled for.
        return unsafe { dot_halves_avx2(a, b) };
    }
    dot_halves_portable(a, b)
}

/// [`dot_halves`] in plain Rust.
fn dot_halves_portable(a: &[f16], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x.to_f32() * y.to_f32()).sum()
}

/// Whether the CPU has AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
}

/// [`dot_halves`] with both rows widened to f32 8 lanes at a time (F16C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_halves_avx2(a: &[f16], b: &[f16]) -> f32 {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps};
    let n = a.len().min(b.len());
    let body = n - n % FMA_STEP;
    // SAFETY: `fma_sum` asks for 8 lanes at `at + 8 <= body <= n`, within both slices; 8 f16
    // are the 16 bytes loaded.
    let sum = fma_sum(body, |at| unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(at).cast::<__m128i>())),
            _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(at).cast::<__m128i>())),
        )
    });
    sum + dot_halves_portable(&a[body..n], &b[body..n])
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
    hnsw: Hnsw<'static, f16, DotDistance>,
    dim: usize,
}

impl AnnIndex {
    /// An empty graph for about `count` rows of width `dim`; fill it with [`AnnIndex::insert`].
    pub fn new(dim: usize, count: usize, params: HnswParams) -> Self {
        let hnsw = Hnsw::new(
            params.max_connections,
            count.max(1),
            16,
            params.ef_construction,
            DotDistance,
        );
        Self { hnsw, dim }
    }

    /// Inserts `rows` (row-major, rounded to f16 here) as rows `first`, `first + 1`, …, in
    /// parallel, calling `on_progress` with the number inserted since the last call. Parallel
    /// insertion makes the graph depend on thread timing: searches of two builds can differ
    /// slightly.
    pub fn insert(&self, first: usize, rows: &[f32], on_progress: &dyn Fn(usize)) {
        for (chunk, start) in rows.chunks(4096 * self.dim).zip((first..).step_by(4096)) {
            let mut half = vec![f16::ZERO; chunk.len()];
            half.convert_from_f32_slice(chunk);
            let items: Vec<(&[f16], usize)> = half.chunks_exact(self.dim).zip(start..).collect();
            self.hnsw.parallel_insert_slice(&items);
            on_progress(items.len());
        }
    }

    /// Builds the graph over `rows` (row-major, `dim` wide).
    pub fn build(
        rows: &[f32],
        dim: usize,
        params: HnswParams,
        on_progress: &dyn Fn(usize),
    ) -> Self {
        let index = Self::new(dim, rows.len() / dim, params);
        index.insert(0, rows, on_progress);
        index
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
    pub(super) fn hnsw(&self) -> &Hnsw<'static, f16, DotDistance> {
        &self.hnsw
    }
}

/// A search for the rows nearest to a query: an HNSW graph, or several searched together.
pub trait NearestRows: Sync {
    /// The `k` nearest rows to `query`, best first; `ef` (≥ k) trades speed for recall.
    fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit>;

    /// [`NearestRows::search`] for many queries, in parallel.
    fn search_many(&self, queries: &[Vec<f32>], k: usize, ef: usize) -> Vec<Vec<Hit>> {
        queries
            .par_iter()
            .map(|query| self.search(query, k, ef))
            .collect()
    }
}

impl NearestRows for AnnIndex {
    fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit> {
        assert_eq!(query.len(), self.dim, "query width");
        let query: Vec<f16> = query.iter().copied().map(f16::from_f32).collect();
        self.hnsw
            .search(&query, k, ef.max(k))
            .into_iter()
            .map(|n| Hit {
                id: n.d_id,
                score: 1.0 - n.distance,
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `count` random unit rows of width `dim`.
    pub(crate) fn unit_rows(count: usize, dim: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
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
    fn the_half_dots_agree_with_the_f32_dot_of_the_rounded_rows() {
        let rows = unit_rows(2, 100, 5);
        let (query, row) = rows.split_at(100);
        let half: Vec<f16> = row.iter().copied().map(f16::from_f32).collect();
        let rounded: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
        for len in 0..=100 {
            let (x, y) = (
                dot_half(&query[..len], &half[..len]),
                dot(&query[..len], &rounded[..len]),
            );
            assert!((x - y).abs() < 1e-5, "length {len}: {x} vs {y}");
        }
        let both: Vec<f16> = query.iter().copied().map(f16::from_f32).collect();
        let query_rounded: Vec<f32> = both.iter().map(|x| x.to_f32()).collect();
        for len in 0..=100 {
            let (x, y) = (
                dot_halves(&both[..len], &half[..len]),
                dot(&query_rounded[..len], &rounded[..len]),
            );
            assert!((x - y).abs() < 1e-5, "both f16, length {len}: {x} vs {y}");
        }
        // Rounding to f16 moves two unit vectors' product by far less than neighbours differ.
        assert!((dot_half(query, &half) - dot(query, row)).abs() < 1e-3);
    }

    #[test]
    fn finds_exact_neighbours() {
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
    }
}
