//! Softmax over the last dimension. In the page (Flex compiled to WebAssembly) a loop of ours:
//! burn-flex's softmax calls libm's scalar `expf` there (4 % of the page's classifier time in
//! Chromium's profiler), while the loop's exp ([`exp_non_positive`]) has no branches or calls and
//! compiles to SIMD128. Natively burn-flex's own softmax, one fused SIMD pass, was faster than a
//! loop like this one (README, *Fused attention and softmax were slower*), so everywhere else
//! this is burn's `softmax`.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, activation};

use super::gelu::exp_non_positive;
#[cfg(target_arch = "wasm32")]
use super::gelu::same_type;

/// Softmax of `x` over its last dimension.
pub fn softmax_last<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(target_arch = "wasm32")]
    if x.dtype() == burn::tensor::DType::F32 {
        let x: Box<dyn std::any::Any> = Box::new(x);
        return match x.downcast::<Tensor<burn::backend::Flex, D>>() {
            Ok(x) => same_type(on_flex(*x)),
            Err(x) => activation::softmax(*x.downcast().expect("x is a Tensor<B, D>"), D - 1),
        };
    }
    activation::softmax(x, D - 1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

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
}
