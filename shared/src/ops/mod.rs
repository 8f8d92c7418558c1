//! Hand-written kernels and fused operations the models stand on: int8 and bf16 matrix
//! products per instruction set (AMX, AVX-512, AVX2, and WebAssembly's SIMD128 and relaxed
//! SIMD), BERT's and T5's linear layers and attention products on burn's CPU backend as ops of ours with
//! their gradients (`cpu_products`), GELU and tanh, additive attention scores, softmax,
//! LayerNorm, dropout, the attention heads' reshapes and the token loss over a vocabulary as
//! loops (and, for training, autodiff ops with one-pass gradients), and the fixed-order f32 steps that make the page's numbers native's
//! (`portable`). The architectures that use them are in [`crate::models`].

pub mod activation;
pub mod additive_scores;
#[cfg(target_arch = "x86_64")]
pub mod amx;
#[cfg(not(target_arch = "wasm32"))]
pub mod bf16;
pub mod chunks;
#[cfg(not(target_arch = "wasm32"))]
pub mod cpu_products;
pub mod dot;
pub mod dropout;
pub mod heads;
pub mod int8;
pub mod layer_norm;
#[cfg(not(target_arch = "wasm32"))]
pub mod lstm;
pub mod portable;
pub mod products;
pub mod softmax;
#[cfg(not(target_arch = "wasm32"))]
pub mod token_nll;

/// `value` as `U`, which it is: the fast paths on burn's CPU backend match a generic backend's
/// tensors by downcasting, and hand their results back through this.
pub fn same_type<T: 'static, U: 'static>(value: T) -> U {
    *(Box::new(value) as Box<dyn std::any::Any>)
        .downcast::<U>()
        .expect("the value has the type it was matched as")
}

/// A tensor's values as f32, in row-major order.
pub(crate) fn values<B: burn::tensor::backend::Backend, const D: usize>(
    tensor: burn::tensor::Tensor<B, D>,
) -> Vec<f32> {
    tensor
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("converted to f32")
}

/// Registers `values`, of `shape`, as the gradient of an op's input `parent`, if it needs one
/// (an autodiff op of ours on burn's CPU backend).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn register_gradient(
    grads: &mut burn::backend::autodiff::grads::Gradients,
    parent: Option<burn::backend::autodiff::NodeId>,
    values: Vec<f32>,
    shape: Vec<usize>,
) {
    if let Some(id) = parent {
        let tensor = burn::tensor::TensorData::new(values, shape);
        grads.register::<burn::backend::Flex>(
            id,
            burn::backend::flex::FlexTensor::from_data(tensor),
        );
    }
}
