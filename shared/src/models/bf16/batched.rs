//! Batches of small products in bf16: attention's `q · kᵀ` and `p · v`, one product per
//! sequence and head, and their gradients, as one autodiff op on `Autodiff<Flex>` — what
//! PyTorch's CPU autocast also runs in bf16. Each product is computed on one thread (the blocks
//! of [`super::matmul`] one after another) and the batch is spread over rayon's threads; the
//! operands are read in place through their strides, so the heads' views and `kᵀ` are not copied.

use std::mem::MaybeUninit;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};

use super::{Bf16Kernel, Strided, TRAINING, Threads, flex_tensor, matmul_into};
use crate::models::chunks::for_each_chunk_mut;
use crate::models::same_type;

/// `a · b` for batches of matrices (`[…, m, k]` by `[…, k, n]`, the same leading dimensions)
/// with the products in bf16, while a [`super::Bf16Training`] lives and `B` is
/// `Autodiff<Flex>`; else both operands back (for burn's `matmul`, which also broadcasts).
#[allow(clippy::type_complexity)]
pub fn forward<B: Backend, const D: usize>(
    a: Tensor<B, D>,
    b: Tensor<B, D>,
) -> Result<Tensor<B, D>, (Tensor<B, D>, Tensor<B, D>)> {
    let (a_dims, b_dims) = (a.dims(), b.dims());
    let same_batch = D >= 2 && a_dims[..D - 2] == b_dims[..D - 2] && a_dims[D - 1] == b_dims[D - 2];
    let Some(kernel) = TRAINING.get() else {
        return Err((a, b));
    };
    if !same_batch || a.dtype() != DType::F32 || b.dtype() != DType::F32 {
        return Err((a, b));
    }
    type Ad = Autodiff<Flex>;
    let both: Box<dyn std::any::Any> = Box::new((a, b));
    match both.downcast::<(Tensor<Ad, D>, Tensor<Ad, D>)>() {
        Ok(both) => {
            let (a, b) = *both;
            Ok(same_type(product(kernel, a, b)))
        }
        Err(both) => Err(*both
            .downcast::<(Tensor<B, D>, Tensor<B, D>)>()
            .expect("the pair built above")),
    }
}

/// The matrices of a `[…, rows, columns]` tensor on Flex, read where they are.
struct Matrices<'a> {
    values: &'a [f32],
    /// Where each matrix starts in `values`, in the leading dimensions' row-major order.
    starts: Vec<usize>,
    row: usize,
    column: usize,
}

impl<'a> Matrices<'a> {
    /// None where the packing cannot read the strides (it reads a row-major matrix or a
    /// transposed one) or where they are negative.
    fn of(tensor: &'a FlexTensor) -> Option<Self> {
        let layout = tensor.layout();
        let strides: Vec<usize> = layout
            .strides()
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect::<Option<_>>()?;
        let d = strides.len();
        let (row, column) = (strides[d - 2], strides[d - 1]);
        if row != 1 && column != 1 {
            return None;
        }
        let shape = layout.shape();
        let mut starts = vec![layout.start_offset()];
        for (dim, &stride) in strides[..d - 2].iter().enumerate() {
            starts = starts
                .iter()
                .flat_map(|&start| (0..shape[dim]).map(move |i| start + i * stride))
                .collect();
        }
        Some(Self {
            values: tensor.storage::<f32>(),
            starts,
            row,
            column,
        })
    }

    fn matrix(&self, i: usize) -> Strided<'a> {
        Strided {
            values: &self.values[self.starts[i]..],
            row: self.row,
            column: self.column,
        }
    }
}

/// `tensor` itself where [`Matrices::of`] can read it, else a contiguous copy.
fn readable(tensor: FloatTensor<Flex>) -> FloatTensor<Flex> {
    if Matrices::of(&tensor).is_some() {
        tensor
    } else {
        tensor.to_contiguous()
    }
}

/// The products `operands(i)` (`m × k` by `k × n`) of `items` pairs, one after another in
/// `items` blocks of `m · n` values.
fn products<'a>(
    kernel: Bf16Kernel,
    items: usize,
    [m, k, n]: [usize; 3],
    operands: impl Fn(usize) -> [Strided<'a>; 2] + Send + Sync,
) -> Vec<f32> {
    let len = items * m * n;
    let mut output: Vec<f32> = Vec::with_capacity(len);
    if len > 0 {
        let out: &mut [MaybeUninit<f32>] = &mut output.spare_capacity_mut()[..len];
        for_each_chunk_mut(out, m * n, |i, out| {
            matmul_into(kernel, operands(i), [m, k, n], out, Threads::Caller);
        });
    }
    // SAFETY: every product wrote its `m · n` values.
    unsafe { output.set_len(len) };
    output
}

/// The backward step; its state is the operands (each gradient has its operand's shape).
#[derive(Debug)]
struct ProductsStep(Bf16Kernel);

impl Backward<Flex, 2> for ProductsStep {
    type State = (FloatTensor<Flex>, FloatTensor<Flex>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let kernel = self.0;
        let grad = readable(grads.consume::<Flex>(&ops.node));
        let (a, b) = ops.state;
        let (a, b) = (readable(a), readable(b));
        let (a_shape, b_shape) = (a.layout().shape().clone(), b.layout().shape().clone());
        let d = a_shape.num_dims();
        let [m, k, n] = [a_shape[d - 2], a_shape[d - 1], b_shape[d - 1]];
        let (ma, mb, mg) = (
            Matrices::of(&a).expect("readable"),
            Matrices::of(&b).expect("readable"),
            Matrices::of(&grad).expect("readable"),
        );
        let items = mg.starts.len();
        let [a_parent, b_parent] = &ops.parents;
        if let Some(parent) = a_parent {
            // da = dy · bᵀ
            let da = products(kernel, items, [m, n, k], |i| {
                [mg.matrix(i), mb.matrix(i).transpose()]
            });
            grads.register::<Flex>(parent.id, flex_tensor(da, a_shape));
        }
        if let Some(parent) = b_parent {
            // db = aᵀ · dy
            let db = products(kernel, items, [k, m, n], |i| {
                [ma.matrix(i).transpose(), mg.matrix(i)]
            });
            grads.register::<Flex>(parent.id, flex_tensor(db, b_shape));
        }
    }
}

/// `a · b` in bf16 over the leading dimensions, recording [`ProductsStep`] when either needs
/// its gradient.
fn product<const D: usize>(
    kernel: Bf16Kernel,
    a: Tensor<Autodiff<Flex>, D>,
    b: Tensor<Autodiff<Flex>, D>,
) -> Tensor<Autodiff<Flex>, D> {
    let (a_dims, b_dims) = (a.dims(), b.dims());
    let [m, k, n] = [a_dims[D - 2], a_dims[D - 1], b_dims[D - 1]];
    let mut dims = a_dims.to_vec();
    dims[D - 1] = n;
    let (a, b) = (a.into_primitive().tensor(), b.into_primitive().tensor());
    let forward = |a: FloatTensor<Flex>, b: FloatTensor<Flex>| {
        let (a, b) = (readable(a), readable(b));
        let (ma, mb) = (
            Matrices::of(&a).expect("readable"),
            Matrices::of(&b).expect("readable"),
        );
        let items = ma.starts.len();
        let values = products(kernel, items, [m, k, n], |i| [ma.matrix(i), mb.matrix(i)]);
        flex_tensor(values, dims)
    };
    let output = match ProductsStep(kernel)
        .prepare::<NoCheckpointing>([a.node.clone(), b.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = (a.primitive.clone(), b.primitive.clone());
            prep.finish(state, forward(a.primitive, b.primitive))
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(a.primitive, b.primitive)),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;

    use super::*;
    use crate::models::bf16::Bf16Training;

    type Ad = Autodiff<Flex>;

    /// The largest difference between `x` and `reference`, relative to the largest magnitude
    /// in `reference`.
    fn relative_difference<const D: usize>(x: Tensor<Flex, D>, reference: Tensor<Flex, D>) -> f32 {
        let largest = reference.clone().abs().max().into_scalar();
        (x - reference).abs().max().into_scalar() / largest
    }

    /// Attention's two products through the heads' strided views and `kᵀ`, as the encoder
    /// calls them: values and the three inputs' gradients against burn's f32 `matmul`, within bf16's
    /// rounding, with each kernel (the packed kernel's blocks one after another per product).
    #[test]
    fn attention_products_match_f32_within_bf16_rounding() {
        let device = Default::default();
        let kernels = [Some(Bf16Kernel::Portable), Bf16Kernel::best()];
        // 137 tokens: AMX's 128-row groups with a ragged second one, and a ragged last panel.
        let (batch, seq, heads, dim) = (2, 137, 3, 24);
        let heads_of = |x: Tensor<Ad, 3>| {
            x.reshape([batch, seq, heads, dim])
                .swap_dims(1, 2)
                .require_grad()
        };
        for kernel in kernels.into_iter().flatten() {
            let random = || {
                Tensor::<Ad, 3>::random([batch, seq, heads * dim], Distribution::Default, &device)
            };
            let (q, k, v) = (heads_of(random()), heads_of(random()), heads_of(random()));
            let target =
                Tensor::<Ad, 4>::random([batch, heads, seq, dim], Distribution::Default, &device);
            let attend = |bf16: bool| {
                let _training = bf16.then(|| Bf16Training::enter(kernel));
                let matmul = |a: Tensor<Ad, 4>, b: Tensor<Ad, 4>| {
                    forward(a, b).unwrap_or_else(|(a, b)| {
                        assert!(!bf16, "the bf16 op takes these operands");
                        a.matmul(b)
                    })
                };
                let scores = matmul(q.clone(), k.clone().transpose());
                let context = matmul(scores.clone() / 10.0, v.clone());
                let grads = (context.clone() * target.clone()).sum().backward();
                let grad = |x: &Tensor<Ad, 4>| x.grad(&grads).expect("a gradient");
                (
                    [scores.inner(), context.inner()],
                    [grad(&q), grad(&k), grad(&v)],
                )
            };
            let (f32_values, f32_grads) = attend(false);
            let (values, grads) = attend(true);
            // Every operand is ≥ 0, so every sum is of non-negative products, each rounded by
            // 2⁻⁹ relative per operand: at most 2⁻⁸ of the largest value per product, twice that
            // where a gradient takes a rounded product's gradient; checked against 2⁻⁶.
            let bf16 = values.into_iter().chain(grads);
            let f32 = f32_values.into_iter().chain(f32_grads);
            for (what, (x, y)) in ["scores", "context", "dq", "dk", "dv"]
                .iter()
                .zip(bf16.zip(f32))
            {
                let relative = relative_difference(x, y);
                assert!(
                    relative > 0.0 && relative < 1.0 / 64.0,
                    "{kernel:?} {what}: {relative}"
                );
            }
        }
    }

    /// Batches of three dimensions with only the right operand needing its gradient: that one,
    /// within bf16's rounding of burn's f32 one, and none for the left.
    #[test]
    fn the_one_operand_that_needs_it_gets_a_gradient() {
        let device = Default::default();
        let random =
            |shape: [usize; 3]| Tensor::<Ad, 3>::random(shape, Distribution::Default, &device);
        let (a, b, target) = (
            random([2, 40, 33]),
            random([2, 33, 50]).require_grad(),
            random([2, 40, 50]),
        );
        let f32_grads = (a.clone().matmul(b.clone()) * target.clone())
            .sum()
            .backward();
        let _training = Bf16Training::enter(Bf16Kernel::best().unwrap_or(Bf16Kernel::Portable));
        let product = forward(a.clone(), b.clone()).expect("the bf16 op");
        let grads = (product * target).sum().backward();
        assert!(a.grad(&grads).is_none());
        let relative = relative_difference(b.grad(&grads).unwrap(), b.grad(&f32_grads).unwrap());
        assert!(relative > 0.0 && relative < 1.0 / 64.0, "{relative}");
    }

    /// Outside a [`Bf16Training`], and for operands whose batches differ (burn broadcasts
    /// those), the operands come back untouched.
    #[test]
    fn other_products_are_left_to_burn() {
        let device = Default::default();
        let a = Tensor::<Ad, 3>::ones([2, 3, 4], &device);
        let b = Tensor::<Ad, 3>::ones([2, 4, 5], &device);
        assert!(forward(a.clone(), b.clone()).is_err());
        let _training = Bf16Training::enter(Bf16Kernel::Portable);
        let broadcast = Tensor::<Ad, 3>::ones([1, 4, 5], &device);
        assert!(forward(a.clone(), broadcast).is_err());
        let on_flex = forward(a.clone().inner(), b.clone().inner());
        assert!(on_flex.is_err(), "only Autodiff<Flex> trains in bf16");
        let product = forward(a, b).expect("the bf16 op");
        assert_eq!(product.dims(), [2, 3, 5]);
        assert_eq!(
            product.inner().into_data().to_vec::<f32>().unwrap(),
            vec![4.0; 30]
        );
    }
}
