//! Sentence-transformers pooling: masked mean over tokens, then L2 normalisation.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Mean of the hidden states of real (unmasked) tokens: `[batch, seq, hidden]` → `[batch, hidden]`.
pub fn mean_pool<B: Backend>(hidden: Tensor<B, 3>, attention_mask: &Tensor<B, 2>) -> Tensor<B, 2> {
    let [batch, seq, _] = hidden.dims();
    let mask = attention_mask.clone().reshape([batch, seq, 1]);
    let summed = (hidden * mask.clone()).sum_dim(1).squeeze_dim(1);
    let counts = mask.sum_dim(1).squeeze_dim(1).clamp_min(1e-9);
    summed / counts
}

/// Divides each row by its L2 norm (with torch's `F.normalize` epsilon of 1e-12).
pub fn l2_normalize<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}
