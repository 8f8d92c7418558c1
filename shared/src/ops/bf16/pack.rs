//! The operands of the bf16 products in AMX's layouts (which the AVX-512 BF16 kernel reads too),
//! rounded with AVX-512 BF16's `vcvtneps2bf16` (16 values per instruction, to nearest with ties
//! to even as [`super::to_bf16`]; unlike it, the instruction takes a subnormal input, below
//! 1.2e-38, as zero). Every CPU with AMX-BF16 has AVX-512 BF16; [`super::Bf16Kernel::usable`]
//! checks both for AMX.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::{BLOCK, STEP, Strided, Threads};

/// Whether this CPU has the instructions the packing below is compiled for.
pub fn usable() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bf16")
}

/// The left operand: `m` rows padded to whole blocks, each of `k` values padded with zeros to
/// whole steps; and that width. Each block is read in its source's order (row by row, or, for
/// a transposed view, input by input), so that the reads are contiguous.
pub fn rows(a: Strided, m: usize, k: usize, threads: Threads) -> (Vec<u16>, usize) {
    assert!(usable(), "bf16 packing on a CPU without AVX-512 BF16");
    let width = k.div_ceil(STEP) * STEP;
    let packed = packed(
        m.div_ceil(BLOCK) * BLOCK * width,
        BLOCK * width,
        threads,
        |block, out| {
            // SAFETY: checked above that the CPU has the instructions.
            unsafe { row_block(a, block * BLOCK, m, k, width, out) };
        },
    );
    (packed, width)
}

/// The right operand in panels of 32 columns: each panel holds, per pair of inputs, 32 columns
/// × the pair (AMX's layout for `tdpbf16ps`'s second tile), zeros past `k` and `n`. Read in the
/// source's order, as [`rows`] does.
pub fn panels(b: Strided, k: usize, n: usize, width: usize, threads: Threads) -> Vec<u16> {
    assert!(usable(), "bf16 packing on a CPU without AVX-512 BF16");
    let panel_len = width * BLOCK;
    packed(
        n.div_ceil(BLOCK) * panel_len,
        panel_len,
        threads,
        |index, out| {
            // SAFETY: checked above that the CPU has the instructions.
            unsafe { panel(b, index * BLOCK, k, n, out) };
        },
    )
}

/// `len` values written by `pack(i, chunk)` chunk by chunk (`chunk` values each), every one of
/// them: not zero-filled first (that was 2 % of a bf16 training step).
fn packed<F>(len: usize, chunk: usize, threads: Threads, pack: F) -> Vec<u16>
where
    F: Fn(usize, &mut [MaybeUninit<u16>]) + Send + Sync,
{
    let mut packed = Vec::with_capacity(len);
    threads.for_each_chunk(&mut packed.spare_capacity_mut()[..len], chunk, pack);
    // SAFETY: the packing functions write every value of their chunk.
    unsafe { packed.set_len(len) };
    packed
}

const ZERO: MaybeUninit<u16> = MaybeUninit::new(0);

/// One block of [`rows`]: rows `first..` (up to 32) into `out` (32 rows of `width`), every
/// value written (zeros past the rows and inputs).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn row_block(
    a: Strided,
    first: usize,
    m: usize,
    k: usize,
    width: usize,
    out: &mut [MaybeUninit<u16>],
) {
    let rows = BLOCK.min(m - first);
    for row in out.chunks_exact_mut(width).skip(rows) {
        row.fill(ZERO);
    }
    for r in 0..rows {
        out[r * width + k..(r + 1) * width].fill(ZERO);
    }
    if a.column == 1 {
        for r in 0..rows {
            round(
                &a.values[(first + r) * a.row..][..k],
                &mut out[r * width..][..k],
            );
        }
        return;
    }
    assert_eq!(a.row, 1, "a row-major matrix or its transpose");
    // Sixteen inputs at a time: their sixteen source rows' 32 values each, rounded (L1), then
    // sixteen values written contiguously to each packed row.
    let mut tile = [[ZERO; BLOCK]; 16];
    for i0 in (0..k).step_by(16) {
        let inputs = 16.min(k - i0);
        for (i, tile_row) in tile.iter_mut().enumerate().take(inputs) {
            let source = &a.values[first + (i0 + i) * a.column..][..rows];
            prefetch(a.values, first + (i0 + AHEAD + i) * a.column, rows);
            round(source, &mut tile_row[..rows]);
        }
        for r in 0..rows {
            for (i, value) in out[r * width + i0..][..inputs].iter_mut().enumerate() {
                *value = tile[i][r];
            }
        }
    }
}

/// One panel of [`panels`]: columns `first..` (up to 32) into `out`, every value written (zeros
/// past the columns and inputs).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn panel(b: Strided, first: usize, k: usize, n: usize, out: &mut [MaybeUninit<u16>]) {
    let columns = BLOCK.min(n - first);
    let pairs = k.div_ceil(2);
    out[pairs * BLOCK * 2..].fill(ZERO);
    if columns < BLOCK {
        for pair in out.chunks_exact_mut(BLOCK * 2).take(pairs) {
            pair[2 * columns..].fill(ZERO);
        }
    }
    if b.column == 1 {
        // Two rows at a time, interleaved: the pair's 32 columns are contiguous.
        let row = |i: usize| &b.values[i * b.row + first..][..columns];
        for (pair, out) in out.chunks_exact_mut(BLOCK * 2).take(pairs).enumerate() {
            for ahead in [AHEAD, AHEAD + 1] {
                prefetch(b.values, (2 * pair + ahead) * b.row + first, columns);
            }
            let odd = if 2 * pair + 1 < k {
                row(2 * pair + 1)
            } else {
                &[0.0; BLOCK][..columns]
            };
            round_pairs(row(2 * pair), odd, &mut out[..2 * columns]);
        }
        return;
    }
    assert_eq!(b.row, 1, "a row-major matrix or its transpose");
    // Column by column: its `k` values rounded at once, then written pair by pair 32 pairs apart.
    let mut column = vec![ZERO; 2 * pairs];
    for c in 0..columns {
        round(&b.values[(first + c) * b.column..][..k], &mut column[..k]);
        for (pair, values) in column.chunks_exact(2).enumerate() {
            out[(pair * BLOCK + c) * 2..][..2].copy_from_slice(values);
        }
    }
}

/// Rows ahead of the one being rounded whose values are fetched into the cache meanwhile: the
/// transposed operand's and the panels' rows are read 32 values at a time, each in another page
/// (1.5–6 KB apart), which the CPU's prefetchers do not follow.
const AHEAD: usize = 16;

/// Asks the CPU to bring `len` values of `values` from `start` into its caches (nothing past
/// the end: a prefetch does not fault, but is not issued there either).
#[target_feature(enable = "avx512f")]
fn prefetch(values: &[f32], start: usize, len: usize) {
    if start + len > values.len() || len == 0 {
        return;
    }
    let first = values[start..].as_ptr().cast::<i8>();
    let last = values[start + len - 1..].as_ptr().cast::<i8>();
    for line in [first, first.wrapping_add(64), last] {
        _mm_prefetch::<_MM_HINT_T0>(line);
    }
}

/// `source` rounded to bf16 into `out` (the same length).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn round(source: &[f32], out: &mut [MaybeUninit<u16>]) {
    assert_eq!(source.len(), out.len());
    for (source, out) in source.chunks(16).zip(out.chunks_mut(16)) {
        let mask = lanes(source.len());
        // SAFETY: the masked load reads and the masked store writes the chunk's lanes only.
        unsafe {
            let values = _mm512_maskz_loadu_ps(mask, source.as_ptr());
            let rounded: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(values));
            _mm256_mask_storeu_epi16(out.as_mut_ptr().cast(), mask, rounded);
        }
    }
}

/// `even` and `odd` (the same length) rounded to bf16 and interleaved into `out` (twice that):
/// `even[0], odd[0], even[1], odd[1], …`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn round_pairs(even: &[f32], odd: &[f32], out: &mut [MaybeUninit<u16>]) {
    assert!(even.len() == odd.len() && out.len() == 2 * even.len());
    for ((even, odd), out) in even.chunks(16).zip(odd.chunks(16)).zip(out.chunks_mut(32)) {
        let mask = lanes(even.len());
        // SAFETY: the masked loads read `even`'s and `odd`'s lanes; the masked store writes one
        // 32-bit pair per lane, within `out`'s chunk (twice the lanes' count of u16).
        unsafe {
            let widen = |values: *const f32| {
                let rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, values));
                _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(rounded))
            };
            let pairs = _mm512_or_si512(
                widen(even.as_ptr()),
                _mm512_slli_epi32::<16>(widen(odd.as_ptr())),
            );
            _mm512_mask_storeu_epi32(out.as_mut_ptr().cast(), mask, pairs);
        }
    }
}

/// The mask of the first `n` of 16 lanes.
fn lanes(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::bf16::{from_bf16, to_bf16};
    use crate::random::SplitMix64;

    /// Frees a buffer of `len` values that are not zero, so that the allocator likely hands its
    /// memory to the packing next (which must write its zeros itself).
    fn dirty_heap(len: usize) {
        std::hint::black_box(vec![0xabcd_u16; len]);
    }

    /// The same bf16 value, or both NaN.
    fn same(got: u16, expected: u16) -> bool {
        got == expected || (from_bf16(got).is_nan() && from_bf16(expected).is_nan())
    }

    /// The packed layouts hold [`to_bf16`]'s roundings where the plain loops put them, for
    /// row-major and transposed sources, and ragged sizes (tails of the 16 lanes, odd `k`).
    #[test]
    fn packing_rounds_like_to_bf16_into_amx_layouts() {
        if !usable() {
            eprintln!("skipped: this CPU has no AVX-512 BF16");
            return;
        }
        let mut values = SplitMix64(7).centred_f32s(70 * 45, 3.0);
        // Ties and a NaN: rounded to even, the NaN kept a NaN.
        values[0] = 1.0 + 1.0 / 256.0;
        values[1] = 1.0 + 3.0 / 256.0;
        values[2] = f32::NAN;
        for (m, k) in [(37, 70), (70, 37), (1, 1), (45, 33)] {
            let source = &values[..m * k];
            let expected_width = k.div_ceil(STEP) * STEP;
            for (a, at) in [
                (
                    Strided::rows(source, k),
                    Box::new(|r, i| source[r * k + i]) as Box<dyn Fn(usize, usize) -> f32>,
                ),
                (
                    Strided::transposed(source, m),
                    Box::new(|r, i| source[i * m + r]),
                ),
            ] {
                dirty_heap(m.div_ceil(BLOCK) * BLOCK * expected_width);
                let (packed, width) = rows(a, m, k, Threads::Caller);
                assert_eq!(width, expected_width);
                for r in 0..m.div_ceil(BLOCK) * BLOCK {
                    for i in 0..width {
                        let expected = if r < m && i < k { to_bf16(at(r, i)) } else { 0 };
                        let got = packed[r * width + i];
                        assert!(same(got, expected), "rows {m}×{k} ({r}, {i})");
                    }
                }
                // The same values as the right operand: `k` inputs by `m` columns.
                let b = a.transpose();
                dirty_heap(m.div_ceil(BLOCK) * BLOCK * width);
                let packed = panels(b, k, m, width, Threads::Caller);
                for c in 0..m.div_ceil(BLOCK) * BLOCK {
                    for i in 0..width {
                        let expected = if c < m && i < k { to_bf16(at(c, i)) } else { 0 };
                        let (panel, c_in) = (c / BLOCK, c % BLOCK);
                        let got =
                            packed[panel * width * BLOCK + (i / 2 * BLOCK + c_in) * 2 + i % 2];
                        assert!(same(got, expected), "panels {k}×{m} ({i}, {c})");
                    }
                }
            }
        }
    }
}
