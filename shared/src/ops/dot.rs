//! The inner product of f32 vectors: AVX2 + FMA chosen at run time where the CPU has them,
//! portable code otherwise. Retrieval scores and one-row matrix products
//! ([`super::cpu_products`]) are built on it; the backend's f16 products reuse [`fma_sum`].

/// The inner product of two equally long vectors: AVX2 + FMA when the CPU has them (chosen at
/// run time, so one binary serves every x86-64 machine), portable code otherwise.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features `dot_avx2` is compiled for.
        return unsafe { dot_avx2(a, b) };
    }
    dot_portable(a, b)
}

/// [`dot`] in plain Rust: 16 independent sums, which the compiler vectorises, then those in order
/// (the same sums on every target).
pub(crate) fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
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

/// [`dot`] with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::_mm256_loadu_ps;
    let n = a.len().min(b.len());
    let body = n - n % FMA_STEP;
    // SAFETY: `fma_sum` asks for 8 lanes at `at + 8 <= body <= n`, within both slices.
    let sum = fma_sum(body, |at| unsafe {
        (
            _mm256_loadu_ps(a.as_ptr().add(at)),
            _mm256_loadu_ps(b.as_ptr().add(at)),
        )
    });
    sum + dot_portable(&a[body..n], &b[body..n])
}

/// Elements [`fma_sum`] takes per round: four accumulators of 8 lanes.
#[cfg(target_arch = "x86_64")]
pub const FMA_STEP: usize = 32;

/// `Σ x·y` over the first `body` elements (a multiple of [`FMA_STEP`]), `load(at)` giving 8
/// lanes of each side from `at`: four independent fused multiply-add accumulators, then their
/// lanes summed.
///
/// # Safety
///
/// The CPU must have AVX2 and FMA (callers compiled with those features may call it freely).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn fma_sum(
    body: usize,
    load: impl Fn(usize) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
) -> f32 {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let mut sums: [__m256; 4] = [_mm256_setzero_ps(); 4];
    for start in (0..body).step_by(FMA_STEP) {
        for (lane, sum) in sums.iter_mut().enumerate() {
            let (x, y) = load(start + 8 * lane);
            *sum = _mm256_fmadd_ps(x, y, *sum);
        }
    }
    let total = _mm256_add_ps(
        _mm256_add_ps(sums[0], sums[1]),
        _mm256_add_ps(sums[2], sums[3]),
    );
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.5).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| (x * y) as f64).sum();
        assert!((dot(&a, &b) as f64 - plain).abs() < 1e-3, "{plain}");
    }

    #[test]
    fn the_dispatched_dot_agrees_with_the_portable_one() {
        let a: Vec<f32> = (0..100)
            .map(|i| ((i * 37) % 23) as f32 * 0.01 - 0.1)
            .collect();
        let b: Vec<f32> = (0..100)
            .map(|i| ((i * 11) % 19) as f32 * 0.01 - 0.09)
            .collect();
        for len in 0..=100 {
            let (x, y) = (
                dot(&a[..len], &b[..len]),
                dot_portable(&a[..len], &b[..len]),
            );
            assert!((x - y).abs() < 1e-5, "length {len}: {x} vs {y}");
        }
    }
}
