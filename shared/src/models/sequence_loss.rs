//! Token-level pieces of the sequence models' losses (T5, the Dis-AE), computed stably from
//! log-sum-exps.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// `log Σ exp(x)` over the last dimension, `[rows, steps]`.
pub fn log_sum_exp<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 2> {
    let max = x.clone().max_dim(2).detach();
    let summed = (x - max.clone()).exp().sum_dim(2);
    (summed.log() + max).squeeze_dim(2)
}

/// `−log p(label)` at every position: logits `[rows, steps, vocab]`, labels `[rows, steps]`.
pub fn token_nll<B: Backend>(logits: Tensor<B, 3>, labels: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let [rows, steps, _] = logits.dims();
    let label_logits = logits
        .clone()
        .gather(2, labels.reshape([rows, steps, 1]))
        .squeeze_dim(2);
    log_sum_exp(logits) - label_logits
}
