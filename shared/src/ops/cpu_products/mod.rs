//! BERT's and T5's matrix products on burn's CPU backend as ops of ours: the linear layers ([`linear`])
//! and attention's batches of small products ([`batched`]), on `Flex` and, when training, on
//! `Autodiff<Flex>` with their gradients. Each product is either f32 through `gemm` (the library
//! burn-flex multiplies with, called as burn-flex calls it, so the values are burn's to the bit;
//! a single row by a loop of ours, within f32 rounding of them) or bf16 while a [`Bf16Training`]
//! lives. burn-flex's own `matmul` zero-fills each output and
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
use super::dot::dot;

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

/// `a · b` in f32 by `gemm`, as burn-flex calls it for a 2-d `matmul`; a single row times a
/// matrix stored by rows or columns by [`row_times_matrix`].
fn f32_matmul(a: Strided, b: Strided, m: usize, k: usize, n: usize) -> Vec<f32> {
    if m == 1 && (b.column == 1 || b.row == 1) {
        return row_times_matrix(a, b, k, n);
    }
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

/// `a · b` for one row `a` (`k` values) and a `b` stored by rows or by columns, reading `b`
/// once, in storage order, into blocks of the output on rayon's threads. `gemm` packs `b`
/// before multiplying, which for one row (a decoding step's) costs more than the product: in
/// `perf`, packing was a quarter of T5's sampling. The sums run over `k` in order (by rows) or
/// by [`dot`] (by columns), so they can differ from `gemm`'s in the last bits (and a row decoded
/// alone from the same row in a batch).
fn row_times_matrix(a: Strided, b: Strided, k: usize, n: usize) -> Vec<f32> {
    assert!(
        k == 0 || (k - 1) * a.column < a.values.len(),
        "a is not 1 × {k}"
    );
    let last = (k.max(1) - 1) * b.row + (n.max(1) - 1) * b.column;
    assert!(k * n == 0 || last < b.values.len(), "b is not {k} × {n}");
    const BLOCK: usize = 512;
    let mut output = vec![0.0f32; n];
    if b.column == 1 {
        for_each_chunk_mut(&mut output, BLOCK, |i, out| {
            let start = i * BLOCK;
            for row in 0..k {
                let x = a.values[row * a.column];
                let weights = &b.values[row * b.row + start..][..out.len()];
                for (sum, &w) in out.iter_mut().zip(weights) {
                    *sum += x * w;
                }
            }
        });
    } else {
        debug_assert_eq!(b.row, 1, "b is stored by rows or by columns");
        let a: Vec<f32> = (0..k).map(|i| a.values[i * a.column]).collect();
        for_each_chunk_mut(&mut output, BLOCK, |i, out| {
            for (j, sum) in out.iter_mut().enumerate() {
                let column = &b.values[(i * BLOCK + j) * b.column..][..k];
                *sum = dot(&a, column);
            }
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One row times a matrix stored by rows or by columns, the row read through a stride (a
    /// column of a row-major matrix) and the output over several blocks and a partial one,
    /// against `gemm`.
    #[test]
    fn a_single_row_matches_gemm() {
        let (k, n) = (300, 1_100);
        let a_values: Vec<f32> = (0..k * 3)
            .map(|i| ((i * 31) % 17) as f32 * 0.1 - 0.8)
            .collect();
        let b_values: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7) % 23) as f32 * 0.05 - 0.5)
            .collect();
        // The second column of a k × 3 matrix.
        let a = Strided {
            values: &a_values[1..],
            row: 1,
            column: 3,
        };
        // b stored by rows (k × n), and by columns (the transpose of an n × k matrix).
        for b in [
            Strided::rows(&b_values, n),
            Strided::transposed(&b_values, k),
        ] {
            let ours = f32_matmul(a, b, 1, k, n);
            let mut expected = vec![0.0f32; n];
            f32_matmul_into([a, b], [1, k, n], &mut expected, gemm::Parallelism::None);
            for (j, (x, y)) in ours.iter().zip(&expected).enumerate() {
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{j}: {x} vs {y}");
            }
        }
    }
}
