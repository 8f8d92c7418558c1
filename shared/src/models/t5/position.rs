//! T5's relative position buckets: each (query, key) distance maps to one of a few learned
//! biases per head, exact for near distances and logarithmically coarser for far ones.

/// The bucket of `relative` (= key position − query position), as Hugging Face's
/// `T5Attention._relative_position_bucket` computes it (the logarithm in f32, truncated).
///
/// Bidirectional (encoder): half the buckets per direction, keys after the query in the upper
/// half. Causal (decoder): every bucket for the past, future distances share bucket 0.
pub fn bucket(
    relative: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> usize {
    let (num_buckets, offset, distance) = if bidirectional {
        let half = num_buckets / 2;
        (
            half,
            if relative > 0 { half } else { 0 },
            relative.unsigned_abs(),
        )
    } else {
        (num_buckets, 0, (-relative).max(0) as u64)
    };
    let max_exact = num_buckets / 2;
    if (distance as usize) < max_exact {
        return offset + distance as usize;
    }
    let log_ratio = (distance as f32 / max_exact as f32).ln()
        / (max_distance as f64 / max_exact as f64).ln() as f32;
    let large = max_exact + (log_ratio * (num_buckets - max_exact) as f32) as usize;
    offset + large.min(num_buckets - 1)
}

/// Bucket ids for queries at positions `query_offset..query_offset + queries` against keys
/// `0..keys`, row-major `[queries, keys]`.
pub fn bucket_grid(
    queries: usize,
    keys: usize,
    query_offset: usize,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> Vec<i64> {
    let mut ids = Vec::with_capacity(queries * keys);
    for query in query_offset..query_offset + queries {
        for key in 0..keys {
            let relative = key as i64 - query as i64;
            ids.push(bucket(relative, bidirectional, num_buckets, max_distance) as i64);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_hugging_face_values() {
        // Values computed with transformers' `_relative_position_bucket` (32 buckets, 128).
        let encoder: Vec<usize> = [
            -200, -128, -64, -20, -9, -8, -7, -1, 0, 1, 7, 8, 9, 20, 64, 200,
        ]
        .iter()
        .map(|&r| bucket(r, true, 32, 128))
        .collect();
        assert_eq!(
            encoder,
            [15, 15, 14, 10, 8, 8, 7, 1, 0, 17, 23, 24, 24, 26, 30, 31]
        );
        let decoder: Vec<usize> = [-200, -128, -64, -20, -17, -16, -15, -1, 0, 5]
            .iter()
            .map(|&r| bucket(r, false, 32, 128))
            .collect();
        assert_eq!(decoder, [31, 31, 26, 17, 16, 16, 15, 1, 0, 0]);
    }

    #[test]
    fn the_grid_is_key_minus_query_from_the_offset() {
        let grid = bucket_grid(1, 3, 2, false, 32, 128);
        assert_eq!(grid, [2, 1, 0]);
    }
}
