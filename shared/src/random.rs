//! A small, fast, seedable generator (Steele et al.'s SplitMix64), the same numbers on every
//! platform and in the browser: the bootstrap's indices, nucleus sampling, span corruption.

/// SplitMix64 state.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index in `0..n` (Lemire's multiply-shift; the bias is below 2⁻³² for the
    /// sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A uniform number in `[0, 1)` (53 random bits).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` uniform numbers in `[−spread/2, spread/2)` as f32 (test inputs, weights).
    pub fn centred_f32s(&mut self, n: usize, spread: f32) -> Vec<f32> {
        (0..n)
            .map(|_| (self.uniform() as f32 - 0.5) * spread)
            .collect()
    }
}
