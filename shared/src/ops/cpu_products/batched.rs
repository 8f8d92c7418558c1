//! Batches of small products: attention's `q · kᵀ` and `p · v`, one product per sequence and
//! head, on `Flex`, and with their gradients as one autodiff op on `Autodiff<Flex>` — in bf16
//! while training in bf16 (what PyTorch's CPU autocast also runs in bf16), else in f32. Each
//! product is computed on one thread and the batch is spread over rayon's threads
//! ([`Products::batch`]); the operands are read in place through their strides, so the heads'
//! views and `kᵀ` are not copied.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};

use super::Products;
#[cfg(all(doc, not(test)))]
use crate::ops::bf16::Bf16Training;
use crate::ops::bf16::{Strided, flex_tensor};
use crate::ops::same_type;

/// `a · b` for batches of matrices (`[…, m, k]` by `[…, k, n]`, the same leading dimensions)
/// when `B` is `Flex` (in f32) or `Autodiff<Flex>` (in bf16 while a [`Bf16Training`] lives on
/// this thread, else in f32); else both operands back (for burn's `matmul`, which also
/// broadcasts).
#[allow(clippy::type_complexity)]
pub fn forward<B: Backend, const D: usize>(
    a: Tensor<B, D>,
    b: Tensor<B, D>,
) -> Result<Tensor<B, D>, (Tensor<B, D>, Tensor<B, D>)> {
    let (a_dims, b_dims) = (a.dims(), b.dims());
    let same_batch = D >= 2 && a_dims[..D - 2] == b_dims[..D - 2] && a_dims[D - 1] == b_dims[D - 2];
    if !same_batch || a.dtype() != DType::F32 || b.dtype() != DType::F32 {
        return Err((a, b));
    }
    type Ad = Autodiff<Flex>;
    let both: Box<dyn std::any::Any> = Box::new((a, b));
    let both = match both.downcast::<(Tensor<Ad, D>, Tensor<Ad, D>)>() {
        Ok(both) => {
            let (a, b) = *both;
            return Ok(same_type(product(Products::training(), a, b)));
        }
        Err(both) => both,
    };
    match both.downcast::<(Tensor<Flex, D>, Tensor<Flex, D>)>() {
        Ok(both) => {
            let (a, b) = *both;
            let output = forward_products(Products::F32, a_dims, b_dims[D - 1])(
                a.into_primitive().tensor(),
                b.into_primitive().tensor(),
            );
            Ok(same_type(Tensor::<Flex, D>::from_primitive(
                TensorPrimitive::Float(output),
            )))
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

/// The backward step; its state is the operands (each gradient has its operand's shape).
#[derive(Debug)]
struct ProductsStep(Products);

impl Backward<Flex, 2> for ProductsStep {
    type State = (FloatTensor<Flex>, FloatTensor<Flex>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let products = self.0;
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
            let da = products.batch(items, [m, n, k], |i| {
                [mg.matrix(i), mb.matrix(i).transpose()]
            });
            grads.register::<Flex>(parent.id, flex_tensor(da, a_shape));
        }
        if let Some(parent) = b_parent {
            // db = aᵀ · dy
            let db = products.batch(items, [k, m, n], |i| {
                [ma.matrix(i).transpose(), mg.matrix(i)]
            });
            grads.register::<Flex>(parent.id, flex_tensor(db, b_shape));
        }
    }
}

/// The forward products of `[…, m, k]` by `[…, k, n]` operands (`a_dims`, `n`) on Flex.
fn forward_products<const D: usize>(
    products: Products,
    a_dims: [usize; D],
    n: usize,
) -> impl FnOnce(FloatTensor<Flex>, FloatTensor<Flex>) -> FloatTensor<Flex> {
    move |a, b| {
        let [m, k] = [a_dims[D - 2], a_dims[D - 1]];
        let mut dims = a_dims.to_vec();
        dims[D - 1] = n;
        let (a, b) = (readable(a), readable(b));
        let (ma, mb) = (
            Matrices::of(&a).expect("readable"),
            Matrices::of(&b).expect("readable"),
        );
        let items = ma.starts.len();
        let values = products.batch(items, [m, k, n], |i| [ma.matrix(i), mb.matrix(i)]);
        flex_tensor(values, dims)
    }
}

/// `a · b` over the leading dimensions, recording [`ProductsStep`] when either needs its
/// gradient.
fn product<const D: usize>(
    products: Products,
    a: Tensor<Autodiff<Flex>, D>,
    b: Tensor<Autodiff<Flex>, D>,
) -> Tensor<Autodiff<Flex>, D> {
    let forward = forward_products(products, a.dims(), b.dims()[D - 1]);
    let (a, b) = (a.into_primitive().tensor(), b.into_primitive().tensor());
    let output = match ProductsStep(products)
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
    use crate::ops::bf16::{Bf16Kernel, Bf16Training};

    type Ad = Autodiff<Flex>;

    /// The largest difference between `x` and `reference`, relative to the largest magnitude
    /// in `reference`.
    fn relative_difference<const D: usize>(x: Tensor<Flex, D>, reference: Tensor<Flex, D>) -> f32 {
        let largest = reference.clone().abs().max().into_scalar();
        (x - reference).abs().max().into_scalar() / largest
    }

    /// Attention's two products through the heads' strided views and `kᵀ`, as the encoder
    /// calls them: values and the three inputs' gradients against burn's f32 `matmul` — the
    /// same in f32, within bf16's rounding with each bf16 kernel (the packed kernel's blocks one
    /// after another per product).
    #[test]
    fn attention_products_match_burns_matmul() {
        let device = Default::default();
        let bf16 = [Some(Bf16Kernel::Portable), Bf16Kernel::best()];
        let all =
            std::iter::once(Products::F32).chain(bf16.into_iter().flatten().map(Products::Bf16));
        // 137 tokens: AMX's 128-row groups with a ragged second one, and a ragged last panel.
        let (batch, seq, heads, dim) = (2, 137, 3, 24);
        let heads_of = |x: Tensor<Ad, 3>| {
            x.reshape([batch, seq, heads, dim])
                .swap_dims(1, 2)
                .require_grad()
        };
        let random =
            || Tensor::<Ad, 3>::random([batch, seq, heads * dim], Distribution::Default, &device);
        let (q, k, v) = (heads_of(random()), heads_of(random()), heads_of(random()));
        let target =
            Tensor::<Ad, 4>::random([batch, heads, seq, dim], Distribution::Default, &device);
        // Through burn's `matmul` (None) or ours.
        let attend = |ours: Option<Products>| {
            let _training = match ours {
                Some(Products::Bf16(kernel)) => Some(Bf16Training::enter(kernel)),
                _ => None,
            };
            let matmul = |a: Tensor<Ad, 4>, b: Tensor<Ad, 4>| match ours {
                Some(_) => forward(a, b).unwrap_or_else(|_| panic!("our op takes these operands")),
                None => a.matmul(b),
            };
            let scores = matmul(q.clone(), k.clone().transpose());
            let context = matmul(scores.clone() / 10.0, v.clone());
            let grads = (context.clone() * target.clone()).sum().backward();
            let grad = |x: &Tensor<Ad, 4>| x.grad(&grads).expect("a gradient");
            let values = [scores.inner(), context.inner()];
            values.into_iter().chain([grad(&q), grad(&k), grad(&v)])
        };
        for products in all {
            for (what, (x, y)) in ["scores", "context", "dq", "dk", "dv"]
                .iter()
                .zip(attend(Some(products)).zip(attend(None)))
            {
                let relative = relative_difference(x, y);
                match products {
                    Products::F32 => assert_eq!(relative, 0.0, "{what}"),
                    // Every operand is ≥ 0, so every sum is of non-negative products, each
                    // rounded by 2⁻⁹ relative per operand: at most 2⁻⁸ of the largest value per
                    // product, twice that where a gradient takes a rounded product's gradient;
                    // checked against 2⁻⁶.
                    Products::Bf16(_) => assert!(
                        relative > 0.0 && relative < 1.0 / 64.0,
                        "{products:?} {what}: {relative}"
                    ),
                }
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

    /// Operands whose batches differ (burn broadcasts those) come back untouched; others are
    /// multiplied, on `Flex` and on `Autodiff<Flex>`, in and out of a [`Bf16Training`].
    #[test]
    fn broadcast_products_are_left_to_burn() {
        let device = Default::default();
        let a = Tensor::<Ad, 3>::ones([2, 3, 4], &device);
        let b = Tensor::<Ad, 3>::ones([2, 4, 5], &device);
        let broadcast = Tensor::<Ad, 3>::ones([1, 4, 5], &device);
        assert!(forward(a.clone(), broadcast).is_err());
        let fours = |product: Tensor<Flex, 3>| {
            assert_eq!(product.dims(), [2, 3, 5]);
            assert_eq!(product.into_data().to_vec::<f32>().unwrap(), vec![4.0; 30]);
        };
        fours(forward(a.clone().inner(), b.clone().inner()).expect("ours on Flex"));
        fours(forward(a.clone(), b.clone()).expect("ours in f32").inner());
        let _training = Bf16Training::enter(Bf16Kernel::Portable);
        fours(forward(a, b).expect("ours in bf16").inner());
    }
}
