//! The models' linear layers on burn's CPU backend: `x · W` on `Flex`, and on `Autodiff<Flex>` an
//! autodiff op whose backward step computes both gradients (`dy · Wᵀ`, `xᵀ · dy`) the same way
//! ([`Products`]); likewise `x · Wᵀ` for an output tied to the embedding, read in place.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{Autodiff, Flex};
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};

use super::{Products, with_values};
#[cfg(test)]
use crate::ops::bf16::Bf16Kernel;
#[cfg(doc)]
use crate::ops::bf16::Bf16Training;
use crate::ops::bf16::{Strided, flex_tensor};
use crate::ops::same_type;

/// `linear`'s output for `x` (`[rows, inputs]`) when `B` is `Flex` or `Autodiff<Flex>`: on
/// `Autodiff<Flex>` the products in bf16 while a [`Bf16Training`] lives on this thread, else in
/// f32; on `Flex` in f32. `x` back on any other backend or dtype.
pub fn forward<B: Backend>(
    linear: &Linear<B>,
    x: Tensor<B, 2>,
) -> Result<Tensor<B, 2>, Tensor<B, 2>> {
    match matmul(x, linear.weight.val(), Layout::Rows) {
        Ok(output) => Ok(with_bias(linear, output)),
        Err((x, _)) => Err(x),
    }
}

/// `x` (`[m, k]`) by the `[k, n]` matrix `weight` holds in `layout` (`x · W` for a linear
/// layer's weight, `x · Wᵀ` for an embedding an output is tied to, read transposed in place), as
/// [`forward`] computes a linear layer's: on `Autodiff<Flex>` as an autodiff op (bf16 while a
/// [`Bf16Training`] lives), on `Flex` in f32; the pair back on any other backend or dtype.
#[allow(clippy::type_complexity)]
pub fn matmul<B: Backend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    layout: Layout,
) -> Result<Tensor<B, 2>, (Tensor<B, 2>, Tensor<B, 2>)> {
    if x.dtype() != DType::F32 || weight.dtype() != DType::F32 {
        return Err((x, weight));
    }
    let [m, k] = x.dims();
    let stored = weight.dims();
    let n = layout.columns(k, stored);
    let pair: Box<dyn std::any::Any> = Box::new((x, weight));
    let pair = match pair.downcast::<(Tensor<Autodiff<Flex>, 2>, Tensor<Autodiff<Flex>, 2>)>() {
        Ok(pair) => {
            let (x, weight) = *pair;
            let products = Products::training();
            return Ok(same_type(training::product(products, x, weight, layout)));
        }
        Err(pair) => pair,
    };
    match pair.downcast::<(Tensor<Flex, 2>, Tensor<Flex, 2>)>() {
        Ok(pair) => {
            let (x, weight) = *pair;
            let (x, weight) = (
                x.into_primitive().tensor(),
                weight.into_primitive().tensor(),
            );
            let output = forward_product(Products::F32, x, weight, [m, k, n], layout);
            Ok(same_type(Tensor::<Flex, 2>::from_primitive(
                TensorPrimitive::Float(output),
            )))
        }
        Err(pair) => Err(*pair
            .downcast::<(Tensor<B, 2>, Tensor<B, 2>)>()
            .expect("the pair built above")),
    }
}

/// `output` plus the layer's bias, if it has one.
fn with_bias<B: Backend>(linear: &Linear<B>, output: Tensor<B, 2>) -> Tensor<B, 2> {
    match &linear.bias {
        Some(bias) => output + bias.val().unsqueeze(),
        None => output,
    }
}

/// How a product's weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major `[k, n]`: the product is `x · W` (burn's `Linear`).
    Rows,
    /// Row-major `[n, k]`, read transposed in place: the product is `x · Wᵀ`.
    Transposed,
}

impl Layout {
    /// The `[k, n]` matrix the product multiplies by, read from the stored `weight`.
    fn read(self, weight: &[f32], [k, n]: [usize; 2]) -> Strided<'_> {
        match self {
            Layout::Rows => Strided::rows(weight, n),
            Layout::Transposed => Strided::transposed(weight, k),
        }
    }

    /// `n` of the `[k, n]` matrix a weight stored as `stored` holds (checked against `k`).
    fn columns(self, k: usize, [rows, columns]: [usize; 2]) -> usize {
        let (inner, n) = match self {
            Layout::Rows => (rows, columns),
            Layout::Transposed => (columns, rows),
        };
        assert_eq!(
            inner, k,
            "a product of {k} columns by a {self:?} {rows} × {columns} weight"
        );
        n
    }

    /// The stored shape of a `[k, n]` weight.
    fn stored(self, [k, n]: [usize; 2]) -> [usize; 2] {
        match self {
            Layout::Rows => [k, n],
            Layout::Transposed => [n, k],
        }
    }
}

/// `x` (`m × k`) by the `k × n` matrix `weight` holds in `layout`, on Flex.
fn forward_product(
    products: Products,
    x: FloatTensor<Flex>,
    weight: FloatTensor<Flex>,
    [m, k, n]: [usize; 3],
    layout: Layout,
) -> FloatTensor<Flex> {
    let output = with_values(x, |x| {
        with_values(weight, |w| {
            products.matmul(Strided::rows(x, k), layout.read(w, [k, n]), m, k, n)
        })
    });
    flex_tensor(output, [m, n])
}

/// The product as an autodiff op whose backward step computes both gradients the same way.
mod training {
    use super::*;

    /// The backward step; its state is the product's two operands and their shape `[m, k, n]`.
    #[derive(Debug)]
    struct ProductStep(Products, Layout);

    impl Backward<Flex, 2> for ProductStep {
        type State = (FloatTensor<Flex>, FloatTensor<Flex>, [usize; 3]);

        fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
            let ProductStep(products, layout) = self;
            let grad = grads.consume::<Flex>(&ops.node);
            let (x, weight, [m, k, n]) = ops.state;
            let [x_parent, weight_parent] = &ops.parents;
            with_values(grad, |grad| {
                if let Some(parent) = x_parent {
                    // dx = dy · Wᵀ
                    let dx = with_values(weight.clone(), |weight| {
                        let wt = layout.read(weight, [k, n]).transpose();
                        products.matmul(Strided::rows(grad, n), wt, m, n, k)
                    });
                    grads.register::<Flex>(parent.id, flex_tensor(dx, [m, k]));
                }
                if let Some(parent) = weight_parent {
                    // dW = xᵀ · dy, or its transpose dyᵀ · x for a weight stored transposed
                    let dw = with_values(x.clone(), |x| {
                        let (xt, dy) = (Strided::transposed(x, k), Strided::rows(grad, n));
                        match layout {
                            Layout::Rows => products.matmul(xt, dy, k, m, n),
                            Layout::Transposed => {
                                products.matmul(dy.transpose(), xt.transpose(), n, m, k)
                            }
                        }
                    });
                    let shape = layout.stored([k, n]);
                    grads.register::<Flex>(parent.id, flex_tensor(dw, shape));
                }
            });
        }
    }

    /// `x` by the `[k, n]` matrix `weight` holds in `layout`, recording [`ProductStep`] when
    /// either needs its gradient.
    pub fn product(
        products: Products,
        x: Tensor<Autodiff<Flex>, 2>,
        weight: Tensor<Autodiff<Flex>, 2>,
        layout: Layout,
    ) -> Tensor<Autodiff<Flex>, 2> {
        let [m, k] = x.dims();
        let n = layout.columns(k, weight.dims());
        let (x, weight) = (
            x.into_primitive().tensor(),
            weight.into_primitive().tensor(),
        );
        let forward = |x, weight| forward_product(products, x, weight, [m, k, n], layout);
        let output = match ProductStep(products, layout)
            .prepare::<NoCheckpointing>([x.node.clone(), weight.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let state = (x.primitive.clone(), weight.primitive.clone(), [m, k, n]);
                prep.finish(state, forward(x.primitive, weight.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(x.primitive, weight.primitive)),
        };
        Tensor::from_primitive(TensorPrimitive::Float(output))
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;

    use super::*;

    fn max_difference(a: Tensor<Flex, 2>, b: Tensor<Flex, 2>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    /// The forward and both gradients against burn's `matmul`: equal in f32 (the same gemm
    /// calls), within bf16's rounding in bf16.
    #[test]
    fn products_and_gradients_match_burns_matmul() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let bf16 = [Some(Bf16Kernel::Portable), Bf16Kernel::best()];
        let all =
            std::iter::once(Products::F32).chain(bf16.into_iter().flatten().map(Products::Bf16));
        // Small and large enough for gemm's threads, through a partial tile.
        for [m, k, n] in [[40, 48, 20], [300, 384, 200]] {
            let x = Tensor::<B, 2>::random([m, k], Distribution::Default, &device).require_grad();
            let w = Tensor::<B, 2>::random([k, n], Distribution::Default, &device).require_grad();
            let target = Tensor::<B, 2>::random([m, n], Distribution::Default, &device);
            let loss = |y: Tensor<B, 2>| (y * target.clone()).sum();
            let grads_burn = loss(x.clone().matmul(w.clone())).backward();
            for products in all.clone() {
                let y = training::product(products, x.clone(), w.clone(), Layout::Rows);
                let forward =
                    max_difference(y.clone().inner(), x.clone().matmul(w.clone()).inner());
                let grads = loss(y).backward();
                let dx = max_difference(x.grad(&grads).unwrap(), x.grad(&grads_burn).unwrap());
                let dw = max_difference(w.grad(&grads).unwrap(), w.grad(&grads_burn).unwrap());
                for (what, difference) in [("y", forward), ("dx", dx), ("dw", dw)] {
                    match products {
                        Products::F32 => assert_eq!(difference, 0.0, "{m}×{k}×{n} {what}"),
                        // Sums of up to 384 products of values in [0, 1): bf16's relative 2⁻⁹
                        // per operand.
                        Products::Bf16(_) => assert!(
                            difference > 0.0 && difference < 0.2 * (k.max(m) as f32 / 48.0),
                            "{products:?} {m}×{k}×{n} {what}: {difference}"
                        ),
                    }
                }
            }
        }
    }

    /// A product with a transposed weight on `Flex` against burn's, for many rows (gemm reads
    /// the transpose in place) and one (a decoding step's); under autodiff, its gradients too.
    #[test]
    fn transposed_weights_equal_burns_product() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let weight = Tensor::<Flex, 2>::random([700, 64], Distribution::Default, &device);
        for rows in [17, 1] {
            let x = Tensor::<Flex, 2>::random([rows, 64], Distribution::Default, &device);
            let ours = matmul(x.clone(), weight.clone(), Layout::Transposed).expect("Flex is ours");
            let burns = x.matmul(weight.clone().transpose());
            assert!(max_difference(ours, burns) < 1e-5);
        }
        let x = Tensor::<B, 2>::random([300, 64], Distribution::Default, &device).require_grad();
        let w = Tensor::<B, 2>::from_inner(weight).require_grad();
        let target = Tensor::<B, 2>::random([300, 700], Distribution::Default, &device);
        let loss = |y: Tensor<B, 2>| (y * target.clone()).sum();
        let burns = x.clone().matmul(w.clone().transpose());
        let grads_burn = loss(burns.clone()).backward();
        let ours =
            matmul(x.clone(), w.clone(), Layout::Transposed).expect("Autodiff<Flex> is ours");
        assert!(max_difference(ours.clone().inner(), burns.inner()) < 1e-4);
        let grads = loss(ours).backward();
        let dx = max_difference(x.grad(&grads).unwrap(), x.grad(&grads_burn).unwrap());
        let dw = max_difference(w.grad(&grads).unwrap(), w.grad(&grads_burn).unwrap());
        assert!(dx < 1e-3 && dw < 1e-3, "dx {dx}, dw {dw}");
    }

    /// A linear layer through [`forward`] on `Flex` and on `Autodiff<Flex>`, bias included,
    /// gives burn's `Linear::forward` exactly (for more than one row: gemm's own calls).
    #[test]
    fn linear_layers_equal_burns_on_flex_and_autodiff() {
        let device = Default::default();
        let linear: Linear<Flex> = burn::nn::LinearConfig::new(64, 24).init(&device);
        let x = Tensor::<Flex, 2>::random([17, 64], Distribution::Default, &device);
        let ours = forward(&linear, x.clone()).expect("Flex is ours");
        assert_eq!(max_difference(ours, linear.forward(x.clone())), 0.0);
        let trained: Linear<Autodiff<Flex>> = burn::nn::LinearConfig::new(64, 24).init(&device);
        let xa = Tensor::<Autodiff<Flex>, 2>::from_inner(x);
        let ours = forward(&trained, xa.clone()).expect("Autodiff<Flex> is ours");
        assert_eq!(
            max_difference(ours.inner(), trained.forward(xa).inner()),
            0.0
        );
    }
}
