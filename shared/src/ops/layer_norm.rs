//! LayerNorm over the last dimension, as burn's `LayerNorm` module computes it.
//!
//! burn-flex normalises in one fused pass, but under autodiff burn composes LayerNorm of about ten
//! tracked tensor operations (mean, centre, variance, square root, divide, scale, shift), each a
//! pass over the activations forward and more backward. On `Autodiff<Flex>` it is one autodiff
//! op here: burn-flex's fused forward, and a backward step that recomputes each row's mean and
//! deviation and gives all three gradients in one pass per row. Every other backend, and a
//! LayerNorm without a shift, uses burn's module.

use burn::nn::LayerNorm;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// `norm` applied to `x`; `epsilon` is the one `norm` was made with (burn keeps it private).
pub fn layer_norm<B: Backend, const D: usize>(
    norm: &LayerNorm<B>,
    epsilon: f64,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    if x.dtype() == burn::tensor::DType::F32 && norm.beta.is_some() {
        use super::same_type;
        use burn::backend::{Autodiff, Flex};
        let on_flex = (norm as &dyn std::any::Any).downcast_ref::<LayerNorm<Autodiff<Flex>>>();
        if let Some(norm) = on_flex {
            let x: Tensor<Autodiff<Flex>, D> = same_type(x);
            return same_type(training::layer_norm(norm, epsilon, x));
        }
    }
    #[cfg(target_arch = "wasm32")]
    let _ = epsilon; // the page has no autodiff op to give it to
    norm.forward(x)
}

#[cfg(not(target_arch = "wasm32"))]
mod training {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::flex::FlexTensor;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::ops::{FloatTensor, ModuleOps};
    use burn::tensor::{TensorData, TensorPrimitive};
    use rayon::prelude::*;

    use super::*;

    /// The backward step; its state is the input, the scale and epsilon.
    #[derive(Debug)]
    struct LayerNormStep;

    impl Backward<Flex, 3> for LayerNormStep {
        type State = (FloatTensor<Flex>, FloatTensor<Flex>, f64);

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node);
            let (x, gamma, epsilon) = ops.state;
            let [x_parent, gamma_parent, beta_parent] = &ops.parents;
            let width = *x
                .layout()
                .shape()
                .last()
                .expect("LayerNorm has a last dimension");
            let shape = x.layout().shape().clone();
            let (x, gamma) = (x.into_data(), gamma.into_data());
            let mut grad = grad.into_data();
            let (d_gamma, d_beta) = gradients_in_place(
                grad.as_mut_slice::<f32>().expect("an f32 gradient"),
                x.as_slice::<f32>().expect("an f32 input"),
                gamma.as_slice::<f32>().expect("an f32 scale"),
                width,
                epsilon as f32,
            );
            if let Some(parent) = x_parent {
                let data = TensorData::new(grad.into_vec::<f32>().expect("f32"), shape);
                grads.register::<Flex>(parent.id, FlexTensor::from_data(data));
            }
            for (parent, values) in [(gamma_parent, d_gamma), (beta_parent, d_beta)] {
                if let Some(parent) = parent {
                    let data = TensorData::new(values, [width]);
                    grads.register::<Flex>(parent.id, FlexTensor::from_data(data));
                }
            }
        }
    }

    /// Replaces `grad` (the output's gradient, rows of `width`) with the input's and returns the
    /// scale's and the shift's: with `x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)` and `h = g ⊙ γ`,
    /// `dx = r·(h − mean(h) − x̂·mean(h ⊙ x̂))`, `dγ = Σ g ⊙ x̂`, `dβ = Σ g` over the rows.
    /// The mean and variance are recomputed in two passes (burn-flex's forward takes
    /// `E[x²] − μ²`; for LayerNorm's inputs the two agree to f32's rounding).
    pub(super) fn gradients_in_place(
        grad: &mut [f32],
        x: &[f32],
        gamma: &[f32],
        width: usize,
        epsilon: f32,
    ) -> (Vec<f32>, Vec<f32>) {
        let rows_per_task = (1 << 14) / width.max(1) + 1;
        let chunk = rows_per_task * width;
        let zeros = || (vec![0.0f32; width], vec![0.0f32; width]);
        grad.par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .map(|(grad, x)| {
                let (mut d_gamma, mut d_beta) = zeros();
                for (g, x) in grad.chunks_exact_mut(width).zip(x.chunks_exact(width)) {
                    let mean = x.iter().sum::<f32>() / width as f32;
                    let variance =
                        x.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / width as f32;
                    let r = 1.0 / (variance + epsilon).sqrt();
                    let (mut sum_h, mut sum_hx) = (0.0f32, 0.0f32);
                    for j in 0..width {
                        let normalised = (x[j] - mean) * r;
                        let h = g[j] * gamma[j];
                        sum_h += h;
                        sum_hx += h * normalised;
                        d_gamma[j] += g[j] * normalised;
                        d_beta[j] += g[j];
                    }
                    let (mean_h, mean_hx) = (sum_h / width as f32, sum_hx / width as f32);
                    for j in 0..width {
                        let normalised = (x[j] - mean) * r;
                        g[j] = r * (g[j] * gamma[j] - mean_h - normalised * mean_hx);
                    }
                }
                (d_gamma, d_beta)
            })
            // In order, so that the sums do not depend on how rayon split the work.
            .collect::<Vec<_>>()
            .into_iter()
            .fold(zeros(), |(mut d_gamma, mut d_beta), (gamma, beta)| {
                for (sum, part) in d_gamma.iter_mut().zip(gamma) {
                    *sum += part;
                }
                for (sum, part) in d_beta.iter_mut().zip(beta) {
                    *sum += part;
                }
                (d_gamma, d_beta)
            })
    }

    /// `norm` (with a shift) of `x`, recording [`LayerNormStep`] when anything needs a gradient.
    pub fn layer_norm<const D: usize>(
        norm: &LayerNorm<Autodiff<Flex>>,
        epsilon: f64,
        x: Tensor<Autodiff<Flex>, D>,
    ) -> Tensor<Autodiff<Flex>, D> {
        let x = x.into_primitive().tensor();
        let gamma = norm.gamma.val().into_primitive().tensor();
        let beta = norm.beta.as_ref().expect("a shift (checked by the caller)");
        let beta = beta.val().into_primitive().tensor();
        let forward = |x, gamma, beta| Flex::layer_norm(x, gamma, Some(beta), epsilon);
        let output = match LayerNormStep
            .prepare::<NoCheckpointing>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let state = (x.primitive.clone(), gamma.primitive.clone(), epsilon);
                prep.finish(state, forward(x.primitive, gamma.primitive, beta.primitive))
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(forward(x.primitive, gamma.primitive, beta.primitive))
            }
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::module::Param;
    use burn::nn::LayerNormConfig;
    use burn::tensor::{TensorData, Tolerance};

    use crate::random::SplitMix64;

    type Ad = Autodiff<Flex>;

    fn varied<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<Ad, D> {
        let values = SplitMix64(seed).centred_f32s(shape.iter().product(), 4.0);
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    /// Values and all three gradients against burn's composed LayerNorm, through a 3-d input of
    /// more rows than one task's.
    #[test]
    fn autodiff_flex_takes_one_op_with_burns_values_and_gradients() {
        let epsilon = 1e-5;
        let mut norm = LayerNormConfig::new(48)
            .with_epsilon(epsilon)
            .init::<Ad>(&Default::default());
        norm.gamma = Param::from_tensor(varied([48], 1) + 1.5);
        norm.beta = Some(Param::from_tensor(varied([48], 2)));
        let weights = varied([4, 100, 48], 3);
        let run = |ours: bool| {
            let x = varied([4, 100, 48], 4).require_grad();
            let y = if ours {
                layer_norm(&norm, epsilon, x.clone())
            } else {
                norm.forward(x.clone())
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let grad = |t: Option<Tensor<Flex, 1>>| t.expect("a gradient").into_data();
            let beta = norm.beta.as_ref().unwrap().val();
            (
                y.into_data(),
                x.grad(&grads).expect("x's gradient").into_data(),
                grad(norm.gamma.val().grad(&grads)),
                grad(beta.grad(&grads)),
            )
        };
        let (ours, burns) = (run(true), run(false));
        ours.0
            .assert_approx_eq::<f32>(&burns.0, Tolerance::absolute(2e-5));
        // The scale's and shift's gradients sum 400 rows (up to about 200): relative.
        let tolerance = Tolerance::rel_abs(1e-5, 1e-4);
        ours.1.assert_approx_eq::<f32>(&burns.1, tolerance);
        ours.2.assert_approx_eq::<f32>(&burns.2, tolerance);
        ours.3.assert_approx_eq::<f32>(&burns.3, tolerance);
        assert_ne!(ours.1, burns.1, "burn's composed LayerNorm ran");
    }
}
