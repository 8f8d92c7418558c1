//! Each position's negative log-likelihood of its label under logits over a vocabulary, as one
//! autodiff op on `Autodiff<Flex>`.
//!
//! Composed of burn ops (max, subtract, exp, sum, log, gather), a T5 training step makes about
//! ten passes over its `[rows, steps, vocab]` logits forward and backward (40 MB for a batch of
//! 32 with T5's 32k vocabulary), with libm's scalar `expf`: in `perf`, copies, fills and `expf`
//! were 15 % of a pretraining step on AVX-512. Here the forward is one pass per row (its
//! log-sum-exp with a vectorised exp, less the label's logit) and the backward one more,
//! `g · (softmax − one-hot)` written over the logits' own buffer when nothing else holds it.
//! The models call it through [`crate::models::sequence_loss::token_nll`].

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Autodiff, Flex};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use super::activation::exp_non_positive;
use super::chunks::for_each_chunk_mut;

/// The backward step; its state is the logits, each row's log-sum-exp and label.
#[derive(Debug)]
struct TokenNllStep;

impl Backward<Flex, 1> for TokenNllStep {
    type State = (FloatTensor<Flex>, Vec<f32>, Vec<usize>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = &ops.parents[0] {
            let (logits, log_sums, labels) = ops.state;
            let shape = logits.layout().shape().clone();
            let grad = grad.into_data();
            let mut logits = logits.into_data();
            gradient_in_place(
                logits.as_mut_slice::<f32>().expect("f32 logits"),
                grad.as_slice::<f32>().expect("an f32 gradient"),
                &log_sums,
                &labels,
            );
            let data = TensorData::new(logits.into_vec::<f32>().expect("f32"), shape);
            grads.register::<Flex>(parent.id, FlexTensor::from_data(data));
        }
    }
}

/// `−log softmax(logits)[label]` at every position: logits `[rows, steps, vocab]`, labels
/// `[rows, steps]` (each below `vocab`), recording [`TokenNllStep`] when the logits need their
/// gradient.
pub fn token_nll(
    logits: Tensor<Autodiff<Flex>, 3>,
    labels: Tensor<Autodiff<Flex>, 2, Int>,
) -> Tensor<Autodiff<Flex>, 2> {
    let [rows, steps, vocab] = logits.dims();
    let labels: Vec<usize> = labels
        .into_data()
        .iter::<i64>()
        .map(|label| {
            assert!(
                (0..vocab as i64).contains(&label),
                "label {label} outside a vocabulary of {vocab}"
            );
            label as usize
        })
        .collect();
    let logits = logits.into_primitive().tensor();
    // Read where they are when contiguous (the backward step then owns the only copy).
    let copy;
    let values = match logits.primitive.as_slice::<f32>() {
        Some(values) => values,
        None => {
            copy = logits.primitive.clone().into_data();
            copy.as_slice::<f32>().expect("f32 logits")
        }
    };
    let (nll, log_sums) = forward(values, &labels, vocab);
    let nll = FlexTensor::from_data(TensorData::new(nll, [rows, steps]));
    let output = match TokenNllStep
        .prepare::<NoCheckpointing>([logits.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((logits.primitive, log_sums, labels), nll),
        OpsKind::UnTracked(prep) => prep.finish(nll),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

/// Each row's `log Σ exp − logit[label]` and its log-sum-exp, over rows of `vocab` logits.
fn forward(logits: &[f32], labels: &[usize], vocab: usize) -> (Vec<f32>, Vec<f32>) {
    let mut log_sums = vec![0.0f32; labels.len()];
    let rows_per_task = ROWS_PER_TASK_VALUES / vocab.max(1) + 1;
    for_each_chunk_mut(&mut log_sums, rows_per_task, |i, log_sums| {
        let first = i * rows_per_task;
        for (k, log_sum) in log_sums.iter_mut().enumerate() {
            let row = &logits[(first + k) * vocab..][..vocab];
            let max = row.iter().fold(f32::NEG_INFINITY, |max, &v| max.max(v));
            // As burn's ops would: NaN for a NaN or +∞ logit (`f32::max` and the exp skip them).
            if max == f32::INFINITY || row.iter().any(|v| v.is_nan()) {
                *log_sum = f32::NAN;
                continue;
            }
            let sum: f32 = row.iter().map(|&v| exp_non_positive(v - max)).sum();
            *log_sum = sum.ln() + max;
        }
    });
    let nll = log_sums
        .iter()
        .zip(labels)
        .enumerate()
        .map(|(row, (log_sum, &label))| log_sum - logits[row * vocab + label])
        .collect();
    (nll, log_sums)
}

/// Replaces `logits` (rows of the vocabulary) with their gradient,
/// `grad[row] · (e^(logit − log_sum[row]) − [index = label[row]])`.
fn gradient_in_place(logits: &mut [f32], grad: &[f32], log_sums: &[f32], labels: &[usize]) {
    let vocab = logits.len() / labels.len().max(1);
    let rows_per_task = ROWS_PER_TASK_VALUES / vocab.max(1) + 1;
    for_each_chunk_mut(logits, rows_per_task * vocab, |i, chunk| {
        let first = i * rows_per_task;
        for (k, row) in chunk.chunks_exact_mut(vocab).enumerate() {
            let (g, log_sum) = (grad[first + k], log_sums[first + k]);
            for value in row.iter_mut() {
                *value = g * exp_non_positive(*value - log_sum);
            }
            row[labels[first + k]] -= g;
        }
    });
}

/// About how many logits each rayon task takes.
const ROWS_PER_TASK_VALUES: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use burn::tensor::Tolerance;

    use super::*;
    use crate::models::sequence_loss::{log_sum_exp, token_nll};

    #[test]
    fn values_and_gradient_are_burns_composed_ones() {
        type Ad = Autodiff<Flex>;
        let device = Default::default();
        let (rows, steps, vocab) = (3, 5, 301);
        let values: Vec<f32> = (0..rows * steps * vocab)
            .map(|i| ((i * 37) % 101) as f32 * 0.13 - 6.0)
            .collect();
        let labels: Vec<i64> = (0..rows * steps).map(|i| (i * 53 % vocab) as i64).collect();
        let weights = Tensor::<Ad, 2>::from_data(
            TensorData::new(
                (0..rows * steps).map(|i| i as f32 - 4.0).collect(),
                [rows, steps],
            ),
            &device,
        );
        // Stored steps-first and read through swapped dimensions, so that our op copies them.
        let run = |ours: bool, swapped: bool| {
            let logits = if swapped {
                let mut stored = vec![0.0; values.len()];
                for (i, row) in values.chunks(vocab).enumerate() {
                    let (r, t) = (i / steps, i % steps);
                    stored[(t * rows + r) * vocab..][..vocab].copy_from_slice(row);
                }
                Tensor::<Ad, 3>::from_data(TensorData::new(stored, [steps, rows, vocab]), &device)
                    .require_grad()
            } else {
                Tensor::<Ad, 3>::from_data(
                    TensorData::new(values.clone(), [rows, steps, vocab]),
                    &device,
                )
                .require_grad()
            };
            let leaf = logits.clone();
            let logits = if swapped {
                logits.swap_dims(0, 1)
            } else {
                logits
            };
            let labels = Tensor::<Ad, 2, Int>::from_data(
                TensorData::new(labels.clone(), [rows, steps]),
                &device,
            );
            let nll = if ours {
                token_nll(logits.clone(), labels)
            } else {
                let picked = logits
                    .clone()
                    .gather(2, labels.reshape([rows, steps, 1]))
                    .squeeze_dim(2);
                log_sum_exp(logits.clone()) - picked
            };
            let grads = (nll.clone() * weights.clone()).sum().backward();
            let grad = leaf.grad(&grads).expect("logits need their gradient");
            let grad = if swapped { grad.swap_dims(0, 1) } else { grad };
            (nll.into_data(), grad.into_data())
        };
        let (burns, burns_grad) = run(false, false);
        for swapped in [false, true] {
            let (ours, our_grad) = run(true, swapped);
            ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(2e-5));
            our_grad.assert_approx_eq::<f32>(&burns_grad, Tolerance::absolute(2e-6));
            assert_ne!(our_grad, burns_grad, "burn's composed ops ran");
            // Each row's gradient sums to zero (softmax minus a one-hot, scaled).
            for row in our_grad.into_vec::<f32>().unwrap().chunks(vocab) {
                assert!(row.iter().sum::<f32>().abs() < 1e-4);
            }
        }
    }

    #[test]
    fn a_nan_or_infinite_logit_gives_nan_as_burns_ops_do() {
        let device = Default::default();
        let mut values = vec![0.5f32; 2 * 4];
        values[1] = f32::NAN;
        values[6] = f32::INFINITY;
        let logits =
            Tensor::<Autodiff<Flex>, 3>::from_data(TensorData::new(values, [1, 2, 4]), &device);
        let labels = Tensor::<Autodiff<Flex>, 2, Int>::from_data(
            TensorData::new(vec![0i64, 0], [1, 2]),
            &device,
        );
        let nll = token_nll(logits, labels)
            .into_data()
            .into_vec::<f32>()
            .unwrap();
        assert!(nll.iter().all(|v| v.is_nan()), "{nll:?}");
    }
}
