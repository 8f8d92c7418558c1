//! Dropout with a quickly drawn mask on burn's CPU backend.
//!
//! burn's `Dropout` draws its mask with a fresh `Bernoulli` sampler per element from a ChaCha
//! generator, on one thread, then multiplies twice (by the mask, then by `1/keep`): `perf` put the
//! drawing at 9.5 % of MiniLM's fine-tuning on an AVX2 machine. When training on Flex
//! (`Autodiff<Flex>`), [`dropout`] instead hashes each element's index with a seed drawn from
//! burn's generator (so `B::seed` still fixes every mask) into a mask already scaled by `1/keep`,
//! in a loop that vectorises, and multiplies once. Every other backend uses burn's `Dropout`.

use burn::nn::Dropout;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorData};

/// `module`'s dropout of `x`: zeroes each element with probability `module.prob` and scales the
/// rest by `1/(1 − prob)` while training (autodiff enabled); `x` itself otherwise.
pub fn dropout<B: Backend, const D: usize>(module: &Dropout, x: Tensor<B, D>) -> Tensor<B, D> {
    // Only Flex training (`Autodiff<Flex>`, native) draws its masks slowly.
    #[cfg(not(target_arch = "wasm32"))]
    let hashed = std::any::TypeId::of::<B>()
        == std::any::TypeId::of::<burn::backend::Autodiff<burn::backend::Flex>>();
    #[cfg(target_arch = "wasm32")]
    let hashed = false;
    let device = x.device();
    if !hashed || !B::ad_enabled(&device) || module.prob == 0.0 {
        return module.forward(x);
    }
    let seed = Tensor::<B, 1>::random([2], Distribution::Default, &device)
        .into_data()
        .to_vec::<f32>()
        .expect("a float tensor's values convert to f32");
    let seed = [seed[0].to_bits(), seed[1].to_bits()];
    let shape = x.shape();
    let mask = scaled_mask(shape.num_elements(), 1.0 - module.prob as f32, seed);
    x * Tensor::from_data(TensorData::new(mask, shape), &device)
}

/// `len` values, each `1/keep` with probability `keep` and 0 otherwise, from `seed`.
fn scaled_mask(len: usize, keep: f32, seed: [u32; 2]) -> Vec<f32> {
    // Keep when the hash's top 24 bits fall below keep·2²⁴.
    let threshold = (keep as f64 * (1u32 << 24) as f64) as u32;
    let scale = 1.0 / keep;
    let mut mask = vec![0.0; len];
    for (index, value) in mask.iter_mut().enumerate() {
        let bits = mix(mix(index as u32 ^ seed[0]) ^ seed[1]);
        *value = if bits >> 8 < threshold { scale } else { 0.0 };
    }
    mask
}

/// A 32-bit integer hash with good avalanche (xor-shift, multiply; two rounds and a final
/// shift), branch-free.
#[inline(always)]
fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::DropoutConfig;

    #[test]
    fn masks_keep_the_expected_share_and_differ_by_seed() {
        let mask = scaled_mask(1 << 20, 0.9, [1, 2]);
        let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / mask.len() as f64;
        // 3 standard deviations of a binomial share over 2²⁰ draws: 0.0009.
        assert!((kept - 0.9).abs() < 9e-4, "{kept}");
        assert!(mask.iter().all(|&m| m == 0.0 || m == 1.0 / 0.9));
        // Neighbouring elements are independent: pairs of drops at the expected rate.
        let both = mask
            .windows(2)
            .filter(|w| w[0] == 0.0 && w[1] == 0.0)
            .count() as f64;
        assert!(
            (both / (mask.len() - 1) as f64 - 0.01).abs() < 3e-4,
            "{both}"
        );
        assert_ne!(mask, scaled_mask(1 << 20, 0.9, [1, 3]));
        assert_ne!(mask, scaled_mask(1 << 20, 0.9, [4, 2]));
    }

    #[test]
    fn training_on_flex_draws_seeded_masks_and_gradients_follow_them() {
        type Ad = Autodiff<Flex>;
        let device = Default::default();
        let module = DropoutConfig::new(0.25).init();
        let run = |seed: u64| {
            Ad::seed(&device, seed);
            let x = Tensor::<Ad, 2>::ones([64, 64], &device).require_grad();
            let y = dropout(&module, x.clone());
            let grad = x.grad(&y.clone().sum().backward()).unwrap().into_data();
            (y.into_data(), grad)
        };
        let (y, grad) = run(7);
        let values = y.to_vec::<f32>().unwrap();
        let kept = values.iter().filter(|&&v| v > 0.0).count() as f64 / values.len() as f64;
        assert!((kept - 0.75).abs() < 0.05, "{kept}");
        assert!(
            values
                .iter()
                .all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6)
        );
        // d(sum of y)/dx is the mask itself.
        assert_eq!(grad, y);
        assert_eq!(run(7).0, y);
        assert_ne!(run(8).0, y);
        // Outside training, nothing is dropped.
        let plain = Tensor::<Flex, 2>::ones([4, 4], &device);
        assert_eq!(
            dropout(&module, plain.clone()).into_data(),
            plain.into_data()
        );
    }
}
