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
/// One fused op when training on burn's CPU backend ([`crate::ops::token_nll`]).
pub fn token_nll<B: Backend>(logits: Tensor<B, 3>, labels: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    #[cfg(not(target_arch = "wasm32"))]
    let (logits, labels) = {
        type Ad = burn::backend::Autodiff<burn::backend::Flex>;
        let pair: Box<dyn std::any::Any> = Box::new((logits, labels));
        match pair.downcast::<(Tensor<Ad, 3>, Tensor<Ad, 2, Int>)>() {
            Ok(pair) if pair.0.dtype() == burn::tensor::DType::F32 => {
                let (logits, labels) = *pair;
                return crate::ops::same_type(crate::ops::token_nll::token_nll(logits, labels));
            }
            Ok(pair) => crate::ops::same_type(*pair),
            Err(pair) => *pair
                .downcast::<(Tensor<B, 3>, Tensor<B, 2, Int>)>()
                .expect("the pair built above"),
        }
    };
    let [rows, steps, _] = logits.dims();
    let label_logits = logits
        .clone()
        .gather(2, labels.reshape([rows, steps, 1]))
        .squeeze_dim(2);
    log_sum_exp(logits) - label_logits
}
