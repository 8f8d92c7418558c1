//! The int8 products in the page: SIMD128's `i32x4.dot_i16x8_s` on bytes widened to 16 bits,
//! the hook for the relaxed-SIMD module the page installs, and the activations' quantisation.

use super::*;

/// One task's products for the page's relaxed-SIMD module ([`Kernel::RelaxedSimd`]), in
/// [`Int8Linear`]'s layouts: the function [`install_relaxed_products`] takes fills `sums`.
pub struct RelaxedProducts<'a> {
    /// Quantised activations (0..=127), rows of `width` bytes, a whole number of pairs.
    pub rows: &'a [u8],
    /// Bytes per row: the inputs padded to a multiple of 4.
    pub width: usize,
    /// Per panel of 32 columns, per group of 4 inputs: 32 columns × 4 signed bytes.
    pub weights: &'a [i8],
    /// Out: the integer sums, row by row, each row 32 per panel.
    pub sums: &'a mut [i32],
}

pub(super) static RELAXED_PRODUCTS: std::sync::OnceLock<fn(RelaxedProducts<'_>)> =
    std::sync::OnceLock::new();

/// Makes [`Kernel::RelaxedSimd`] available in the page, multiplying with `products` (the page
/// installs it when its browser compiles relaxed SIMD); layers packed before keep their kernel.
/// Only the first call counts.
pub fn install_relaxed_products(products: fn(RelaxedProducts<'_>)) {
    let _ = RELAXED_PRODUCTS.set(products);
}

impl Block<'_> {
    /// The block's products from its rows and weights widened to 16 bits (`wide_rows`: its 2
    /// rows, `wide_weights`: its panel, laid out as `rows` and `weights`), eight columns at a
    /// time: per group of 4 inputs, four loads of 2 columns × 4 weights, each row's 4 values
    /// loaded twice over, and
    /// `i32x4.dot_i16x8_s` gives each column's two pair sums, added up after the last group;
    /// then every row is scaled back as [`Self::rescale`] does.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(super) fn multiply_simd128(
        &self,
        wide_rows: &[i16],
        wide_weights: &[i16],
        output: &mut [f32],
        stride: usize,
        columns: usize,
    ) {
        use std::arch::wasm32::*;
        let width = self.groups * 4;
        assert!(
            wide_rows.len() >= PAGE_ROWS * width && wide_weights.len() >= self.groups * GROUP_BYTES
        );
        assert!(columns <= PANEL && output.len() >= (self.row_scales.len() - 1) * stride + columns);
        let (rows, weights) = (wide_rows.as_ptr(), wide_weights.as_ptr());
        let mut sums = [[0i32; PANEL]; PAGE_ROWS];
        for eighth in 0..PANEL / 8 {
            let mut partial = [[i32x4_splat(0); 4]; PAGE_ROWS];
            for group in 0..self.groups {
                // SAFETY: 32 values of group `group` (from `eighth · 32` of its 128) and 4 of
                // each row, within the lengths asserted above; unaligned loads are allowed.
                unsafe {
                    let w = weights.add(group * GROUP_BYTES + eighth * 32);
                    let w = [0, 8, 16, 24].map(|offset| v128_load(w.add(offset).cast()));
                    for (row, partial) in partial.iter_mut().enumerate() {
                        let x = v128_load64_splat(rows.add(row * width + group * 4).cast());
                        for (sum, w) in partial.iter_mut().zip(w) {
                            *sum = i32x4_add(*sum, i32x4_dot_i16x8(x, w));
                        }
                    }
                }
            }
            // Lanes hold (column 2k: inputs 0-1, inputs 2-3, column 2k+1: the same).
            for (row, [a, b, c, d]) in partial.into_iter().enumerate() {
                let pairs = |p, q| {
                    i32x4_add(
                        i32x4_shuffle::<0, 2, 4, 6>(p, q),
                        i32x4_shuffle::<1, 3, 5, 7>(p, q),
                    )
                };
                let out = &mut sums[row][eighth * 8..][..8];
                // SAFETY: two stores of 4 `i32`s into the 8 of `out`.
                unsafe {
                    v128_store(out.as_mut_ptr().cast(), pairs(a, b));
                    v128_store(out.as_mut_ptr().add(4).cast(), pairs(c, d));
                }
            }
        }
        for (r, (&scale, &zero)) in self.row_scales.iter().zip(self.row_zeros).enumerate() {
            let output = &mut output[r * stride..][..columns];
            self.rescale_simd128(&sums[r][..columns], scale, zero, output);
        }
    }

    /// [`Self::rescale`] of one row's sums for the panel's first `output.len()` columns, four
    /// at a time: the same numbers (a product and a sum, each rounded, as the page's kernels
    /// scale).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(super) fn rescale_simd128(
        &self,
        sums: &[i32],
        row_scale: f32,
        row_zero: i32,
        output: &mut [f32],
    ) {
        use std::arch::wasm32::*;
        debug_assert!(!self.kernel.fused());
        let columns = output.len();
        assert!(columns <= PANEL && sums.len() >= columns);
        let (scale, zero) = (f32x4_splat(row_scale), i32x4_splat(row_zero));
        let vectors = columns / 4;
        for v in 0..vectors {
            let c = v * 4;
            // SAFETY: columns c..c + 4 are within `sums`, `output` and the panel's 32 columns
            // (asserted above); unaligned loads and stores are allowed.
            unsafe {
                let load_i32 = |values: &[i32]| v128_load(values[c..].as_ptr().cast());
                let load_f32 = |values: &[f32]| v128_load(values[c..].as_ptr().cast());
                let corrected =
                    i32x4_sub(load_i32(sums), i32x4_mul(zero, load_i32(self.column_sums)));
                let scales = f32x4_mul(scale, load_f32(self.column_scales));
                let values = f32x4_add(
                    f32x4_mul(f32x4_convert_i32x4(corrected), scales),
                    load_f32(self.bias),
                );
                v128_store(output[c..].as_mut_ptr().cast(), values);
            }
        }
        for c in vectors * 4..columns {
            output[c] = self.rescale(sums[c], row_scale, row_zero, c);
        }
    }
}

/// [`quantise_row_portable`] for SIMD128, sixteen values at a time (the same results: a product
/// and a sum, `f32x4.nearest` rounds half to even, and the saturating conversions clamp).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) fn quantise_row_simd128(row: &[f32], out: &mut [u8], levels: f32) -> (f32, i32) {
    use std::arch::wasm32::*;
    // SAFETY (both loops): a chunk holds 16 values, read as 4 unaligned vectors, and `out`'s
    // chunk 16 bytes.
    let load = |chunk: &[f32], i: usize| unsafe { v128_load(chunk.as_ptr().add(4 * i).cast()) };
    let chunks = row.chunks_exact(16);
    let tail = chunks.remainder();
    let (mut min, mut max) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for chunk in chunks.clone() {
        for i in 0..4 {
            let v = load(chunk, i);
            (min, max) = (f32x4_pmin(v, min), f32x4_pmax(v, max));
        }
    }
    let lanes = |v| {
        [
            f32x4_extract_lane::<0>(v),
            f32x4_extract_lane::<1>(v),
            f32x4_extract_lane::<2>(v),
            f32x4_extract_lane::<3>(v),
        ]
    };
    let min = lanes(min)
        .into_iter()
        .chain(tail.iter().copied())
        .fold(0f32, f32::min);
    let max = lanes(max)
        .into_iter()
        .chain(tail.iter().copied())
        .fold(0f32, f32::max);
    let (scale, zero) = row_range(min, max, levels);
    let inverse = 1.0 / scale;
    let (inverse_vector, zero_vector) = (f32x4_splat(inverse), f32x4_splat(zero));
    let (bottom, top) = (f32x4_splat(0.0), f32x4_splat(levels));
    for (chunk, out) in chunks.zip(out.chunks_exact_mut(16)) {
        let q = [0, 1, 2, 3].map(|i| {
            let v = f32x4_add(f32x4_mul(load(chunk, i), inverse_vector), zero_vector);
            let v = f32x4_pmin(f32x4_pmax(f32x4_nearest(v), bottom), top);
            i32x4_trunc_sat_f32x4(v)
        });
        let bytes = u8x16_narrow_i16x8(
            i16x8_narrow_i32x4(q[0], q[1]),
            i16x8_narrow_i32x4(q[2], q[3]),
        );
        // SAFETY: see above.
        unsafe { v128_store(out.as_mut_ptr().cast(), bytes) };
    }
    let done = row.len() - tail.len();
    quantise_values(tail, &mut out[done..], inverse, zero, levels, false);
    (scale, zero as i32)
}
