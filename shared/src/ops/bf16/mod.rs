//! Fine-tuning's matrix products in bf16 on CPUs with AMX or AVX-512 BF16: the linear layers'
//! `x · W` and both of its gradients (`dy · Wᵀ`, `xᵀ · dy`) round their operands to bf16 (8 bits
//! of mantissa, f32's range) and sum the products in f32 — the mixed precision of PyTorch's CPU autocast,
//! with the master weights, the optimizer and everything besides these products in f32.
//! AMX's `tdpbf16ps` multiplies a 16 × 32 tile of bf16 rows by a 32 × 16 tile of weights per
//! instruction; without AMX (AMD Zen 4 and later, Intel Cooper Lake), AVX-512 BF16's `vdpbf16ps`
//! adds 16 sums of two products each, on the same packed operands.
//!
//! BERT's linear layers and attention products use these kernels through
//! [`super::cpu_products`].
//! Opt-in ([`Bf16Training::enter`], `classifier train --bf16`): the trained weights then depend
//! on the CPU's kind, where f32 training gives the same model everywhere. [`Bf16Kernel::Portable`]
//! computes the same rounded products with plain loops on any CPU, for the tests.

use std::cell::Cell;
use std::mem::MaybeUninit;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::tensor::TensorData;
use burn::tensor::ops::FloatTensor;

#[cfg(target_arch = "x86_64")]
use super::amx;
use super::chunks::for_each_chunk_mut;

#[cfg(target_arch = "x86_64")]
mod pack;

/// Rows (and columns) of the output block one AMX step computes: two tiles of 16 each way.
const BLOCK: usize = 32;
/// Inputs per AMX step: a tile row holds 32 bf16 values.
const STEP: usize = 32;
/// Steps per chunk of a panel that the blocks of a task share (256 inputs: 16 KB of the panel).
const CHUNK_STEPS: usize = 8;

/// How the bf16 products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// AMX's `tdpbf16ps` on tiles.
    Amx,
    /// AVX-512 BF16's `vdpbf16ps` on registers: eight rows of 32 sums at a time.
    Avx512,
    /// Plain loops over the same rounded values (slow; what the tests hold the others to).
    Portable,
}

impl Bf16Kernel {
    /// The packed kernels this CPU runs, fastest first: AMX where it has its bf16 products and
    /// Linux lets the process use them, AVX-512 BF16; none without AVX-512 BF16 (the packing's
    /// rounding).
    pub fn available() -> Vec<Self> {
        [Self::Amx, Self::Avx512]
            .into_iter()
            .filter(|kernel| kernel.usable())
            .collect()
    }

    /// The fastest of [`Self::available`].
    pub fn best() -> Option<Self> {
        Self::available().into_iter().next()
    }

    /// Whether this CPU runs the kernel.
    pub fn usable(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return match self {
            Self::Amx => amx::bf16_usable() && pack::usable(),
            Self::Avx512 => pack::usable(),
            Self::Portable => true,
        };
        #[cfg(not(target_arch = "x86_64"))]
        return self == Self::Portable;
    }

    /// What the kernel computes with, for the benches' tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Amx => "AMX",
            Self::Avx512 => "AVX-512 BF16",
            Self::Portable => "portable",
        }
    }
}

/// A matrix read through strides: element `(r, c)` is `values[r · row + c · column]`, so a
/// row-major matrix and its transpose are both views of the same values.
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    pub values: &'a [f32],
    pub row: usize,
    pub column: usize,
}

impl<'a> Strided<'a> {
    /// A row-major matrix of `columns` columns.
    pub fn rows(values: &'a [f32], columns: usize) -> Self {
        Self {
            values,
            row: columns,
            column: 1,
        }
    }

    /// The transpose of a row-major matrix of `columns` columns.
    pub fn transposed(values: &'a [f32], columns: usize) -> Self {
        Self {
            values,
            row: 1,
            column: columns,
        }
    }

    /// The same values read as this matrix's transpose.
    pub fn transpose(self) -> Self {
        Self {
            values: self.values,
            row: self.column,
            column: self.row,
        }
    }

    fn at(&self, r: usize, c: usize) -> f32 {
        self.values[r * self.row + c * self.column]
    }
}

/// `x` rounded to the nearest bf16 (ties to even), as its 16 bits.
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = (bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16) as u16;
    // A NaN stays a quiet NaN, whatever its payload (rounding could carry it into the exponent
    // or the sign).
    let quiet = (bits >> 16) as u16 | 0x40;
    // All ones when |x|'s bits exceed infinity's (a NaN): arithmetic, so loops stay vectorised.
    let nan = ((0x7f80_0000 - (bits & 0x7fff_ffff) as i32) >> 31) as u16;
    rounded ^ ((rounded ^ quiet) & nan)
}

fn from_bf16(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `a · b` (`a`: `m × k`, `b`: `k × n`) row-major, its operands rounded to bf16 and the products
/// summed in f32.
pub fn matmul(
    kernel: Bf16Kernel,
    a: Strided,
    b: Strided,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut output = Vec::with_capacity(m * n);
    matmul_into(
        kernel,
        [a, b],
        [m, k, n],
        &mut output.spare_capacity_mut()[..m * n],
        Threads::Rayon,
    );
    // SAFETY: `matmul_into` wrote all `m · n` values.
    unsafe { output.set_len(m * n) };
    output
}

/// Where a product's blocks are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threads {
    /// On rayon's threads: one large product.
    Rayon,
    /// One after another on the calling thread: one of a batch of small products, the batch
    /// spread over rayon's threads ([`super::cpu_products::batched`]).
    Caller,
}

impl Threads {
    /// Calls `f(i, chunk)` for the `i`-th chunk of `chunk` values of `values`.
    fn for_each_chunk<T, F>(self, values: &mut [T], chunk: usize, f: F)
    where
        T: Send,
        F: Fn(usize, &mut [T]) + Send + Sync,
    {
        match self {
            Self::Rayon => for_each_chunk_mut(values, chunk, f),
            Self::Caller => {
                for (i, values) in values.chunks_mut(chunk.max(1)).enumerate() {
                    f(i, values);
                }
            }
        }
    }
}

/// [`matmul`] into `output` (`m · n` values, every one written).
pub(crate) fn matmul_into(
    kernel: Bf16Kernel,
    [a, b]: [Strided; 2],
    [m, k, n]: [usize; 3],
    output: &mut [MaybeUninit<f32>],
    threads: Threads,
) {
    assert_eq!(output.len(), m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        output.fill(MaybeUninit::new(0.0));
        return;
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Amx | Bf16Kernel::Avx512 => {
            packed_matmul(kernel, a, b, [m, k, n], output, threads)
        }
        #[cfg(not(target_arch = "x86_64"))]
        Bf16Kernel::Amx | Bf16Kernel::Avx512 => {
            unreachable!("Bf16Kernel::best gives AMX and AVX-512 only on x86-64")
        }
        Bf16Kernel::Portable => portable_matmul(a, b, [m, k, n], output, threads),
    }
}

fn portable_matmul(
    a: Strided,
    b: Strided,
    [_, k, n]: [usize; 3],
    output: &mut [MaybeUninit<f32>],
    threads: Threads,
) {
    let round = |x: f32| from_bf16(to_bf16(x));
    let b_columns: Vec<Vec<f32>> = (0..n)
        .map(|c| (0..k).map(|i| round(b.at(i, c))).collect())
        .collect();
    threads.for_each_chunk(output, n, |r, out| {
        let row: Vec<f32> = (0..k).map(|i| round(a.at(r, i))).collect();
        for (value, column) in out.iter_mut().zip(&b_columns) {
            value.write(row.iter().zip(column).map(|(x, w)| x * w).sum());
        }
    });
}

/// The product on packed operands (AMX or AVX-512 BF16), blocked for the caches: a task takes a
/// group of row blocks; for each panel it goes through the inputs a chunk at a time, and
/// multiplies every block of its group by the panel's chunk before the next chunk, so that the
/// chunk (16 KB) is read from L1 by all of them.
#[cfg(target_arch = "x86_64")]
fn packed_matmul(
    kernel: Bf16Kernel,
    a: Strided,
    b: Strided,
    [m, k, n]: [usize; 3],
    output: &mut [MaybeUninit<f32>],
    threads: Threads,
) {
    assert!(
        kernel != Bf16Kernel::Portable && kernel.usable(),
        "{kernel:?} on a CPU without it (see Bf16Kernel::best)"
    );
    let (rows, width) = pack::rows(a, m, k, threads);
    let panels = pack::panels(b, k, n, width, threads);
    let panel_len = width * BLOCK;
    let blocks = m.div_ceil(BLOCK);
    // Groups of four blocks where that still leaves each thread several tasks.
    let group = if threads == Threads::Caller || blocks >= 16 * rayon::current_num_threads() {
        4
    } else {
        1
    };
    // Every element is written below (each row, panel by panel).
    threads.for_each_chunk(output, group * BLOCK * n, |task, out| {
        // SAFETY: for AMX, checked above that the CPU has AMX-BF16 and its tiles are ours to
        // use; a task that already holds configured tiles (the same shape) keeps them.
        let _tiles = (kernel == Bf16Kernel::Amx && !amx::configured())
            .then(|| unsafe { amx::Tiles::configure() });
        let real_rows = out.len() / n;
        let group_rows =
            &rows[task * group * BLOCK * width..][..real_rows.div_ceil(BLOCK) * BLOCK * width];
        let blocks = real_rows.div_ceil(BLOCK);
        // A whole block's sums accumulate where they belong in `out`; a block at the bottom or
        // right edge keeps them here and copies its real rows and columns (none where both the
        // rows and `n` are whole blocks, as in the model's products: no buffer then).
        let edges = real_rows % BLOCK != 0 || n % BLOCK != 0;
        let mut edge_sums = vec![[[0.0f32; BLOCK]; BLOCK]; if edges { blocks } else { 0 }];
        // One pointer into each buffer, taken once, that the kernel's loads and stores go through.
        let (out_values, edge_values) = (out.as_mut_ptr().cast::<f32>(), edge_sums.as_mut_ptr());
        for (panel, weights) in panels.chunks(panel_len).enumerate() {
            let first = panel * BLOCK;
            let columns = BLOCK.min(n - first);
            let whole = |block: usize| columns == BLOCK && (block + 1) * BLOCK <= real_rows;
            for first_step in (0..width / STEP).step_by(CHUNK_STEPS) {
                let steps = first_step..(first_step + CHUNK_STEPS).min(width / STEP);
                for (block, block_rows) in group_rows.chunks(BLOCK * width).enumerate() {
                    // SAFETY: the kernel is usable (asserted above), for AMX the tiles are
                    // configured; the lengths are the packings' above; a whole block's 32 rows
                    // of 32 sums lie within `out`, `n` values apart (its last,
                    // `(block · 32 + 31) · n + first + 31`, is below `real_rows · n`), an edge
                    // block's in its own `Sums`.
                    unsafe {
                        let (sums, pitch) = match whole(block) {
                            true => (out_values.add(block * BLOCK * n + first), n * 4),
                            false => (edge_values.add(block).cast(), amx::SUMS_PITCH),
                        };
                        let block = [block_rows, weights];
                        match kernel {
                            Bf16Kernel::Amx => amx_block(block, width, steps.clone(), sums, pitch),
                            _ => avx512_block(block, width, steps.clone(), sums, pitch),
                        }
                    }
                }
            }
            for block in (0..blocks).filter(|&block| !whole(block)) {
                let rows = BLOCK.min(real_rows - block * BLOCK);
                for (r, sums) in edge_sums[block].iter().take(rows).enumerate() {
                    let r = block * BLOCK + r;
                    // SAFETY: row `r` of the task's rows, columns `first..first + columns` of
                    // `n`: within `out`, written through the pointer the kernel uses too.
                    unsafe {
                        let to = out_values.add(r * n + first);
                        std::ptr::copy_nonoverlapping(sums.as_ptr(), to, columns);
                    }
                }
            }
        }
    });
}

/// Adds the products of `steps` (of 32 inputs each) to one 32 × 32 block of sums at `sums`,
/// rows `pitch` bytes apart (starting from zero at step 0): per step, two tiles of 16 rows
/// (pitch: the rows' width) times the panel's two halves of 16 columns (pitch: a pair's 32
/// columns × 2 values) into four 16 × 16 tiles of f32.
///
/// # Safety
/// This thread's tiles are configured ([`amx::Tiles`]); `rows` holds 32 rows of `width` values
/// and `weights` `width / 2` pairs of 32 columns; `sums` is valid for 32 rows of 32 values
/// `pitch` bytes apart (read only after step 0 wrote them).
#[cfg(target_arch = "x86_64")]
unsafe fn amx_block(
    [rows, weights]: [&[u16]; 2],
    width: usize,
    steps: std::ops::Range<usize>,
    sums: *mut f32,
    pitch: usize,
) {
    use std::arch::asm;
    assert!(rows.len() >= BLOCK * width && weights.len() >= width * BLOCK);
    assert!(steps.end * STEP <= width);
    let (a, b) = (rows.as_ptr(), weights.as_ptr());
    let row_pitch = width * 2;
    let pair_pitch = BLOCK * 2 * 2;
    // SAFETY: each step reads 32 rows × 64 bytes of `rows` and 16 pairs × 128 bytes of
    // `weights`, within the lengths asserted; the loads and stores of the sums are the caller's.
    unsafe {
        if steps.start == 0 {
            amx::zero_sums();
        } else {
            amx::load_sums(sums, pitch);
        }
        for step in steps {
            let a = a.add(step * STEP);
            let b = b.add(step * (STEP / 2) * BLOCK * 2);
            asm!(
                "tileloadd tmm4, [{a} + {row_pitch}*1]",
                "tileloadd tmm5, [{a16} + {row_pitch}*1]",
                "tileloadd tmm6, [{b} + {pair_pitch}*1]",
                "tileloadd tmm7, [{b16} + {pair_pitch}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a = in(reg) a,
                a16 = in(reg) a.add(16 * width),
                row_pitch = in(reg) row_pitch,
                b = in(reg) b,
                b16 = in(reg) b.add(32),
                pair_pitch = in(reg) pair_pitch,
                options(nostack, readonly)
            );
        }
        amx::store_sums(sums, pitch);
    }
}

/// [`amx_block`] with AVX-512 BF16's `vdpbf16ps`: eight rows at a time, whose 32 sums each stay
/// in two registers through the steps; per pair of inputs, each row's pair is broadcast and
/// multiplied by the panel's pair of 32 columns (two registers, read once for the eight rows).
///
/// # Safety
/// As [`amx_block`]'s, but for the tiles: this CPU has AVX-512 BF16 ([`pack::usable`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn avx512_block(
    [rows, weights]: [&[u16]; 2],
    width: usize,
    steps: std::ops::Range<usize>,
    sums: *mut f32,
    pitch: usize,
) {
    use std::arch::x86_64::*;
    const ROWS: usize = 8;
    assert!(rows.len() >= BLOCK * width && weights.len() >= width * BLOCK);
    assert!(steps.end * STEP <= width);
    let pairs = steps.start * STEP / 2..steps.end * STEP / 2;
    let as_bf16 = |values: __m512| -> __m512bh {
        // SAFETY: both are 64 bytes of plain values.
        unsafe { std::mem::transmute(values) }
    };
    for group in (0..BLOCK).step_by(ROWS) {
        // SAFETY: row `group + r` of the block's 32 rows of sums, `pitch` bytes apart (the
        // caller's); each row's pairs are `width / 2` four-byte values of `rows`, and each pair of
        // inputs' 32 columns 128 bytes of `weights` (lengths asserted above).
        unsafe {
            let row_sums = |r: usize| sums.byte_add((group + r) * pitch);
            let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
            if steps.start != 0 {
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = [0, 16].map(|c| _mm512_loadu_ps(row_sums(r).add(c)));
                }
            }
            let first_row = rows.as_ptr().add(group * width).cast::<i32>();
            for pair in pairs.clone() {
                let columns = weights.as_ptr().add(pair * BLOCK * 2).cast::<f32>();
                let halves = [0, 16].map(|c| as_bf16(_mm512_loadu_ps(columns.add(c))));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let inputs = first_row.add(r * width / 2 + pair).read_unaligned();
                    let inputs = as_bf16(_mm512_castsi512_ps(_mm512_set1_epi32(inputs)));
                    for (acc, half) in acc.iter_mut().zip(halves) {
                        *acc = _mm512_dpbf16_ps(*acc, inputs, half);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (c, acc) in [0, 16].into_iter().zip(acc) {
                    _mm512_storeu_ps(row_sums(r).add(c), *acc);
                }
            }
        }
    }
}

thread_local! {
    /// The kernel the linear layers and the attention's products train with on this thread,
    /// while a [`Bf16Training`] lives.
    static TRAINING: Cell<Option<Bf16Kernel>> = const { Cell::new(None) };
}

/// While it lives, BERT's linear layers and attention products ([`super::cpu_products`]) on
/// `Autodiff<Flex>` multiply in bf16 on this thread (the thread that runs the forward passes;
/// their backward steps keep the kernel).
/// Not `Send`: it restores the thread it was made on.
pub struct Bf16Training(Option<Bf16Kernel>, std::marker::PhantomData<*const ()>);

impl Bf16Training {
    /// Trains in bf16 with `kernel` until the returned value is dropped.
    pub fn enter(kernel: Bf16Kernel) -> Self {
        Self(TRAINING.replace(Some(kernel)), std::marker::PhantomData)
    }
}

impl Drop for Bf16Training {
    fn drop(&mut self) {
        TRAINING.set(self.0);
    }
}

/// The kernel BERT's linear layers and attention products train with on this thread: the one a
/// living [`Bf16Training`] set, if any.
pub fn training_kernel() -> Option<Bf16Kernel> {
    TRAINING.get()
}

/// A Flex tensor of `shape` holding `values` (row-major).
pub(crate) fn flex_tensor(
    values: Vec<f32>,
    shape: impl Into<burn::tensor::Shape>,
) -> FloatTensor<Flex> {
    FlexTensor::from_data(TensorData::new(values, shape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        SplitMix64(seed).centred_f32s(n, 1.0)
    }

    #[test]
    fn rounding_to_bf16_keeps_eight_bits_and_ties_to_even() {
        assert_eq!(from_bf16(to_bf16(1.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 128.0)), 1.0 + 1.0 / 128.0);
        // Half-way between 1 and 1 + 2⁻⁷: to the even one, 1.
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0);
        // Half-way between 1 + 2⁻⁷ and 1 + 2⁻⁶: to the even one, 1 + 2⁻⁶.
        assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 1.0 / 64.0);
        // f32's range: large values stay finite, within half a step (2⁻⁸ relative).
        assert_eq!(from_bf16(to_bf16(-3.0e38)), -3.004_055_3e38);
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
        for nan in [
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffff_ffff),
        ] {
            assert!(from_bf16(to_bf16(nan)).is_nan(), "{:#x}", nan.to_bits());
        }
    }

    /// The portable products against f32 ones: within bf16's rounding of the operands.
    #[test]
    fn portable_products_are_f32_products_of_rounded_operands() {
        let (m, k, n) = (5, 70, 9);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let product = matmul(
            Bf16Kernel::Portable,
            Strided::rows(&a, k),
            Strided::rows(&b, n),
            m,
            k,
            n,
        );
        for r in 0..m {
            for c in 0..n {
                let exact: f32 = (0..k).map(|i| a[r * k + i] * b[i * n + c]).sum();
                let bound: f32 = (0..k)
                    .map(|i| (a[r * k + i] * b[i * n + c]).abs())
                    .sum::<f32>()
                    / 128.0;
                assert!((product[r * n + c] - exact).abs() <= bound, "{r},{c}");
                assert_ne!(product[r * n + c], exact, "the operands were rounded");
            }
        }
    }

    /// AMX and AVX-512 BF16 (those this CPU has) against the portable loops, on shapes that are
    /// not whole tiles, through transposed views as the gradients read them.
    #[test]
    fn packed_products_equal_the_portable_ones() {
        for kernel in Bf16Kernel::available() {
            packed_products_equal_the_portable_ones_with(kernel);
        }
        if !Bf16Kernel::Avx512.usable() {
            eprintln!("skipped: this CPU has no AVX-512 BF16");
        }
    }

    fn packed_products_equal_the_portable_ones_with(kernel: Bf16Kernel) {
        for (m, k, n) in [
            (0, 3, 2),
            (2, 0, 3),
            (1, 1, 1),
            (37, 70, 45),
            (64, 384, 96),
            (64, 300, 45),
            (9, 71, 40),
            (33, 1536, 31),
            (160, 300, 70),
        ] {
            let (a, b) = (values(m * k, 3), values(k * n, 4));
            let packed = matmul(kernel, Strided::rows(&a, k), Strided::rows(&b, n), m, k, n);
            // On the calling thread, as a batch's products run: row blocks in groups of four, the
            // same sums in the same order.
            let mut caller = vec![MaybeUninit::new(f32::NAN); m * n];
            let operands = [Strided::rows(&a, k), Strided::rows(&b, n)];
            matmul_into(kernel, operands, [m, k, n], &mut caller, Threads::Caller);
            // SAFETY: every value was initialised (NaN), and then written.
            let caller: Vec<f32> = caller.iter().map(|v| unsafe { v.assume_init() }).collect();
            assert_eq!(caller, packed, "{kernel:?} {m}×{k}×{n} in groups of four");
            let portable = matmul(
                Bf16Kernel::Portable,
                Strided::rows(&a, k),
                Strided::rows(&b, n),
                m,
                k,
                n,
            );
            let worst = packed
                .iter()
                .zip(&portable)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(worst < 1e-4, "{kernel:?} {m}×{k}×{n}: {worst}");
            // bᵀ · aᵀ = (a · b)ᵀ through the transposed views.
            let t = matmul(
                kernel,
                Strided::transposed(&b, n),
                Strided::transposed(&a, k),
                n,
                k,
                m,
            );
            for r in 0..m {
                for c in 0..n {
                    assert!((t[c * m + r] - packed[r * n + c]).abs() < 1e-4);
                }
            }
        }
    }
}
