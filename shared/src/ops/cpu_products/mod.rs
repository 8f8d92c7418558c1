//! BERT's matrix products on burn's CPU backend as ops of ours: the linear layers ([`linear`])
//! and attention's batches of small products ([`batched`]), on `Flex` and, when training, on
//! `Autodiff<Flex>` with their gradients. Each product is either f32 through `gemm` (the library
//! burn-flex multiplies with, called as burn-flex calls it, so the values are burn's to the bit)
//! or bf16 while a [`Bf16Training`] lives. burn-flex's own `matmul` zero-fills each output and
//! then copies it into a buffer aligned to 16 bytes (in `perf`, 4 % of a fine-tuning step's
//! samples, on the one thread that drives the step while the others wait); here the product is
//! written once, into a zeroed vector that becomes the tensor's storage as it is.

use std::mem::MaybeUninit;

use burn::backend::Flex;
use burn::tensor::ops::FloatTensor;

#[cfg(doc)]
use super::bf16::Bf16Training;
use super::bf16::{self, Bf16Kernel, Strided, Threads};
use super::chunks::for_each_chunk_mut;

pub mod batched;
pub mod linear;

/// How the products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    /// f32, by `gemm`.
    F32,
    /// Operands rounded to bf16, sums in f32 ([`bf16::matmul`]).
    Bf16(Bf16Kernel),
}

impl Products {
    /// `a · b` (`a`: `m × k`, `b`: `k × n`), row-major.
    pub fn matmul(self, a: Strided, b: Strided, m: usize, k: usize, n: usize) -> Vec<f32> {
        match self {
            Self::F32 => f32_matmul(a, b, m, k, n),
            Self::Bf16(kernel) => bf16::matmul(kernel, a, b, m, k, n),
        }
    }

    /// The products `operands(i)` (`m × k` by `k × n`) of `items` pairs, one after another in
    /// `items` blocks of `m · n` values: the batch spread over rayon's threads, each product
    /// computed on one.
    pub fn batch<'a>(
        self,
        items: usize,
        [m, k, n]: [usize; 3],
        operands: impl Fn(usize) -> [Strided<'a>; 2] + Send + Sync,
    ) -> Vec<f32> {
        let len = items * m * n;
        match self {
            Self::F32 => {
                let mut output = vec![0.0f32; len];
                for_each_chunk_mut(&mut output, m * n, |i, out| {
                    f32_matmul_into(operands(i), [m, k, n], out, gemm::Parallelism::None);
                });
                output
            }
            Self::Bf16(kernel) => {
                let mut output: Vec<f32> = Vec::with_capacity(len);
                let out: &mut [MaybeUninit<f32>] = &mut output.spare_capacity_mut()[..len];
                for_each_chunk_mut(out, m * n, |i, out| {
                    bf16::matmul_into(kernel, operands(i), [m, k, n], out, Threads::Caller);
                });
                // SAFETY: every product wrote its `m · n` values.
                unsafe { output.set_len(len) };
                output
            }
        }
    }

    /// How this thread's products are computed on `Autodiff<Flex>`: in bf16 while a
    /// [`Bf16Training`] lives, else in f32.
    fn training() -> Self {
        bf16::training_kernel().map_or(Self::F32, Self::Bf16)
    }
}

/// The products at or above which `gemm` runs on rayon's threads: burn-flex's threshold, so that
/// both split the same products the same way.
const PARALLEL_PRODUCTS: usize = 192 * 192 * 192;

/// `a · b` in f32 by `gemm`, as burn-flex calls it for a 2-d `matmul`.
fn f32_matmul(a: Strided, b: Strided, m: usize, k: usize, n: usize) -> Vec<f32> {
    // Zeroed rather than uninitialised: gemm reads a partial tile's old values before it
    // overwrites them.
    let mut output = vec![0.0f32; m * n];
    let parallelism = if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_PRODUCTS {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    f32_matmul_into([a, b], [m, k, n], &mut output, parallelism);
    output
}

/// `a · b` in f32 by `gemm` into `output` (`m · n` values, row-major).
fn f32_matmul_into(
    [a, b]: [Strided; 2],
    [m, k, n]: [usize; 3],
    output: &mut [f32],
    parallelism: gemm::Parallelism,
) {
    let last = |s: &Strided, rows: usize, columns: usize| {
        (rows.max(1) - 1) * s.row + (columns.max(1) - 1) * s.column
    };
    assert!(
        m * k == 0 || last(&a, m, k) < a.values.len(),
        "a is not {m} × {k}"
    );
    assert!(
        k * n == 0 || last(&b, k, n) < b.values.len(),
        "b is not {k} × {n}"
    );
    assert_eq!(output.len(), m * n);
    if m * n == 0 {
        return;
    }
    let stride = |s: usize| s as isize;
    // SAFETY: the output holds m × n values, written at row stride n; `a` and `b` hold every
    // value their strides reach (asserted above); gemm reads nothing else.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            output.as_mut_ptr(),
            1,
            stride(n),
            false,
            a.values.as_ptr(),
            stride(a.column),
            stride(a.row),
            b.values.as_ptr(),
            stride(b.column),
            stride(b.row),
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Calls `f` with the tensor's values in row-major order, copying only when they are not.
fn with_values<R>(tensor: FloatTensor<Flex>, f: impl FnOnce(&[f32]) -> R) -> R {
    match tensor.as_slice::<f32>() {
        Some(values) => f(values),
        None => {
            let data = tensor.into_data();
            f(data
                .as_slice::<f32>()
                .expect("an f32 tensor holds f32 values"))
        }
    }
}
