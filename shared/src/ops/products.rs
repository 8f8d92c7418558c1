//! The matrix products the models call: a linear layer over every token as one product, and
//! batches of small products (attention's). On burn's CPU backend they are our ops
//! ([`crate::ops::cpu_products`]: f32, or bf16 while training in bf16), elsewhere burn's.

use burn::nn::Linear;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

#[cfg(not(target_arch = "wasm32"))]
use super::cpu_products::linear as cpu;

/// `linear` applied to every token of `[batch, seq, width]` as one `[batch·seq, width]` matrix
/// product: burn's `linear` on a 3-d input multiplies each sequence separately (burn-flex: one
/// small gemm per sequence, packing the weights again for each, and under autodiff a weight
/// gradient per sequence, summed afterwards).
pub fn per_token<B: Backend>(linear: &Linear<B>, input: Tensor<B, 3>) -> Tensor<B, 3> {
    per_token_or(linear, input, |_, rows| Err(rows))
}

/// [`per_token`], trying `first` before the CPU backend's op and burn's: it gives the product,
/// or the rows back (BERT's int8 copies).
pub fn per_token_or<B: Backend>(
    linear: &Linear<B>,
    input: Tensor<B, 3>,
    first: impl FnOnce(&Linear<B>, Tensor<B, 2>) -> Result<Tensor<B, 2>, Tensor<B, 2>>,
) -> Tensor<B, 3> {
    let [batch, seq, width] = input.dims();
    let rows = input.reshape([batch * seq, width]);
    let output = first(linear, rows);
    #[cfg(not(target_arch = "wasm32"))]
    let output = output.or_else(|rows| cpu::forward(linear, rows));
    let output = output.unwrap_or_else(|rows| linear.forward(rows));
    let [_, out_width] = output.dims();
    output.reshape([batch, seq, out_width])
}

/// `a · b` over batches of matrices (the same leading dimensions; burn's `matmul` broadcasts
/// the others).
pub fn batched_matmul<B: Backend>(a: Tensor<B, 4>, b: Tensor<B, 4>) -> Tensor<B, 4> {
    #[cfg(not(target_arch = "wasm32"))]
    let (a, b) = match super::cpu_products::batched::forward(a, b) {
        Ok(product) => return product,
        Err(operands) => operands,
    };
    a.matmul(b)
}

/// `rows · weightᵀ` for a row-major `[n, k]` weight (an output projection tied to the
/// embedding): on burn's CPU backend (training too) without copying the transpose, else
/// burn's `matmul`.
pub fn matmul_transposed<B: Backend>(rows: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    #[cfg(not(target_arch = "wasm32"))]
    let (rows, weight) = match cpu::matmul(rows, weight, cpu::Layout::Transposed) {
        Ok(product) => return product,
        Err(operands) => operands,
    };
    rows.matmul(weight.transpose())
}

/// `rows · weight` for a row-major `[k, n]` weight: on burn's CPU backend (training too) as a
/// linear layer's product, else burn's `matmul`.
pub fn matmul<B: Backend>(rows: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    #[cfg(not(target_arch = "wasm32"))]
    let (rows, weight) = match cpu::matmul(rows, weight, cpu::Layout::Rows) {
        Ok(product) => return product,
        Err(operands) => operands,
    };
    rows.matmul(weight)
}
