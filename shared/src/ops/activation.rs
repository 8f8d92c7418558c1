//! Activations as loops: GELU, `0.5·x·(1 + erf(x/√2))` (Hugging Face's "gelu"), with an erf the
//! compiler vectorises; its tanh approximation `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
//! (Hugging Face's "gelu_new", T5 v1.1's gated-GELU); and tanh itself (the Dis-AE's attended
//! states and initial state).
//!
//! burn's CPU backend (Flex) evaluates erf (and, for the gradient, exp) one value at a time with
//! libm, on one thread: `perf` put erf at 9.5 % of MiniLM's encoding and 7.8 % of its fine-tuning
//! on an AVX2 machine; composed of burn ops, the tanh form's `powf`, `tanhf` and `expm1f` took
//! 12 % of a T5 training step on AVX-512, and burn's tanh recomputes `tanhf` for its gradient.
//! On Flex, with or without autodiff, these activations and their gradients take the loops here
//! instead: an erf without branches, tables or libm calls (Abramowitz & Stegun 7.1.28), a tanh
//! and an exp of the same kind, which compile to AVX2 natively and SIMD128 in the page, in chunks
//! on rayon's threads. The erf GELU is within 9e-7 of the exact one for every f32 input
//! (PyTorch's own f32 GELU: 4e-7). Every other backend uses burn's ops.

use std::any::Any;

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive, activation};

use super::chunks::for_each_chunk_mut;
use super::same_type;

/// An activation the loops here compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// The exact GELU (erf).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
    Tanh,
}

impl Activation {
    #[inline(always)]
    fn value(self, x: f32) -> f32 {
        match self {
            Self::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
            Self::GeluTanh => 0.5 * x * (1.0 + tanh_f32(tanh_argument(x))),
            Self::Tanh => tanh_f32(x),
        }
    }

    /// The derivative at `x`: `Φ(x) + x·φ(x)` for GELU; for its tanh form, with `t = tanh(u)`,
    /// `0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²)`; `1 − tanh²(x)` for tanh.
    #[inline(always)]
    fn derivative(self, x: f32) -> f32 {
        match self {
            Self::Gelu => {
                const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
                let cdf = 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
                cdf + x * FRAC_1_SQRT_2PI * exp_non_positive(-0.5 * x * x)
            }
            Self::GeluTanh => {
                // t = tanh(u) and 1 − t² = 4e/(1 + e)² from e = e^(−2|u|), which does not cancel
                // as 1 − t·t does where t is near ±1.
                let u = tanh_argument(x);
                let e = exp_non_positive(-2.0 * u.abs());
                let t = ((1.0 - e) / (1.0 + e)).copysign(u);
                let sech2 = 4.0 * e / ((1.0 + e) * (1.0 + e));
                0.5 * (1.0 + t)
                    + 0.5 * x * sech2 * SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * x * x)
            }
            Self::Tanh => {
                let e = exp_non_positive(-2.0 * x.abs());
                4.0 * e / ((1.0 + e) * (1.0 + e))
            }
        }
    }

    /// burn's ops for this activation (the path of every backend but Flex).
    fn by_burn<B: Backend, const D: usize>(self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Gelu => activation::gelu(x),
            Self::Tanh => activation::tanh(x),
            Self::GeluTanh => {
                let inner = (x.clone() + x.clone() * x.clone() * x.clone() * TANH_CUBIC as f64)
                    * SQRT_2_OVER_PI as f64;
                x * (inner.tanh() + 1.0) * 0.5
            }
        }
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const TANH_CUBIC: f32 = 0.044_715;

#[inline(always)]
fn tanh_argument(x: f32) -> f32 {
    SQRT_2_OVER_PI * (x + TANH_CUBIC * x * x * x)
}

/// GELU (erf) of every element: the vectorised loops for f32 tensors on Flex (and, natively,
/// `Autodiff<Flex>`), burn's `gelu` otherwise.
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Gelu)
}

/// tanh of every element, as [`gelu`].
pub fn tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Tanh)
}

/// `form` of every element, on the loops here where the tensor is on Flex.
pub fn activate<B: Backend, const D: usize>(x: Tensor<B, D>, form: Activation) -> Tensor<B, D> {
    if x.dtype() != DType::F32 {
        return form.by_burn(x);
    }
    let x: Box<dyn Any> = Box::new(x);
    let x = match x.downcast::<Tensor<Flex, D>>() {
        Ok(x) => return same_type(on_flex(*x, form)),
        Err(x) => x,
    };
    #[cfg(not(target_arch = "wasm32"))]
    let x = match x.downcast::<Tensor<burn::backend::Autodiff<Flex>, D>>() {
        Ok(x) => return same_type(training::activate(*x, form)),
        Err(x) => x,
    };
    form.by_burn(*x.downcast::<Tensor<B, D>>().expect("x is a Tensor<B, D>"))
}

/// GELU of a Flex tensor: in place when it holds its data alone (`into_data` then takes the
/// buffer without copying), else into a new buffer read straight from the shared one (training
/// keeps the input for the gradient, and `into_data` would copy it twice first).
fn on_flex<const D: usize>(x: Tensor<Flex, D>, form: Activation) -> Tensor<Flex, D> {
    let device = x.device();
    let dims = x.dims();
    let input = x.into_primitive().tensor();
    if !input.is_unique()
        && let Some(values) = input.as_slice::<f32>()
    {
        let mut output = vec![0.0; values.len()];
        for_each_chunk_mut(&mut output, CHUNK, |i, output| {
            for (out, &value) in output.iter_mut().zip(&values[i * CHUNK..]) {
                *out = form.value(value);
            }
        });
        return Tensor::from_data(TensorData::new(output, dims), &device);
    }
    let mut data = Tensor::<Flex, D>::from_primitive(TensorPrimitive::Float(input)).into_data();
    activate_in_place(f32_values(&mut data), form);
    Tensor::from_data(data, &device)
}

fn f32_values(data: &mut TensorData) -> &mut [f32] {
    data.as_mut_slice::<f32>()
        .expect("an f32 tensor holds f32 values")
}

/// GELU with its gradient on `Autodiff<Flex>`: burn's autodiff op API with the loops above.
#[cfg(not(target_arch = "wasm32"))]
mod training {
    use burn::backend::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::flex::FlexTensor;
    use burn::tensor::ops::FloatTensor;

    use super::*;

    /// The backward step of an activation; its state is the activation's input.
    #[derive(Debug)]
    struct ActivationStep(Activation);

    impl Backward<Flex, 1> for ActivationStep {
        type State = FloatTensor<Flex>;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node);
            if let Some(parent) = &ops.parents[0] {
                let input = ops.state.into_data();
                let mut grad = grad.into_data();
                gradient_in_place(
                    f32_values(&mut grad),
                    input
                        .as_slice::<f32>()
                        .expect("an f32 tensor holds f32 values"),
                    self.0,
                );
                grads.register::<Flex>(parent.id, FlexTensor::from_data(grad));
            }
        }
    }

    /// `form` of `x`, recording [`ActivationStep`] when `x` needs its gradient.
    pub fn activate<const D: usize>(
        x: Tensor<Autodiff<Flex>, D>,
        form: Activation,
    ) -> Tensor<Autodiff<Flex>, D> {
        let x = x.into_primitive().tensor();
        let forward = |input: FloatTensor<Flex>| {
            let input = Tensor::<Flex, D>::from_primitive(TensorPrimitive::Float(input));
            on_flex(input, form).into_primitive().tensor()
        };
        let output = match ActivationStep(form)
            .prepare::<NoCheckpointing>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(x.primitive.clone(), forward(x.primitive)),
            OpsKind::UnTracked(prep) => prep.finish(forward(x.primitive)),
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }
}

/// Replaces every value `x` with `form` of it.
pub fn activate_in_place(values: &mut [f32], form: Activation) {
    for_each_chunk_mut(values, CHUNK, |_, values| {
        for value in values {
            *value = form.value(*value);
        }
    });
}

/// Values per task of the loops here.
const CHUNK: usize = 1 << 14;

/// Multiplies every `grad` by the derivative of `form` at its `input`.
pub fn gradient_in_place(grad: &mut [f32], input: &[f32], form: Activation) {
    for_each_chunk_mut(grad, CHUNK, |i, grad| {
        for (g, &x) in grad.iter_mut().zip(&input[i * CHUNK..]) {
            *g *= form.derivative(x);
        }
    });
}

/// tanh(u) to an absolute 4e-7, as `(1 − e)/(1 + e)` with `e = e^(−2|u|)`, sign restored.
#[inline(always)]
pub(crate) fn tanh_f32(u: f32) -> f32 {
    let e = exp_non_positive(-2.0 * u.abs());
    ((1.0 - e) / (1.0 + e)).copysign(u)
}

/// e^y for y ≤ 0 to a relative 2e-7 (about 1.6e-38 at and below −87, and for NaN): y = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by
/// its Taylor polynomial, 2ⁿ in the exponent bits. Branch-free, so loops over it vectorise.
#[inline(always)]
pub(crate) fn exp_non_positive(y: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let y = y.max(-87.0);
    let n = (y * std::f32::consts::LOG2_E + 0.5).floor();
    let r = y - n * LN2_HI - n * LN2_LO;
    let mut p = 1.0 / 720.0;
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = p * r + c;
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// erf(x) to within 2e-6 (Abramowitz & Stegun 7.1.28: `1 − 1/(1 + a₁x + … + a₆x⁶)¹⁶` for
/// x ≥ 0, odd), written so that a loop over it vectorises. Multiplies and adds stay separate:
/// `mul_add` is a libm call where the target has no FMA (WebAssembly).
#[inline(always)]
fn erf(x: f32) -> f32 {
    const A: [f32; 6] = [
        0.070_523_08,
        0.042_282_01,
        0.009_270_527,
        0.000_152_014_3,
        0.000_276_567_2,
        0.000_043_063_8,
    ];
    let t = x.abs();
    let mut p = A[5];
    for a in A[..5].iter().rev() {
        p = p * t + a;
    }
    p = p * t + 1.0;
    let p2 = p * p;
    let p4 = p2 * p2;
    let p8 = p4 * p4;
    (1.0 - 1.0 / (p8 * p8)).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Tolerance;

    /// erf in f64 by its Taylor series (|x| < 3) or continued fraction (|x| ≥ 3), exact to ~1e-15.
    fn erf_f64(x: f64) -> f64 {
        let t = x.abs();
        let value = if t < 3.0 {
            let (mut term, mut sum, mut n) = (t, t, 0.0);
            while term.abs() > 1e-17 * sum.abs() {
                n += 1.0;
                term *= -t * t / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc(t) = exp(−t²)/√π · 1/(t + 1/2/(t + 1/(t + 3/2/(t + …))))
            let mut fraction = t;
            for k in (1..60).rev() {
                fraction = t + (k as f64 / 2.0) / fraction;
            }
            1.0 - (-t * t).exp() / std::f64::consts::PI.sqrt() / fraction
        };
        value.copysign(x)
    }

    #[test]
    fn erf_and_gelu_match_the_exact_functions() {
        let mut worst_erf = 0f64;
        let mut worst_gelu = 0f64;
        for i in -240_000..=240_000 {
            let x = i as f32 * 5e-5;
            worst_erf = worst_erf.max((erf(x) as f64 - erf_f64(x as f64)).abs());
            let mut value = [x];
            activate_in_place(&mut value, Activation::Gelu);
            let exact = 0.5 * x as f64 * (1.0 + erf_f64(x as f64 / 2f64.sqrt()));
            worst_gelu =
                worst_gelu.max((value[0] as f64 - exact).abs() / (x as f64).abs().max(1.0));
        }
        assert!(worst_erf < 2e-6, "erf: {worst_erf:e}");
        assert!(worst_gelu < 1e-6, "gelu: {worst_gelu:e}");
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(-1e30), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    #[test]
    fn flex_tensors_take_the_loops_here_with_burns_values() {
        // More values than one task's.
        let values: Vec<f32> = (-20_000..20_000).map(|i| i as f32 * 4.3e-4).collect();
        let device = Default::default();
        let input =
            Tensor::<Flex, 2>::from_data(TensorData::new(values.clone(), [400, 100]), &device);
        // A shared input (the clone) is read, not overwritten: burn's GELU below sees it intact.
        let ours = gelu(input.clone()).into_data();
        let burns = activation::gelu(input).into_data();
        ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(2e-6));
        // Not burn's op: the erfs differ in the last bits.
        assert_ne!(ours, burns);
        // An input held nowhere else is overwritten in place, to the same values.
        let alone = Tensor::<Flex, 2>::from_data(TensorData::new(values, [400, 100]), &device);
        assert_eq!(gelu(alone).into_data(), ours);
    }

    #[test]
    fn tanh_form_matches_the_exact_function_and_burns_ops() {
        let mut worst = 0f64;
        for i in -240_000..=240_000 {
            let x = i as f32 * 5e-5;
            let exact = |x: f64| {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                0.5 * x * (1.0 + u.tanh())
            };
            let ours = Activation::GeluTanh.value(x) as f64;
            worst = worst.max((ours - exact(x as f64)).abs() / (x as f64).abs().max(1.0));
            // The derivative against a central difference of the exact function.
            let h = 1e-4;
            let slope = (exact(x as f64 + h) - exact(x as f64 - h)) / (2.0 * h);
            let derivative = Activation::GeluTanh.derivative(x) as f64;
            assert!(
                (derivative - slope).abs() < 2e-6,
                "at {x}: {derivative} vs {slope}"
            );
        }
        assert!(worst < 1e-6, "tanh gelu: {worst:e}");
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(-1e30), -1.0);
        let values: Vec<f32> = (-20_000..20_000).map(|i| i as f32 * 4.3e-4).collect();
        let input =
            Tensor::<Flex, 2>::from_data(TensorData::new(values, [400, 100]), &Default::default());
        let ours = activate(input.clone(), Activation::GeluTanh).into_data();
        let burns = Activation::GeluTanh.by_burn(input).into_data();
        ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(2e-6));
        assert_ne!(ours, burns, "burn's ops ran");
    }

    #[test]
    fn exp_matches_the_standard_library() {
        let (mut worst, mut at) = (0f64, 0f32);
        for i in 0..348_000 {
            let y = -(i as f32) * 2.5e-4;
            let exact = (y as f64).exp();
            let error = (exp_non_positive(y) as f64 - exact).abs() / exact;
            if error > worst {
                (worst, at) = (error, y);
            }
        }
        assert!(worst < 3e-7, "relative error {worst:e} at {at}");
        assert_eq!(exp_non_positive(0.0), 1.0);
        assert!(exp_non_positive(-200.0) < 1e-37);
    }

    #[test]
    fn autodiff_flex_takes_the_loops_here_with_burns_gradient() {
        for form in [Activation::Gelu, Activation::GeluTanh, Activation::Tanh] {
            autodiff_gradient_matches_burns(form);
        }
    }

    fn autodiff_gradient_matches_burns(form: Activation) {
        type Ad = burn::backend::Autodiff<Flex>;
        let values: Vec<f32> = (-12_000..12_000).map(|i| i as f32 * 5.5e-4).collect();
        let device = Default::default();
        let weights: Vec<f32> = (0..24_000).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let weights = Tensor::<Ad, 2>::from_data(TensorData::new(weights, [300, 80]), &device);
        let gradient = |ours: bool| {
            let x = Tensor::<Ad, 2>::from_data(TensorData::new(values.clone(), [300, 80]), &device)
                .require_grad();
            let y = if ours {
                activate(x.clone(), form)
            } else {
                form.by_burn(x.clone())
            };
            let grads = (y * weights.clone()).sum().backward();
            x.grad(&grads).expect("x requires its gradient").into_data()
        };
        let (ours, burns) = (gradient(true), gradient(false));
        ours.assert_approx_eq::<f32>(&burns, Tolerance::absolute(1e-5));
        assert_ne!(ours, burns, "burn's op ran ({form:?})");
    }
}
