//! Softmax over the last dimension. In the page (Flex compiled to WebAssembly) a loop of ours:
//! burn-flex's softmax calls libm's scalar `expf` there (4 % of the page's classifier time in
//! Chromium's profiler), while the loop's exp (`exp_non_positive`) has no branches or calls and
//! compiles to SIMD128. Natively burn-flex's own softmax, one fused SIMD pass, was faster than a
//! loop like this one (docs/src/benchmarks.md, tried and not kept), so natively it is
//! burn-flex's softmax; when training on `Autodiff<Flex>` it is one autodiff op (burn's autodiff
//! composes softmax of five tracked tensor operations, each a pass over the attention scores
//! forward and more backward) whose gradient is one pass, `y ⊙ (g − Σ g ⊙ y)` per row. Every
//! other backend uses burn's `softmax`.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, activation};

use super::activation::exp_non_positive;
use super::same_type;

/// Softmax of `x` over its last dimension.
pub fn softmax_last<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    if x.dtype() != burn::tensor::DType::F32 {
        return activation::softmax(x, D - 1);
    }
    let x: Box<dyn std::any::Any> = Box::new(x);
    #[cfg(target_arch = "wasm32")]
    let x = match x.downcast::<Tensor<burn::backend::Flex, D>>() {
        Ok(x) => return same_type(on_flex(*x)),
        Err(x) => x,
    };
    #[cfg(not(target_arch = "wasm32"))]
    let x = match x.downcast::<Tensor<burn::backend::Autodiff<burn::backend::Flex>, D>>() {
        Ok(x) => return same_type(training::softmax_last(*x, 1.0, None)),
        Err(x) => x,
    };
    activation::softmax(*x.downcast().expect("x is a Tensor<B, D>"), D - 1)
}

/// Attention's probabilities: the softmax over the last dimension of `scores / divisor` with
/// the `masked` positions at `f32::MIN` (so about 0 after it). On `Autodiff<Flex>` one autodiff
/// op: the division and the mask have no gradient steps of their own (passes over the scores).
pub fn masked_softmax_last<B: Backend, const D: usize>(
    scores: Tensor<B, D>,
    divisor: f64,
    masked: Tensor<B, D, Bool>,
) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    if scores.dtype() == burn::tensor::DType::F32 {
        type Ad = burn::backend::Autodiff<burn::backend::Flex>;
        let both: Box<dyn std::any::Any> = Box::new((scores, masked));
        return match both.downcast::<(Tensor<Ad, D>, Tensor<Ad, D, Bool>)>() {
            Ok(both) => {
                let (scores, masked) = *both;
                same_type(training::softmax_last(scores, divisor, Some(masked)))
            }
            Err(both) => {
                let (scores, masked) = *both
                    .downcast::<(Tensor<B, D>, Tensor<B, D, Bool>)>()
                    .expect("the pair built above");
                softmax_last((scores / divisor).mask_fill(masked, f32::MIN))
            }
        };
    }
    softmax_last((scores / divisor).mask_fill(masked, f32::MIN))
}

#[cfg(target_arch = "wasm32")]
fn on_flex<const D: usize>(x: Tensor<burn::backend::Flex, D>) -> Tensor<burn::backend::Flex, D> {
    let (device, dims) = (x.device(), x.dims());
    let mut values = x.into_data().into_vec::<f32>().expect("an f32 tensor");
    for row in values.chunks_exact_mut(dims[D - 1].max(1)) {
        softmax_in_place(row);
    }
    Tensor::from_data(burn::tensor::TensorData::new(values, dims), &device)
}

/// Replaces `row` with its softmax: `e^(x − max)` (so every exponent is ≤ 0), then divided by
/// their sum, in separate loops so that the exp's vectorises.
pub fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |max, &v| max.max(v));
    for value in row.iter_mut() {
        *value = exp_non_positive(*value - max);
    }
    let inverse = 1.0 / row.iter().sum::<f32>();
    for value in row.iter_mut() {
        *value *= inverse;
    }
}

/// `ln Σ e^x` over `values`, stably: `max + ln Σ e^(x − max)`, the exponentials summed in 16
/// lanes so that the loop vectorises (libm's scalar `exp` is a call per value). `x − ln Σ e^x`
/// is `x`'s log-probability. −∞ for no values.
pub fn log_sum_exp(values: &[f32]) -> f32 {
    const LANES: usize = 16;
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    let mut maxima = [f32::NEG_INFINITY; LANES];
    for chunk in chunks.clone() {
        for (max, &v) in maxima.iter_mut().zip(chunk) {
            *max = max.max(v);
        }
    }
    let max = rest
        .iter()
        .chain(&maxima)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sums = [0.0f32; LANES];
    for chunk in chunks {
        for (sum, &v) in sums.iter_mut().zip(chunk) {
            *sum += exp_non_positive(v - max);
        }
    }
    let rest: f32 = rest.iter().map(|&v| exp_non_positive(v - max)).sum();
    max + (sums.iter().sum::<f32>() + rest).ln()
}

/// Softmax with its gradient on `Autodiff<Flex>`: burn-flex's fused softmax forward, and a
/// backward step that keeps the output.
#[cfg(not(target_arch = "wasm32"))]
mod training {
    use std::borrow::Cow;

    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::flex::FlexTensor;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorPrimitive;
    use burn::tensor::ops::{
        ActivationOps, BoolTensor, BoolTensorOps, FloatTensor, FloatTensorOps,
    };

    use super::super::chunks::for_each_chunk_mut;
    use super::*;

    /// The backward step, knowing the divisor of the scores; its state is the softmax's output
    /// and the mask (at the scores' shape), whose positions get no gradient, as under burn's
    /// `mask_fill` (their output is 0 anyway, except in a row masked whole).
    #[derive(Debug)]
    struct SoftmaxStep(f32);

    impl Backward<Flex, 1> for SoftmaxStep {
        type State = (FloatTensor<Flex>, Option<BoolTensor<Flex>>);

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node);
            if let Some(parent) = &ops.parents[0] {
                let (output, masked) = ops.state;
                let masked = masked.as_ref().map(mask_values);
                let row = *output
                    .layout()
                    .shape()
                    .last()
                    .expect("a softmax has a last dimension");
                // Read where it is (the attention's product keeps it for its own gradient).
                let copy;
                let output = match output.as_slice::<f32>() {
                    Some(values) => values,
                    None => {
                        copy = output.clone().into_data();
                        copy.as_slice::<f32>().expect("an f32 softmax")
                    }
                };
                let mut grad = grad.into_data();
                softmax_gradient_in_place(
                    grad.as_mut_slice::<f32>().expect("an f32 gradient"),
                    output,
                    row,
                    self.0,
                    masked.as_deref(),
                );
                grads.register::<Flex>(parent.id, FlexTensor::from_data(grad));
            }
        }
    }

    /// Whether each element of `mask` is set (0 or 1), in row-major order: read where it is
    /// when it is stored that way a byte an element (the mask is shared by every layer), else
    /// copied.
    fn mask_values(mask: &BoolTensor<Flex>) -> Cow<'_, [u8]> {
        if mask.dtype().size() == 1
            && let Some((start, end)) = mask.layout().contiguous_offsets()
        {
            return Cow::Borrowed(&mask.bytes()[start..end]);
        }
        let values = mask.clone().into_data();
        Cow::Owned(values.iter::<bool>().map(u8::from).collect())
    }

    /// Softmax of `x / divisor` over its last dimension, `masked` positions at `f32::MIN`
    /// first, recording [`SoftmaxStep`] when `x` needs its gradient.
    pub fn softmax_last<const D: usize>(
        x: Tensor<Autodiff<Flex>, D>,
        divisor: f64,
        masked: Option<Tensor<Autodiff<Flex>, D, Bool>>,
    ) -> Tensor<Autodiff<Flex>, D> {
        let shape = x.shape();
        let x = x.into_primitive().tensor();
        let masked = masked.map(|masked| Flex::bool_expand(masked.into_primitive(), shape));
        let forward = |input: FloatTensor<Flex>, masked: Option<BoolTensor<Flex>>| {
            let mut input = input;
            if divisor != 1.0 {
                input = Flex::float_div_scalar(input, divisor.into());
            }
            if let Some(masked) = masked {
                input = Flex::float_mask_fill(input, masked, f32::MIN.into());
            }
            Flex::softmax(input, D - 1)
        };
        let output = match SoftmaxStep(divisor as f32)
            .prepare::<NoCheckpointing>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let output = forward(x.primitive, masked.clone());
                prep.finish((output.clone(), masked), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(x.primitive, masked)),
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }

    /// Replaces `grad` (the gradient of softmax output `output`, rows of `row` values) with the
    /// gradient of its input, the scores before their division by `divisor`: per row,
    /// `y ⊙ (g − Σ g ⊙ y) / divisor`, and 0 where `masked` (the scores' shape) is true.
    pub(super) fn softmax_gradient_in_place(
        grad: &mut [f32],
        output: &[f32],
        row: usize,
        divisor: f32,
        masked: Option<&[u8]>,
    ) {
        let chunk = row * ((1 << 14) / row.max(1) + 1);
        for_each_chunk_mut(grad, chunk, |i, grad| {
            let output = &output[i * chunk..];
            for (g, y) in grad.chunks_exact_mut(row).zip(output.chunks_exact(row)) {
                let dot: f32 = g.iter().zip(y).map(|(g, y)| g * y).sum();
                for (g, &y) in g.iter_mut().zip(y) {
                    *g = y * (*g - dot) / divisor;
                }
            }
            if let Some(masked) = masked {
                let masked = &masked[i * chunk..][..grad.len()];
                for (g, &masked) in grad.iter_mut().zip(masked) {
                    if masked != 0 {
                        *g = 0.0;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{Bool, TensorData, Tolerance};

    #[test]
    fn log_sum_exp_matches_f64_over_a_vocabulary_with_ruled_out_tokens() {
        let reference = |values: &[f32]| {
            let max = values
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let sum: f64 = values.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            max + sum.ln()
        };
        let vocabulary: Vec<f32> = (0..8_003)
            .map(|i| match i % 97 {
                0 => f32::NEG_INFINITY,
                k => ((i * 7_919) % 2_003) as f32 * 0.01 - 12.0 + k as f32 * 1e-3,
            })
            .collect();
        for values in [
            &vocabulary[..],
            &vocabulary[..5],
            &[3.0],
            &[-1e3, 40.0, 39.5],
        ] {
            let ours = f64::from(log_sum_exp(values));
            let expected = reference(values);
            assert!(
                (ours - expected).abs() < 2e-6 * expected.abs().max(1.0),
                "{ours} {expected}"
            );
        }
        assert_eq!(log_sum_exp(&[]), f32::NEG_INFINITY);
    }

    #[test]
    fn matches_burns_softmax_with_masked_and_extreme_scores() {
        let rows = [
            vec![0.5, -1.25, 3.0, 0.0, 2.5],
            vec![f32::MIN, 1.0, f32::MIN, -2.0, 0.25],
            vec![-80.0, 40.0, 39.0, -1e3, 12.0],
            vec![7.0; 5],
        ];
        let values: Vec<f32> = rows.concat();
        let device = Default::default();
        let expected = activation::softmax(
            Tensor::<Flex, 2>::from_data(TensorData::new(values.clone(), [4, 5]), &device),
            1,
        )
        .into_data()
        .into_vec::<f32>()
        .unwrap();
        let mut ours = values;
        for row in ours.chunks_exact_mut(5) {
            softmax_in_place(row);
        }
        for (a, b) in ours.iter().zip(&expected) {
            assert!(
                (a - b).abs() <= 1e-6 * b.max(1e-30) + 1e-37,
                "{ours:?} against {expected:?}"
            );
        }
        assert!(ours[5] < 1e-37, "a masked score's share is ~0: {}", ours[5]);
    }

    #[test]
    fn autodiff_flex_takes_one_op_with_burns_values_and_gradient() {
        type Ad = burn::backend::Autodiff<Flex>;
        let device = Default::default();
        let values: Vec<f32> = (0..2 * 3 * 37)
            .map(|i| ((i * 29) % 41) as f32 * 0.3 - 6.0)
            .collect();
        let weights: Vec<f32> = (0..2 * 3 * 37)
            .map(|i| ((i * 7) % 13) as f32 - 6.0)
            .collect();
        let weights = Tensor::<Ad, 3>::from_data(TensorData::new(weights, [2, 3, 37]), &device);
        let run = |ours: bool| {
            let x =
                Tensor::<Ad, 3>::from_data(TensorData::new(values.clone(), [2, 3, 37]), &device)
                    .require_grad();
            let y = if ours {
                softmax_last(x.clone())
            } else {
                activation::softmax(x.clone(), 2)
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let grad = x.grad(&grads).expect("x requires its gradient").into_data();
            (y.into_data(), grad)
        };
        let ((ours, our_grad), (burns, burns_grad)) = (run(true), run(false));
        ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(1e-6));
        our_grad.assert_approx_eq::<f32>(&burns_grad, Tolerance::absolute(2e-5));
        assert_ne!(our_grad, burns_grad, "burn's composed softmax ran");
        let grad = our_grad.into_vec::<f32>().unwrap();
        for row in grad.chunks(37) {
            // The gradient of a softmax's input sums to zero over each row.
            assert!(row.iter().sum::<f32>().abs() < 1e-4, "{row:?}");
        }
    }

    /// Attention's scaled and masked softmax: values and gradient as burn's division, mask and
    /// softmax give them (masked positions: a zero gradient).
    #[test]
    fn masked_softmax_on_autodiff_flex_gives_burns_values_and_gradient() {
        type Ad = burn::backend::Autodiff<Flex>;
        let device = Default::default();
        let shape = [2, 3, 37];
        let count = 2 * 3 * 37;
        let values: Vec<f32> = (0..count)
            .map(|i| ((i * 29) % 41) as f32 * 0.7 - 14.0)
            .collect();
        let weights: Vec<f32> = (0..count).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let mask: Vec<bool> = (0..count).map(|i| i % 37 >= 30 || i % 5 == 3).collect();
        let weights = Tensor::<Ad, 3>::from_data(TensorData::new(weights, shape), &device);
        let mask = Tensor::<Ad, 3, Bool>::from_data(TensorData::new(mask, shape), &device);
        let run = |ours: bool| {
            let x = Tensor::<Ad, 3>::from_data(TensorData::new(values.clone(), shape), &device)
                .require_grad();
            let y = if ours {
                masked_softmax_last(x.clone(), 5.5, mask.clone())
            } else {
                activation::softmax((x.clone() / 5.5).mask_fill(mask.clone(), f32::MIN), 2)
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let grad = x.grad(&grads).expect("x requires its gradient").into_data();
            (y.into_data(), grad)
        };
        let ((ours, our_grad), (burns, burns_grad)) = (run(true), run(false));
        ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(1e-6));
        our_grad.assert_approx_eq::<f32>(&burns_grad, Tolerance::absolute(1e-5));
        assert_ne!(our_grad, burns_grad, "burn's composed ops ran");
        let masked = mask.into_data().into_vec::<bool>().unwrap();
        for (g, masked) in our_grad.into_vec::<f32>().unwrap().iter().zip(masked) {
            assert!(!masked || *g == 0.0, "a masked score has no gradient: {g}");
        }
    }
}
