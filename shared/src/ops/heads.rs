//! Attention heads: `[batch, seq, heads · dim]` split into `[batch, heads, seq, dim]` and merged
//! back, as burn's `reshape` and `swap_dims` do.
//!
//! One direction is a view; the other needs a copy (the merge's forward, the split's gradient),
//! which burn-flex makes element by element through a strided iterator: 5.9 % of a bf16
//! fine-tuning step in `perf`. On Flex (with or without autodiff) that copy is `token_major`
//! here: runs of `dim` values, on rayon's threads. Every other backend uses burn's ops.

use std::any::Any;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};

use super::chunks::for_each_chunk_mut;
use super::same_type;

/// `[batch, seq, heads · dim]` as `[batch, heads, seq, dim]`.
pub fn split_heads<B: Backend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
    #[cfg(not(target_arch = "wasm32"))]
    if x.dtype() == DType::F32 {
        let x: Box<dyn Any> = Box::new(x);
        return match x.downcast::<Tensor<burn::backend::Autodiff<Flex>, 3>>() {
            Ok(x) => same_type(training::split_heads(*x, heads)),
            Err(x) => split_view(*x.downcast().expect("x is a Tensor<B, 3>"), heads),
        };
    }
    split_view(x, heads)
}

/// `[batch, heads, seq, dim]` as `[batch, seq, heads · dim]`.
pub fn merge_heads<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
    if x.dtype() != DType::F32 {
        return merge_by_burn(x);
    }
    let x: Box<dyn Any> = Box::new(x);
    let x = match x.downcast::<Tensor<Flex, 4>>() {
        Ok(x) => {
            let merged = token_major_flex(x.into_primitive().tensor());
            return same_type(Tensor::<Flex, 3>::from_primitive(TensorPrimitive::Float(
                merged,
            )));
        }
        Err(x) => x,
    };
    #[cfg(not(target_arch = "wasm32"))]
    let x = match x.downcast::<Tensor<burn::backend::Autodiff<Flex>, 4>>() {
        Ok(x) => return same_type(training::merge_heads(*x)),
        Err(x) => x,
    };
    merge_by_burn(*x.downcast().expect("x is a Tensor<B, 4>"))
}

fn split_view<B: Backend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
    let [batch, seq, width] = x.dims();
    x.reshape([batch, seq, heads, width / heads])
        .swap_dims(1, 2)
}

fn merge_by_burn<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
    let [batch, heads, seq, dim] = x.dims();
    x.swap_dims(1, 2).reshape([batch, seq, heads * dim])
}

/// A `[batch, heads, seq, dim]` Flex tensor, whatever its strides, copied to a new contiguous
/// `[batch, seq, heads · dim]` one.
fn token_major_flex(x: FloatTensor<Flex>) -> FloatTensor<Flex> {
    let layout = x.layout();
    let dims: [usize; 4] = layout.shape().dims();
    let strides: [isize; 4] = layout
        .strides()
        .try_into()
        .expect("a 4-d tensor has 4 strides");
    let values = token_major(x.storage::<f32>(), layout.start_offset(), strides, dims);
    let [batch, heads, seq, dim] = dims;
    FlexTensor::from_data(TensorData::new(values, [batch, seq, heads * dim]))
}

/// The `[batch, heads, seq, dim]` tensor stored in `storage` from `offset` with `strides`, as a
/// contiguous `[batch, seq, heads, dim]` one: one output row (a token's heads) per step.
fn token_major(
    storage: &[f32],
    offset: usize,
    strides: [isize; 4],
    [batch, heads, seq, dim]: [usize; 4],
) -> Vec<f32> {
    let width = heads * dim;
    let mut output = vec![0.0; batch * seq * width];
    for_each_chunk_mut(&mut output, width, |row, out| {
        let (b, t) = (row / seq, row % seq);
        for (h, out) in out.chunks_exact_mut(dim).enumerate() {
            let start = offset as isize
                + b as isize * strides[0]
                + h as isize * strides[1]
                + t as isize * strides[2];
            if strides[3] == 1 {
                out.copy_from_slice(&storage[start as usize..][..dim]);
            } else {
                for (j, value) in out.iter_mut().enumerate() {
                    *value = storage[(start + j as isize * strides[3]) as usize];
                }
            }
        }
    });
    output
}

/// The split and the merge as autodiff ops on `Autodiff<Flex>`, each with the other's copy or
/// view as its gradient.
#[cfg(not(target_arch = "wasm32"))]
mod training {
    use burn::backend::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};

    use super::*;

    /// The split's gradient: merged. No state (the gradient's shape says it all).
    #[derive(Debug)]
    struct SplitStep;

    impl Backward<Flex, 1> for SplitStep {
        type State = ();

        fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node);
            if let Some(parent) = &ops.parents[0] {
                grads.register::<Flex>(parent.id, token_major_flex(grad));
            }
        }
    }

    /// The merge's gradient: split (a view); its state is the number of heads.
    #[derive(Debug)]
    struct MergeStep;

    impl Backward<Flex, 1> for MergeStep {
        type State = usize;

        fn backward(self, ops: Ops<usize, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<Flex>(&ops.node);
            if let Some(parent) = &ops.parents[0] {
                grads.register::<Flex>(parent.id, split_flex(grad, ops.state));
            }
        }
    }

    fn split_flex(x: FloatTensor<Flex>, heads: usize) -> FloatTensor<Flex> {
        let x = Tensor::<Flex, 3>::from_primitive(TensorPrimitive::Float(x));
        split_view(x, heads).into_primitive().tensor()
    }

    pub fn split_heads(x: Tensor<Autodiff<Flex>, 3>, heads: usize) -> Tensor<Autodiff<Flex>, 4> {
        let x = x.into_primitive().tensor();
        let output = SplitStep
            .prepare::<NoCheckpointing>([x.node.clone()])
            .compute_bound()
            .stateless(split_flex(x.primitive, heads));
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }

    pub fn merge_heads(x: Tensor<Autodiff<Flex>, 4>) -> Tensor<Autodiff<Flex>, 3> {
        let heads = x.dims()[1];
        let x = x.into_primitive().tensor();
        let output = match MergeStep
            .prepare::<NoCheckpointing>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(heads, token_major_flex(x.primitive)),
            OpsKind::UnTracked(prep) => prep.finish(token_major_flex(x.primitive)),
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Autodiff;

    use crate::random::SplitMix64;

    fn varied<B: Backend, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
        let values = SplitMix64(seed).centred_f32s(shape.iter().product(), 2.0);
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn merging_strided_views_on_flex_copies_burns_values() {
        let x = varied::<Flex, 4>([2, 3, 5, 4], 0);
        assert_eq!(
            merge_heads(x.clone()).into_data(),
            merge_by_burn(x.clone()).into_data()
        );
        // A transposed view (strides of `dim` ≠ 1), as the key's gradient arrives.
        let transposed = varied::<Flex, 4>([2, 3, 4, 5], 1).swap_dims(2, 3);
        assert_eq!(
            merge_heads(transposed.clone()).into_data(),
            merge_by_burn(transposed).into_data()
        );
    }

    /// Split, attention-like products (one through a transpose), merge: values and the input's
    /// gradient the same as with burn's reshapes and swaps.
    #[test]
    fn autodiff_flex_split_and_merge_give_burns_values_and_gradients() {
        type Ad = Autodiff<Flex>;
        let weights = varied::<Ad, 3>([2, 5, 12], 3);
        let run = |ours: bool| {
            let x = varied::<Ad, 3>([2, 5, 12], 7).require_grad();
            let (split, merge): (fn(_, _) -> _, fn(_) -> _) = if ours {
                (split_heads::<Ad>, merge_heads::<Ad>)
            } else {
                (split_view::<Ad>, merge_by_burn::<Ad>)
            };
            let heads = split(x.clone(), 3);
            let keys = split(x.clone() * 0.5, 3);
            let mixed = heads.clone().matmul(keys.transpose()).matmul(heads);
            let y = merge(mixed);
            let grads = (y.clone() * weights.clone()).sum().backward();
            let grad = x.grad(&grads).expect("x requires its gradient").into_data();
            (y.into_data(), grad)
        };
        let (ours, burns) = (run(true), run(false));
        assert_eq!(ours, burns);
    }
}
