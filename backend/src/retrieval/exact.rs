//! Exact top-k by inner product (brute force, blocked matrix products): the ground truth that
//! approximate search is measured against.

use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use super::ann::Hit;
use crate::compute::Cpu;

/// Rows of the base matrix multiplied per block.
const BLOCK_ROWS: usize = 16_384;

/// The `k` rows of `rows` (row-major, `dim` wide) with the largest inner product with each
/// query, best first.
pub fn exact_top_k(rows: &[f32], dim: usize, queries: &[Vec<f32>], k: usize) -> Vec<Vec<Hit>> {
    let mut best = vec![Vec::with_capacity(k + 1); queries.len()];
    exact_top_k_into(&mut best, rows, 0, dim, queries, k);
    best
}

/// [`exact_top_k`] over one more part of the rows, whose ids start at `first`: `best` (one
/// list per query, best first) keeps the `k` best of the parts seen so far, so that the truth
/// over more rows than fit in memory is found a part at a time.
pub fn exact_top_k_into(
    best: &mut [Vec<Hit>],
    rows: &[f32],
    first: usize,
    dim: usize,
    queries: &[Vec<f32>],
    k: usize,
) {
    let device = Default::default();
    let flat: Vec<f32> = queries.iter().flatten().copied().collect();
    let q = Tensor::<Cpu, 2>::from_data(TensorData::new(flat, [queries.len(), dim]), &device);
    for (block_index, block) in rows.chunks(BLOCK_ROWS * dim).enumerate() {
        let count = block.len() / dim;
        let base =
            Tensor::<Cpu, 2>::from_data(TensorData::new(block.to_vec(), [count, dim]), &device);
        let scores = q
            .clone()
            .matmul(base.transpose())
            .into_data()
            .into_vec::<f32>()
            .expect("f32");
        let offset = first + block_index * BLOCK_ROWS;
        best.par_iter_mut()
            .zip(scores.par_chunks(count))
            .for_each(|(best, row)| {
                for (i, &score) in row.iter().enumerate() {
                    if best.len() == k && score <= best[k - 1].score {
                        continue;
                    }
                    let at = best.partition_point(|h| h.score >= score);
                    best.insert(
                        at,
                        Hit {
                            id: offset + i,
                            score,
                        },
                    );
                    best.truncate(k);
                }
            });
    }
}

/// The fraction of the true `k` nearest neighbours that `found` contains, averaged over queries.
pub fn recall_at_k(truth: &[Vec<Hit>], found: &[Vec<usize>], k: usize) -> f64 {
    let total: usize = truth
        .iter()
        .zip(found)
        .map(|(truth, found)| {
            let found = &found[..k.min(found.len())];
            truth
                .iter()
                .take(k)
                .filter(|t| found.contains(&t.id))
                .count()
        })
        .sum();
    total as f64 / (truth.len() * k).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_largest_products_across_blocks() {
        let dim = 2;
        // Row i is (i / n, 1): against the query (1, 0) the scores rise with i, so the best
        // rows are the last ones, in the last block.
        let n = BLOCK_ROWS + 10;
        let rows: Vec<f32> = (0..n).flat_map(|i| [i as f32 / n as f32, 1.0]).collect();
        let hits = exact_top_k(&rows, dim, &[vec![1.0, 0.0]], 3);
        let ids: Vec<usize> = hits[0].iter().map(|h| h.id).collect();
        assert_eq!(ids, vec![n - 1, n - 2, n - 3]);
        assert_eq!(recall_at_k(&hits, &[vec![n - 1, 5, n - 3]], 3), 2.0 / 3.0);
        // The same rows in two parts give the same truth, whichever part comes first, when
        // the best rows are split between them.
        let cut = (n - 2) * dim;
        for order in [[0, 1], [1, 0]] {
            let mut parts = vec![Vec::new()];
            for part in order {
                let (rows, first) = if part == 0 {
                    (&rows[..cut], 0)
                } else {
                    (&rows[cut..], n - 2)
                };
                exact_top_k_into(&mut parts, rows, first, dim, &[vec![1.0, 0.0]], 3);
            }
            assert_eq!(parts, hits);
        }
    }
}
