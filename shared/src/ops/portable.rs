//! The f32 steps of BERT's encoder computed the same way, bit for bit, on every CPU and in
//! WebAssembly: sums in a fixed order (lanes spelled out, not left to the instruction set),
//! products and sums rounded separately (no fused multiply-add), no libm. The encoder takes them
//! between its int8 products when those use the page's kernels ([`Kernel::portable`]), so that
//! native computes exactly the page's numbers.
//!
//! Why it matters: each int8 product quantises its input, and an activation one rounding apart
//! can land on the other side of a quantisation step. Such a flip early in the encoder moves
//! the next layers' inputs by a step's worth, which flips thousands of values there: with
//! burn-flex's LayerNorm and softmax (SIMD sums of 16 lanes on AVX-512, 8 on AVX2, 4 in the
//! page) and `gemm`'s attention products (fused natively, not in the page), the page-kernel
//! probabilities of 44 of 100 Rotten Tomatoes sentences moved by up to 1.2e-3 between an AVX-512
//! CPU and an AVX2 one (the size of int8's whole rounding effect), while the f32 encoder moved
//! by at most 6e-8.
//!
//! [`Kernel::portable`]: super::int8::Kernel::portable

use burn::nn::LayerNorm;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};

use super::softmax::softmax_in_place;
use super::values;

/// Partial sums a row's reductions keep: a fixed number, so that every target sums alike
/// (8 vectorises on AVX2 and as two SIMD128 vectors).
const LANES: usize = 8;

/// `norm` applied to `x` over its last dimension, with `epsilon` (its own).
pub fn layer_norm<B: Backend, const D: usize>(
    norm: &LayerNorm<B>,
    epsilon: f64,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    let (device, dims) = (x.device(), x.dims());
    let gamma = values(norm.gamma.val());
    let beta = norm.beta.as_ref().map(|beta| values(beta.val()));
    let mut rows = values(x);
    for row in rows.chunks_exact_mut(dims[D - 1].max(1)) {
        normalise_row(row, &gamma, beta.as_deref(), epsilon as f32);
    }
    Tensor::from_data(TensorData::new(rows, dims), &device)
}

/// `row ← (row − mean) / √(variance + ε) · γ + β`, the mean and variance in two passes.
fn normalise_row(row: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, epsilon: f32) {
    let width = row.len() as f32;
    let mean = lane_sum(row, |x| x) / width;
    let variance = lane_sum(row, |x| (x - mean) * (x - mean)) / width;
    let inverse = 1.0 / (variance + epsilon).sqrt();
    for (i, x) in row.iter_mut().enumerate() {
        let scaled = (*x - mean) * inverse * gamma[i];
        *x = match beta {
            Some(beta) => scaled + beta[i],
            None => scaled,
        };
    }
}

/// The sum of `term` of each of `values`, value `i`'s into partial sum `i % LANES`, the
/// partials then added in order.
#[inline(always)]
fn lane_sum(values: &[f32], term: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane += term(value);
        }
    }
    for (lane, &value) in lanes.iter_mut().zip(tail) {
        *lane += term(value);
    }
    lanes.iter().fold(0.0, |sum, &lane| sum + lane)
}

/// Scaled dot-product attention of `query`, `key` and `value` (`[batch, seq, heads · dim]`,
/// as the projections give them), the scores divided by `divisor` and those of the keys that
/// `masked` (`[batch, heads, seq, seq]`, the same for every head and query: padding) marks set
/// to `f32::MIN` before the softmax: the context, `[batch, seq, heads · dim]` (heads merged).
pub fn attention<B: Backend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    heads: usize,
    divisor: f32,
    masked: &Tensor<B, 4, Bool>,
) -> Tensor<B, 3> {
    let (device, [batch, seq, width]) = (query.device(), query.dims());
    let dim = width / heads;
    let (query, key, value) = (values(query), values(key), values(value));
    // The padding of each sequence's keys: the first head's first query's row.
    let padding = masked.clone().slice([0..batch, 0..1, 0..1, 0..seq]);
    let padding: Vec<bool> = padding.into_data().iter::<bool>().collect();
    let mut context = vec![0f32; batch * seq * width];
    let (mut keys, mut scores) = (vec![0f32; dim * seq], vec![0f32; seq]);
    for b in 0..batch {
        let token = |i: usize, h: usize| (b * seq + i) * width + h * dim;
        for h in 0..heads {
            // This head's keys transposed, `[dim, seq]`, so that a query's scores are summed
            // input by input for all keys at once.
            for j in 0..seq {
                for (t, &k) in key[token(j, h)..][..dim].iter().enumerate() {
                    keys[t * seq + j] = k;
                }
            }
            let padding = &padding[b * seq..][..seq];
            for i in 0..seq {
                let query = &query[token(i, h)..][..dim];
                weighted_rows(&mut scores, query, |t| &keys[t * seq..][..seq]);
                for (score, &masked) in scores.iter_mut().zip(padding) {
                    *score = if masked { f32::MIN } else { *score / divisor };
                }
                softmax_in_place(&mut scores);
                let out = &mut context[token(i, h)..][..dim];
                weighted_rows(out, &scores, |j| &value[token(j, h)..][..dim]);
            }
        }
    }
    Tensor::from_data(TensorData::new(context, [batch, seq, width]), &device)
}

/// `out[c] = Σₖ weights[k] · row(k)[c]`, each product rounded and added in `k` order from 0;
/// [`BLOCK`] outputs at a time, kept in registers over all `k`.
fn weighted_rows<'a>(out: &mut [f32], weights: &[f32], row: impl Fn(usize) -> &'a [f32]) {
    for (block, out) in out.chunks_mut(BLOCK).enumerate() {
        let start = block * BLOCK;
        let mut sums = [0f32; BLOCK];
        if let Ok(out) = <&mut [f32; BLOCK]>::try_from(&mut *out) {
            for (k, &weight) in weights.iter().enumerate() {
                let row: &[f32; BLOCK] = row(k)[start..start + BLOCK].try_into().unwrap();
                for (sum, &value) in sums.iter_mut().zip(row) {
                    *sum += weight * value;
                }
            }
            *out = sums;
            continue;
        }
        for (k, &weight) in weights.iter().enumerate() {
            for (sum, &value) in sums.iter_mut().zip(&row(k)[start..][..out.len()]) {
                *sum += weight * value;
            }
        }
        out.copy_from_slice(&sums[..out.len()]);
    }
}

/// Outputs of [`weighted_rows`] summed together: four SIMD128 vectors, two AVX2 ones.
const BLOCK: usize = 16;

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::nn::LayerNormConfig;
    use burn::tensor::{Tolerance, activation};

    use super::*;
    use crate::random::SplitMix64;

    fn varied<const D: usize>(shape: [usize; D], seed: u64, spread: f32) -> Tensor<Flex, D> {
        let values = SplitMix64(seed).centred_f32s(shape.iter().product(), spread);
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn layer_norm_is_burns() {
        let device = Default::default();
        let mut norm = LayerNormConfig::new(37).init::<Flex>(&device);
        norm.gamma = burn::module::Param::from_tensor(varied([37], 1, 1.0) + 1.0);
        norm.beta = Some(burn::module::Param::from_tensor(varied([37], 2, 1.0)));
        let x = varied([3, 5, 37], 3, 6.0) + 2.0;
        let ours = layer_norm(&norm, 1e-5, x.clone());
        ours.into_data()
            .assert_approx_eq::<f32>(&norm.forward(x).into_data(), Tolerance::absolute(1e-5));
    }

    #[test]
    fn attention_is_burns_with_padding_masked() {
        // Heads smaller than a block of outputs, and longer than one with a partial block.
        check_attention(7, 3, 5);
        check_attention(37, 2, 20);
    }

    /// Two sequences of `seq` tokens, the first's last key and the second's last two padding.
    fn check_attention(seq: usize, heads: usize, dim: usize) {
        let batch = 2;
        let width = heads * dim;
        let [query, key, value] = [1, 2, 3].map(|seed| varied([batch, seq, width], seed, 2.0));
        let mut padding = vec![false; batch * heads * seq * seq];
        for h in 0..heads {
            for i in 0..seq {
                padding[(h * seq + i) * seq + seq - 1] = true;
                for j in seq - 2..seq {
                    padding[((heads + h) * seq + i) * seq + j] = true;
                }
            }
        }
        let masked = Tensor::<Flex, 4, Bool>::from_data(
            TensorData::new(padding, [batch, heads, seq, seq]),
            &Default::default(),
        );
        let divisor = (dim as f32).sqrt();
        let ours = attention(
            query.clone(),
            key.clone(),
            value.clone(),
            heads,
            divisor,
            &masked,
        );

        let split = |x: Tensor<Flex, 3>| x.reshape([batch, seq, heads, dim]).swap_dims(1, 2);
        let scores = split(query).matmul(split(key).transpose()) / divisor;
        let probabilities = activation::softmax(scores.mask_fill(masked, f32::MIN), 3);
        let expected = probabilities
            .matmul(split(value))
            .swap_dims(1, 2)
            .reshape([batch, seq, width]);
        ours.into_data()
            .assert_approx_eq::<f32>(&expected.into_data(), Tolerance::absolute(1e-5));
    }
}
