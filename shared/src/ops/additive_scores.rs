//! Additive attention scores, `vᵀ tanh(k_t + q)` for every position `t` (Bahdanau's form, the
//! Dis-AE's attention pooling), as one op: on `Autodiff<Flex>` with its gradient, on Flex as a
//! loop, composed of burn ops on every other backend.
//!
//! Composed of burn ops, the keys `[batch, seq, d]` take a broadcast add of the query, libm's
//! scalar `tanhf`, a product with a one-column weight, and backward a `tanh` recomputed, a
//! broadcast product and a reduction for the query's gradient, each a pass on one thread: in
//! `perf`, the Dis-AE's two attention pools were 11 % of the samples of the thread that runs a
//! training step's serial work, the thread that sets its pace. Here the forward is one pass over
//! the keys (a tanh without libm, as [`super::activation`]'s, and a dot product with a fixed
//! order of sums, so the page computes native's numbers) and the backward one more, from the saved tanh,
//! both a batch row per rayon task.

use std::any::Any;

use burn::backend::Flex;
use burn::tensor::activation::tanh as burn_tanh;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use super::activation::tanh_f32;
use super::dot::dot_portable;
use super::{same_type, values};

/// `scores[b, t] = Σ_j v[j] · tanh(keys[b, t, j] + query[b, j])`: keys `[batch, seq, d]`, query
/// `[batch, d]`, `v` `[d]` → `[batch, seq]`.
pub fn additive_scores<B: Backend>(
    keys: Tensor<B, 3>,
    query: Tensor<B, 2>,
    v: Tensor<B, 1>,
) -> Tensor<B, 2> {
    let [batch, seq, d] = keys.dims();
    assert_eq!(query.dims(), [batch, d], "the query is [batch, d]");
    assert_eq!(v.dims(), [d], "v is [d]");
    if keys.dtype() != DType::F32 {
        return by_burn(keys, query, v);
    }
    let inputs: Box<dyn Any> = Box::new((keys, query, v));
    let inputs = match inputs.downcast::<(Tensor<Flex, 3>, Tensor<Flex, 2>, Tensor<Flex, 1>)>() {
        Ok(inputs) => {
            let (keys, query, v) = *inputs;
            let device = keys.device();
            let (scores, _) = forward(&values(keys), &values(query), &values(v), [batch, seq, d]);
            let scores =
                Tensor::<Flex, 2>::from_data(TensorData::new(scores, [batch, seq]), &device);
            return same_type(scores);
        }
        Err(inputs) => inputs,
    };
    #[cfg(not(target_arch = "wasm32"))]
    let inputs = match inputs.downcast::<(
        Tensor<training::Ad, 3>,
        Tensor<training::Ad, 2>,
        Tensor<training::Ad, 1>,
    )>() {
        Ok(inputs) => {
            let (keys, query, v) = *inputs;
            return same_type(training::additive_scores(keys, query, v));
        }
        Err(inputs) => inputs,
    };
    let (keys, query, v) = *inputs
        .downcast::<(Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 1>)>()
        .expect("the inputs are B's tensors");
    by_burn(keys, query, v)
}

/// The scores from burn's ops (every backend but Flex).
fn by_burn<B: Backend>(keys: Tensor<B, 3>, query: Tensor<B, 2>, v: Tensor<B, 1>) -> Tensor<B, 2> {
    let [batch, seq, d] = keys.dims();
    (burn_tanh(keys + query.reshape([batch, 1, d])) * v.reshape([1, 1, d]))
        .sum_dim(2)
        .reshape([batch, seq])
}

/// The scores `[batch·seq]` and every `tanh(k + q)` `[batch·seq·d]`, a batch row per task.
fn forward(
    keys: &[f32],
    query: &[f32],
    v: &[f32],
    [batch, seq, d]: [usize; 3],
) -> (Vec<f32>, Vec<f32>) {
    let mut activated = vec![0.0f32; batch * seq * d];
    let mut scores = vec![0.0f32; batch * seq];
    let row = |b: usize, activated: &mut [f32], scores: &mut [f32]| {
        let query = &query[b * d..(b + 1) * d];
        for (t, (activated, score)) in activated.chunks_exact_mut(d).zip(scores).enumerate() {
            let keys = &keys[(b * seq + t) * d..(b * seq + t + 1) * d];
            for ((a, &k), &q) in activated.iter_mut().zip(keys).zip(query) {
                *a = tanh_f32(k + q);
            }
            *score = dot_portable(activated, v);
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        activated
            .par_chunks_mut(seq * d)
            .zip(scores.par_chunks_mut(seq))
            .enumerate()
            .for_each(|(b, (activated, scores))| row(b, activated, scores));
    }
    #[cfg(target_arch = "wasm32")]
    for (b, (activated, scores)) in activated
        .chunks_mut(seq * d)
        .zip(scores.chunks_mut(seq))
        .enumerate()
    {
        row(b, activated, scores);
    }
    (scores, activated)
}

/// The op with its gradient on `Autodiff<Flex>`.
#[cfg(not(target_arch = "wasm32"))]
mod training {
    use burn::backend::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::flex::FlexTensor;
    use burn::tensor::TensorPrimitive;
    use burn::tensor::ops::FloatTensor;
    use rayon::prelude::*;

    use super::*;
    use crate::ops::register_gradient;

    pub type Ad = Autodiff<Flex>;

    /// What the backward step needs: every `tanh(k + q)` and `v`.
    #[derive(Debug, Clone)]
    struct Saved {
        shape: [usize; 3],
        activated: Vec<f32>,
        v: Vec<f32>,
    }

    #[derive(Debug)]
    struct AdditiveScoresStep;

    impl Backward<Flex, 3> for AdditiveScoresStep {
        type State = Saved;

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node).into_data();
            let grad = grad.as_slice::<f32>().expect("an f32 gradient");
            let Saved {
                shape,
                activated,
                v,
            } = ops.state;
            let [batch, _, d] = shape;
            let (keys, query, v) = backward(grad, &activated, &v, shape);
            let [keys_node, query_node, v_node] = ops.parents.map(|node| node.map(|n| n.id));
            register_gradient(grads, keys_node, keys, shape.to_vec());
            register_gradient(grads, query_node, query, vec![batch, d]);
            register_gradient(grads, v_node, v, vec![d]);
        }
    }

    /// The gradients of the keys, the query and `v` from the scores' `grad`: with
    /// `a = tanh(k + q)`, `∂k = g·v·(1 − a²)`, `∂q` its sum over positions, `∂v = Σ g·a`.
    fn backward(
        grad: &[f32],
        activated: &[f32],
        v: &[f32],
        [batch, seq, d]: [usize; 3],
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut keys = vec![0.0f32; batch * seq * d];
        let mut query = vec![0.0f32; batch * d];
        // Each batch row's share of `∂v`, summed in row order after.
        let mut v_parts = vec![0.0f32; batch * d];
        keys.par_chunks_mut(seq * d)
            .zip(query.par_chunks_mut(d))
            .zip(v_parts.par_chunks_mut(d))
            .enumerate()
            .for_each(|(b, ((keys, query), v_part))| {
                for (t, keys) in keys.chunks_exact_mut(d).enumerate() {
                    let g = grad[b * seq + t];
                    let activated = &activated[(b * seq + t) * d..(b * seq + t + 1) * d];
                    for j in 0..d {
                        let a = activated[j];
                        let dk = g * v[j] * (1.0 - a * a);
                        keys[j] = dk;
                        query[j] += dk;
                        v_part[j] += g * a;
                    }
                }
            });
        let mut v_grad = vec![0.0f32; d];
        for part in v_parts.chunks_exact(d) {
            for (sum, value) in v_grad.iter_mut().zip(part) {
                *sum += value;
            }
        }
        (keys, query, v_grad)
    }

    /// The scores, recording [`AdditiveScoresStep`] when any input needs its gradient.
    pub fn additive_scores(
        keys: Tensor<Ad, 3>,
        query: Tensor<Ad, 2>,
        v: Tensor<Ad, 1>,
    ) -> Tensor<Ad, 2> {
        let shape = keys.dims();
        let [batch, seq, _] = shape;
        let (keys, query, v) = (
            keys.into_primitive().tensor(),
            query.into_primitive().tensor(),
            v.into_primitive().tensor(),
        );
        let flat = |tensor: &FloatTensor<Ad>| -> Vec<f32> {
            tensor
                .primitive
                .clone()
                .into_data()
                .into_vec::<f32>()
                .expect("f32 values")
        };
        let v_values = flat(&v);
        let (scores, activated) = forward(&flat(&keys), &flat(&query), &v_values, shape);
        let scores = FlexTensor::from_data(TensorData::new(scores, [batch, seq]));
        let parents = [&keys, &query, &v].map(|t| t.node.clone());
        let output = match AdditiveScoresStep
            .prepare::<NoCheckpointing>(parents)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let saved = Saved {
                    shape,
                    activated,
                    v: v_values,
                };
                prep.finish(saved, scores)
            }
            OpsKind::UnTracked(prep) => prep.finish(scores),
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Autodiff;
    use burn::tensor::{Distribution, Tolerance};

    use super::*;

    type Ad = Autodiff<Flex>;

    fn random<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<Flex, D> {
        let device = Default::default();
        Flex::seed(&device, seed);
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), &device)
    }

    #[test]
    fn scores_and_gradients_match_burn_ops() {
        // d = 13: a dot product's full lanes and a tail.
        let (keys, query, v) = (random([3, 5, 13], 1), random([3, 13], 2), random([13], 3));
        let expected = by_burn(keys.clone(), query.clone(), v.clone());
        additive_scores(keys.clone(), query.clone(), v.clone())
            .into_data()
            .assert_approx_eq::<f32>(&expected.into_data(), Tolerance::absolute(2e-6));

        let track = |t: Tensor<Flex, 3>| Tensor::<Ad, 3>::from_inner(t).require_grad();
        let (k_ours, k_burn) = (track(keys.clone()), track(keys));
        let track = |t: Tensor<Flex, 2>| Tensor::<Ad, 2>::from_inner(t).require_grad();
        let (q_ours, q_burn) = (track(query.clone()), track(query));
        let track = |t: Tensor<Flex, 1>| Tensor::<Ad, 1>::from_inner(t).require_grad();
        let (v_ours, v_burn) = (track(v.clone()), track(v));
        // A weight per score, so that each score's gradient differs.
        let weights = Tensor::<Ad, 2>::from_inner(random([3, 5], 4));
        let ours = additive_scores(k_ours.clone(), q_ours.clone(), v_ours.clone());
        let burn = by_burn(k_burn.clone(), q_burn.clone(), v_burn.clone());
        let ours = (ours * weights.clone()).sum().backward();
        let burn = (burn * weights).sum().backward();
        let close = Tolerance::absolute(2e-5);
        k_ours
            .grad(&ours)
            .unwrap()
            .into_data()
            .assert_approx_eq::<f32>(&k_burn.grad(&burn).unwrap().into_data(), close);
        q_ours
            .grad(&ours)
            .unwrap()
            .into_data()
            .assert_approx_eq::<f32>(&q_burn.grad(&burn).unwrap().into_data(), close);
        v_ours
            .grad(&ours)
            .unwrap()
            .into_data()
            .assert_approx_eq::<f32>(&v_burn.grad(&burn).unwrap().into_data(), close);
    }
}
