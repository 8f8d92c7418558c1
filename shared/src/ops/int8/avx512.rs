//! The int8 products with AVX-512: VNNI's `vpdpbusd` and AMX's `tdpbusd` (both with exact
//! sums), their rescaling to f32, and the activations' quantisation.

use std::arch::asm;
use std::arch::x86_64::*;

use super::*;

impl Block<'_> {
    /// Per group of 4 inputs, the two weight vectors (16 columns × 4 bytes each) are loaded once
    /// and multiplied (`vpdpbusd`) with each row's 4 bytes broadcast to all lanes; then every
    /// row is scaled back to f32 sixteen columns at a time.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn multiply_vnni(&self, output: &mut [f32], stride: usize, columns: usize) {
        let width = self.groups * 4;
        let mut sums = [[_mm512_setzero_si512(); 2]; TILE_ROWS];
        // SAFETY (every block below): reads and writes stay within the slices, as documented
        // on Block's fields and asserted in `multiply`; unaligned loads and stores are allowed.
        // Raw pointers in the loop: with slice indexing, bounds checks and byte-wise loads
        // (then a general-register broadcast, which takes a port the products need) kept the
        // kernel at a third of the products' peak.
        assert!(
            self.rows.len() >= TILE_ROWS * width && self.weights.len() >= self.groups * GROUP_BYTES
        );
        let (rows, weights) = (self.rows.as_ptr(), self.weights.as_ptr());
        for group in 0..self.groups {
            // SAFETY: group < groups and the slices' lengths are asserted above.
            let w = unsafe {
                let w = weights.add(group * GROUP_BYTES);
                [
                    _mm512_loadu_si512(w.cast()),
                    _mm512_loadu_si512(w.add(64).cast()),
                ]
            };
            for (r, sums) in sums.iter_mut().enumerate() {
                // SAFETY: as above, r < TILE_ROWS.
                let x = unsafe {
                    _mm512_set1_epi32(
                        rows.add(r * width + group * 4)
                            .cast::<i32>()
                            .read_unaligned(),
                    )
                };
                sums[0] = _mm512_dpbusd_epi32(sums[0], x, w[0]);
                sums[1] = _mm512_dpbusd_epi32(sums[1], x, w[1]);
            }
        }
        let mut stored = [[0; PANEL]; TILE_ROWS];
        for (stored, sums) in stored.iter_mut().zip(&sums) {
            // SAFETY: 32 i32 are two vectors.
            unsafe {
                _mm512_storeu_si512(stored.as_mut_ptr().cast(), sums[0]);
                _mm512_storeu_si512(stored[16..].as_mut_ptr().cast(), sums[1]);
            }
        }
        // SAFETY: the CPU has AVX-512 F (it has VNNI); `multiply` checked `output`.
        unsafe { self.rescale_avx512(&stored, output, stride, columns) };
    }

    /// AMX: per 64 inputs, two tiles of 16 rows × 64 activation bytes (row pitch: the rows'
    /// width) times two tiles of 16 groups × 16 columns × 4 weight bytes (the panel's halves,
    /// pitch GROUP_BYTES — the packing is already AMX's) into four 16 × 16 tiles of `i32` sums.
    /// The caller configured the tiles on this thread ([`amx::Tiles::configure`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn multiply_amx(&self, output: &mut [f32], stride: usize, columns: usize) {
        let width = self.groups * 4;
        assert!(width.is_multiple_of(AMX_INPUTS));
        assert!(
            self.rows.len() >= AMX_TILE_ROWS * width
                && self.weights.len() >= self.groups * GROUP_BYTES
        );
        let (rows, weights) = (self.rows.as_ptr(), self.weights.as_ptr());
        // Not zeroed first: the tile stores write all of it (zeroing its 4 KB for every block
        // was about 5 % of an int8 index build's samples; without it `bench matmul` ran 8-10 %
        // faster).
        let mut sums = std::mem::MaybeUninit::<amx::Sums<i32>>::uninit();
        // SAFETY: each step reads 32 rows × 64 bytes from `rows` and 16 groups × 128 bytes from
        // `weights`, within the lengths asserted above; the stores write the 32 × 32 `sums`.
        unsafe {
            amx::zero_sums();
            for step in 0..width / AMX_INPUTS {
                let a = rows.add(step * AMX_INPUTS);
                let b = weights.add(step * (AMX_INPUTS / 4) * GROUP_BYTES);
                asm!(
                    "tileloadd tmm4, [{a} + {width}*1]",
                    "tileloadd tmm5, [{a16} + {width}*1]",
                    "tileloadd tmm6, [{b} + {pitch}*1]",
                    "tileloadd tmm7, [{b16} + {pitch}*1]",
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    a = in(reg) a,
                    a16 = in(reg) a.add(16 * width),
                    width = in(reg) width,
                    b = in(reg) b,
                    b16 = in(reg) b.add(64),
                    pitch = in(reg) GROUP_BYTES,
                    options(nostack, readonly)
                );
            }
            amx::store_sums(sums.as_mut_ptr().cast::<i32>(), amx::SUMS_PITCH);
            // The four 16 × 16 tiles stored above are the 32 × 32 sums.
            self.rescale_avx512(sums.assume_init_ref(), output, stride, columns);
        }
    }

    /// Scales the integer sums of the tile's real rows back to f32 and writes their first
    /// `columns` outputs, sixteen columns at a time.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rescale_avx512(
        &self,
        sums: &[[i32; PANEL]],
        output: &mut [f32],
        stride: usize,
        columns: usize,
    ) {
        for first in [0, 16] {
            if first >= columns {
                break;
            }
            let mask: __mmask16 = if columns - first >= 16 {
                !0
            } else {
                (1 << (columns - first)) - 1
            };
            // SAFETY: 16 values from `first` < 32 in each per-column slice (32 each).
            let (column_scales, column_sums, bias) = unsafe {
                (
                    _mm512_loadu_ps(self.column_scales[first..].as_ptr()),
                    _mm512_loadu_si512(self.column_sums[first..].as_ptr().cast()),
                    _mm512_loadu_ps(self.bias[first..].as_ptr()),
                )
            };
            let rows = self.row_scales.iter().zip(self.row_zeros).zip(sums);
            for (r, ((&scale, &zero), sums)) in rows.enumerate() {
                // SAFETY: 16 of the row's 32 sums; the store writes the lanes below `columns`
                // of a row `multiply` checked `output` holds.
                unsafe {
                    let sum = _mm512_loadu_si512(sums[first..].as_ptr().cast());
                    let corrected = _mm512_sub_epi32(
                        sum,
                        _mm512_mullo_epi32(_mm512_set1_epi32(zero), column_sums),
                    );
                    let scales = _mm512_mul_ps(_mm512_set1_ps(scale), column_scales);
                    let values = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corrected), scales, bias);
                    let out = &mut output[r * stride + first..];
                    _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, values);
                }
            }
        }
    }
}

/// [`quantise_row_portable`] sixteen values at a time (the same results: the conversion rounds
/// half to even, as the portable loop does).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quantise_row_avx512(row: &[f32], out: &mut [u8], levels: f32) -> (f32, i32) {
    let chunks = row.chunks_exact(16);
    let tail = chunks.remainder();
    let (mut min, mut max) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for chunk in chunks.clone() {
        // SAFETY: a chunk holds 16 values.
        let v = unsafe { _mm512_loadu_ps(chunk.as_ptr()) };
        min = _mm512_min_ps(min, v);
        max = _mm512_max_ps(max, v);
    }
    let (min, max) = tail.iter().fold(
        (_mm512_reduce_min_ps(min), _mm512_reduce_max_ps(max)),
        |(lo, hi), &v| (lo.min(v), hi.max(v)),
    );
    let (scale, zero) = row_range(min, max, levels);
    let (inverse, zero_vector) = (_mm512_set1_ps(1.0 / scale), _mm512_set1_ps(zero));
    let top = _mm512_set1_epi32(levels as i32);
    for (chunk, out) in chunks.zip(out.chunks_exact_mut(16)) {
        // SAFETY: a chunk holds 16 values and `out`'s chunk 16 bytes.
        unsafe {
            let v = _mm512_fmadd_ps(_mm512_loadu_ps(chunk.as_ptr()), inverse, zero_vector);
            let q = _mm512_max_epi32(_mm512_cvtps_epi32(v), _mm512_setzero_si512());
            let q = _mm512_min_epi32(q, top);
            _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtusepi32_epi8(q));
        }
    }
    let done = row.len() - tail.len();
    quantise_values(tail, &mut out[done..], 1.0 / scale, zero, levels, true);
    (scale, zero as i32)
}
