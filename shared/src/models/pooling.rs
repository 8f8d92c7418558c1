//! Sentence-transformers pooling: masked mean over tokens, then L2 normalisation.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::ops::products::batched_matmul;

/// Mean of the hidden states of real (unmasked) tokens: `[batch, seq, hidden]` → `[batch, hidden]`.
pub fn mean_pool<B: Backend>(hidden: Tensor<B, 3>, attention_mask: &Tensor<B, 2>) -> Tensor<B, 2> {
    let counts = attention_mask.clone().sum_dim(1).clamp_min(1e-9);
    weighted_sum(hidden, attention_mask.clone() / counts)
}

/// `Σ_t weights[b, t] · states[b, t, :]`: `[batch, seq, d]` and `[batch, seq]` → `[batch, d]`, as
/// one `[1, seq] · [seq, d]` product a row (our batched products on burn's CPU backend, with
/// their gradients). A broadcast product summed over `seq` is, on that backend, a strided pass
/// forward and two more backward, all on one thread: 9 % of the samples of the Dis-AE's training
/// thread in `perf`.
pub fn weighted_sum<B: Backend>(states: Tensor<B, 3>, weights: Tensor<B, 2>) -> Tensor<B, 2> {
    let [batch, seq, d] = states.dims();
    batched_matmul(
        weights.reshape([1, batch, 1, seq]),
        states.reshape([1, batch, seq, d]),
    )
    .reshape([batch, d])
}

/// Divides each row by its L2 norm (with torch's `F.normalize` epsilon of 1e-12).
pub fn l2_normalize<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}
