//! The int8 products with AVX2 on CPUs without AVX-512: `vpmaddubsw` + `vpmaddwd` on 7-bit
//! activations.

use std::arch::x86_64::*;

use super::*;

impl Block<'_> {
    /// [`Self::multiply_vnni`] on AVX2, a quarter of the tile at a time (16 registers): per
    /// group of 4 inputs and 4 rows, two weight vectors of 8 columns × 4 bytes times each row's
    /// 4 bytes broadcast, `vpmaddubsw` then `vpmaddwd` against ones sum each column's 4 products.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn multiply_avx2(&self, output: &mut [f32], stride: usize, columns: usize) {
        const ROWS: usize = 4;
        let width = self.groups * 4;
        assert!(
            self.rows.len() >= TILE_ROWS * width && self.weights.len() >= self.groups * GROUP_BYTES
        );
        let (rows, weights) = (self.rows.as_ptr(), self.weights.as_ptr());
        let ones = _mm256_set1_epi16(1);
        for first in [0, 16] {
            if first >= columns {
                break;
            }
            for first_row in (0..self.row_scales.len()).step_by(ROWS) {
                let mut sums = [[_mm256_setzero_si256(); 2]; ROWS];
                for group in 0..self.groups {
                    // SAFETY: group < groups, first + 16 ≤ 32 columns, first_row + ROWS ≤
                    // TILE_ROWS; the slices' lengths are asserted above.
                    let w = unsafe {
                        let w = weights.add(group * GROUP_BYTES + first * 4);
                        [
                            _mm256_loadu_si256(w.cast()),
                            _mm256_loadu_si256(w.add(32).cast()),
                        ]
                    };
                    for (r, sums) in sums.iter_mut().enumerate() {
                        // SAFETY: as above.
                        let x = unsafe {
                            _mm256_set1_epi32(
                                rows.add((first_row + r) * width + group * 4)
                                    .cast::<i32>()
                                    .read_unaligned(),
                            )
                        };
                        for (sum, w) in sums.iter_mut().zip(w) {
                            let pairs = _mm256_maddubs_epi16(x, w);
                            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
                        }
                    }
                }
                let real_rows = ROWS.min(self.row_scales.len() - first_row);
                for (r, sums) in sums.iter().enumerate().take(real_rows) {
                    let row = first_row + r;
                    for (eighth, sum) in sums.iter().enumerate() {
                        let column = first + 8 * eighth;
                        if column >= columns {
                            break;
                        }
                        let lanes = (columns - column).min(8) as i32;
                        let mask = _mm256_cmpgt_epi32(
                            _mm256_set1_epi32(lanes),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                        );
                        // SAFETY: 8 values from `column` < 32 in each per-column slice; the
                        // store writes only the lanes below `columns`, within `output`.
                        unsafe {
                            let column_sums =
                                _mm256_loadu_si256(self.column_sums[column..].as_ptr().cast());
                            let corrected = _mm256_sub_epi32(
                                *sum,
                                _mm256_mullo_epi32(
                                    _mm256_set1_epi32(self.row_zeros[row]),
                                    column_sums,
                                ),
                            );
                            let scales = _mm256_mul_ps(
                                _mm256_set1_ps(self.row_scales[row]),
                                _mm256_loadu_ps(self.column_scales[column..].as_ptr()),
                            );
                            let values = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(corrected),
                                scales,
                                _mm256_loadu_ps(self.bias[column..].as_ptr()),
                            );
                            let out = output[row * stride + column..].as_mut_ptr();
                            _mm256_maskstore_ps(out, mask, values);
                        }
                    }
                }
            }
        }
    }
}
