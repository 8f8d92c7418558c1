//! Int8 matrix products for inference on x86-64 CPUs and in the page: `x · W + b` with `W`
//! quantised once per output column (symmetric, `i8`) and `x` quantised per row on every call
//! (asymmetric, `u8` with a zero point), multiplied in integers and scaled back to f32 — the
//! scheme of ONNX Runtime's and PyTorch's dynamic quantisation of linear layers. Five kernels
//! ([`Kernel`]): AMX's `tdpbusd` (a 16 × 64-byte tile of activations times a 64 × 16 tile of
//! weights per instruction), AVX-512 VNNI's `vpdpbusd` (64 byte products summed into 16 `i32`
//! lanes per instruction), on CPUs without either AVX2's `vpmaddubsw` + `vpmaddwd` with 7-bit
//! activations (chosen only where the CPU has no AVX-512 at all: see [`Kernel::best`]), and in
//! the page WebAssembly's relaxed SIMD (`i32x4.relaxed_dot_i8x16_i7x16_add_s`, 16 byte products
//! per instruction, 7-bit activations) where the browser has it, else SIMD128's
//! `i32x4.dot_i16x8_s` on bytes widened to 16 bits.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use wasm::{RelaxedProducts, install_relaxed_products};

use std::any::Any;
use std::sync::Arc;

#[cfg(target_arch = "x86_64")]
use super::amx;

use burn::backend::Flex;
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use crate::random::SplitMix64;

/// Output columns per panel: two 16-lane `i32` vectors.
const PANEL: usize = 32;
/// Rows multiplied together by the VNNI and AVX2 kernels: 12 × 2 accumulators, each weight
/// vector loaded once for 12 rows (8 rows measured 2-7 % slower on one AVX-512 core).
const TILE_ROWS: usize = 12;
/// Rows multiplied together by the AMX kernel: two tiles of 16 rows.
const AMX_TILE_ROWS: usize = 32;
/// Inputs per AMX step: a tile row holds 64 bytes (16 groups of 4).
const AMX_INPUTS: usize = 64;
/// Rows per parallel task (quantised together, then multiplied tile by tile): a multiple of
/// both kernels' tile rows.
const TASK_ROWS: usize = 96;
/// Bytes of one group of 4 inputs for one panel: 32 columns × 4 bytes.
const GROUP_BYTES: usize = PANEL * 4;
/// Rows multiplied together by the page's kernels: 2 rows × 8 columns (SIMD128) or 16 columns
/// (relaxed SIMD) take 8 accumulators and 4 weight vectors, within the 16 vector registers of
/// the x86-64 CPUs browsers run on.
const PAGE_ROWS: usize = 2;

/// The instructions an [`Int8Linear`] multiplies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// AMX's `tdpbusd` on tiles (Intel Sapphire Rapids and later); activations in 8 bits. Its
    /// results are exactly VNNI's (the same quantisation, integer sums).
    Amx,
    /// AVX-512 VNNI's `vpdpbusd`; activations in 8 bits (0..=255).
    Vnni,
    /// AVX2's `vpmaddubsw` (pairs of byte products summed into 16 bits, saturating) and
    /// `vpmaddwd`; activations in 7 bits (0..=127) so that a pair never saturates, as PyTorch's
    /// fbgemm does (`reduce_range`).
    Avx2,
    /// WebAssembly SIMD128 (the page): activations (8 bits) and weights widened to 16 bits and
    /// multiplied by `i32x4.dot_i16x8_s`, which sums pairs of products exactly into `i32`, so
    /// its sums are VNNI's (its scaling is not fused: `Kernel::fused`). Off WebAssembly its
    /// sums are computed one at a time, to check the page's numbers against (see
    /// [`Kernel::runs_here`]).
    Simd128,
    /// WebAssembly's relaxed SIMD (the page, where the browser has it): four byte products
    /// summed into each `i32` lane by `i32x4.relaxed_dot_i8x16_i7x16_add_s`, in a module of
    /// its own that the page loads (`install_relaxed_products`). Activations in 7 bits, as
    /// AVX2's, so that every CPU's lowering of the instruction gives the same exact sums; scaled
    /// as SIMD128's. Off WebAssembly its sums are computed one at a time, as SIMD128's.
    RelaxedSimd,
}

impl Kernel {
    /// The kernels this CPU runs, fastest first (checked at run time: the build targets any
    /// x86-64-v3 CPU); in the page, relaxed SIMD where the page installed it, and SIMD128.
    pub fn available() -> Vec<Self> {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return match wasm::RELAXED_PRODUCTS.get() {
            Some(_) => vec![Self::RelaxedSimd, Self::Simd128],
            None => vec![Self::Simd128],
        };
        #[cfg(target_arch = "x86_64")]
        {
            let mut kernels = Vec::new();
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
            {
                if amx::int8_usable() {
                    kernels.push(Self::Amx);
                }
                kernels.push(Self::Vnni);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                kernels.push(Self::Avx2);
            }
            kernels
        }
        #[cfg(not(any(
            target_arch = "x86_64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )))]
        Vec::new()
    }

    /// Whether layers can be packed for `self` here: the kernels this CPU runs, and off
    /// WebAssembly the page's too (as plain integer loops, slow but the same numbers).
    pub fn runs_here(self) -> bool {
        (self.portable() && !cfg!(target_arch = "wasm32")) || Self::available().contains(&self)
    }

    /// Whether this is one of the page's kernels, whose products are the same bits on every CPU
    /// and in the page, and with which the encoder takes the same f32 steps everywhere too
    /// ([`portable`](super::portable)), so that native reproduces the page's numbers exactly.
    pub fn portable(self) -> bool {
        matches!(self, Self::Simd128 | Self::RelaxedSimd)
    }

    /// The kernel to encode with on this CPU ([`Self::preferred`] of [`Self::available`]); in
    /// the page, relaxed SIMD where it is installed, else SIMD128.
    pub fn best() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        let wide_f32 = is_x86_feature_detected!("avx512f");
        #[cfg(not(target_arch = "x86_64"))]
        let wide_f32 = false;
        Self::preferred(&Self::available(), wide_f32)
    }

    /// The first of `kernels` (fastest first) worth encoding with: AMX where the CPU has it (on
    /// a 2-core AMX VM, 1.46x VNNI's products and 1.26x its MiniLM encoding), else VNNI, else
    /// AVX2's only when the CPU's f32 products are no wider than it (`wide_f32`: AVX-512). On a
    /// Sapphire Rapids core the AVX2 kernel ran no faster than burn's AVX-512 f32 products (132
    /// vs 134 GOPS); with gemm held to AVX2 on a Zen 4 core pair it ran at 1.59x the f32
    /// products and encoded MiniLM 1.39x faster. Its 7-bit activations cost some accuracy
    /// (MiniLM embeddings within cosine 0.988 of f32 at worst, VNNI's 0.996).
    pub fn preferred(kernels: &[Self], wide_f32: bool) -> Option<Self> {
        kernels
            .iter()
            .copied()
            .find(|&kernel| kernel != Self::Avx2 || !wide_f32)
    }

    /// Whether products with `self` and with `other` are the same numbers: AMX and VNNI are
    /// (the same 8-bit quantisation, exact integer sums). SIMD128 sums the same integers but
    /// scales without fused multiply-adds (`Self::fused`); relaxed SIMD likewise against
    /// AVX2 (7-bit activations).
    pub fn same_results(self, other: Self) -> bool {
        self == other
            || matches!(
                (self, other),
                (Self::Amx, Self::Vnni) | (Self::Vnni, Self::Amx)
            )
    }

    /// Whether quantising and scaling back round `a · b + c` once (the x86-64 kernels' vector
    /// code, with FMA) or twice (the page's: WebAssembly has no fused multiply-add, and
    /// `mul_add` would call a software one; off WebAssembly too, so that its numbers are the
    /// page's).
    fn fused(self) -> bool {
        !self.portable()
    }

    /// The largest quantised activation.
    fn levels(self) -> f32 {
        match self {
            Self::Amx | Self::Vnni | Self::Simd128 => 255.0,
            Self::Avx2 | Self::RelaxedSimd => 127.0,
        }
    }

    /// Rows one block multiplies (tasks quantise whole blocks, padded with zero rows).
    fn tile_rows(self) -> usize {
        match self {
            Self::Amx => AMX_TILE_ROWS,
            Self::Vnni | Self::Avx2 => TILE_ROWS,
            Self::Simd128 | Self::RelaxedSimd => PAGE_ROWS,
        }
    }

    /// Inputs are padded with zeros to a multiple of this.
    fn input_multiple(self) -> usize {
        match self {
            Self::Amx => AMX_INPUTS,
            Self::Vnni | Self::Avx2 | Self::Simd128 | Self::RelaxedSimd => 4,
        }
    }

    /// A short name for benches and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Amx => "AMX",
            Self::Vnni => "AVX-512 VNNI",
            Self::Avx2 => "AVX2",
            Self::Simd128 => "WebAssembly SIMD128",
            Self::RelaxedSimd => "WebAssembly relaxed SIMD",
        }
    }
}

/// A linear layer's weights and bias packed for [`Int8Linear::forward`].
#[derive(Debug, Clone)]
pub struct Int8Linear {
    kernel: Kernel,
    inputs: usize,
    outputs: usize,
    /// Groups of 4 inputs (the inputs rounded up to the kernel's [`Kernel::input_multiple`]).
    groups: usize,
    /// Per panel, per group: 32 columns × 4 quantised weights (zero past the real ones).
    weights: Vec<i8>,
    /// Per output column (padded to the panels): weight = scale · quantised weight.
    scales: Vec<f32>,
    /// Per output column: the sum of its quantised weights (for the activations' zero point).
    sums: Vec<i32>,
    bias: Vec<f32>,
}

impl Int8Linear {
    /// Packs `weight` (`[inputs, outputs]` row-major, burn's `Linear` layout) and `bias`
    /// (`outputs` values) for `kernel`; `None` when it does not run here ([`Kernel::runs_here`]).
    pub fn new(
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        bias: Option<&[f32]>,
        kernel: Kernel,
    ) -> Option<Self> {
        kernel
            .runs_here()
            .then(|| Self::pack(weight, inputs, outputs, bias, kernel))
    }

    fn pack(
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        bias: Option<&[f32]>,
        kernel: Kernel,
    ) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is [inputs, outputs]"
        );
        // |Σ q_x·q_w| ≤ inputs · 255 · 127 must fit an i32.
        assert!(
            inputs <= 65_000,
            "{inputs} inputs would overflow the i32 sums"
        );
        let groups = inputs.div_ceil(kernel.input_multiple()) * kernel.input_multiple() / 4;
        let columns = outputs.div_ceil(PANEL) * PANEL;
        let mut scales = vec![1.0; columns];
        let mut sums = vec![0; columns];
        let mut weights = vec![0i8; columns * groups * 4];
        for column in 0..outputs {
            let max = (0..inputs)
                .map(|i| weight[i * outputs + column].abs())
                .fold(0f32, f32::max);
            let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
            scales[column] = scale;
            let (panel, lane) = (column / PANEL, column % PANEL);
            for i in 0..inputs {
                let q = (weight[i * outputs + column] / scale).round() as i8;
                let group = panel * groups + i / 4;
                weights[group * GROUP_BYTES + lane * 4 + i % 4] = q;
                sums[column] += i32::from(q);
            }
        }
        let mut padded_bias = vec![0.0; columns];
        if let Some(bias) = bias {
            assert_eq!(bias.len(), outputs, "one bias per output");
            padded_bias[..outputs].copy_from_slice(bias);
        }
        Self {
            kernel,
            inputs,
            outputs,
            groups,
            weights,
            scales,
            sums,
            bias: padded_bias,
        }
    }

    /// The layer's output width.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// `x · W + b` for `x` of `rows` rows of `Self::inputs` values: `rows × outputs` values,
    /// computed on rayon's threads in tasks of 96 rows.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs, "x is [rows, inputs]");
        let mut output = vec![0.0; rows * self.outputs];
        let (output_chunk, input_chunk) = (TASK_ROWS * self.outputs, TASK_ROWS * self.inputs);
        #[cfg(not(target_arch = "wasm32"))]
        {
            use rayon::prelude::*;
            output
                .par_chunks_mut(output_chunk.max(1))
                .zip(x.par_chunks(input_chunk.max(1)))
                .for_each(|(output, x)| self.forward_task(x, output));
        }
        #[cfg(target_arch = "wasm32")]
        output
            .chunks_mut(output_chunk.max(1))
            .zip(x.chunks(input_chunk.max(1)))
            .for_each(|(output, x)| self.forward_task(x, output));
        output
    }

    /// One task: quantises its rows, then multiplies them tile by tile, panel by panel (in the
    /// page, panel by panel: [`Self::multiply_widened`], or all at once in the relaxed-SIMD
    /// module: [`Self::multiply_relaxed`]).
    fn forward_task(&self, x: &[f32], output: &mut [f32]) {
        let rows = x.len() / self.inputs.max(1);
        let quantised = QuantisedRows::new(x, rows, self.inputs, self.groups * 4, self.kernel);
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        match self.kernel {
            Kernel::RelaxedSimd => self.multiply_relaxed(&quantised, rows, output),
            _ => self.multiply_widened(&quantised, rows, output),
        }
        #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
        {
            // SAFETY: an Int8Linear is only packed for a kernel that runs here.
            #[cfg(target_arch = "x86_64")]
            let _tiles = (self.kernel == Kernel::Amx).then(|| unsafe { amx::Tiles::configure() });
            for tile in 0..quantised.tiles() {
                for panel in 0..self.bias.len() / PANEL {
                    let (block, offset, columns) = self.block(&quantised, rows, tile, panel);
                    block.multiply(&mut output[offset..], self.outputs, columns);
                }
            }
        }
    }

    /// Tile `tile` of `quantised` (of `rows` real rows) against panel `panel`; where its first
    /// output goes in the task's output, and how many of its columns are real.
    fn block<'a>(
        &'a self,
        quantised: &'a QuantisedRows,
        rows: usize,
        tile: usize,
        panel: usize,
    ) -> (Block<'a>, usize, usize) {
        let block_rows = self.kernel.tile_rows();
        let first_row = tile * block_rows;
        let tile_rows = block_rows.min(rows - first_row);
        let first_column = panel * PANEL;
        let columns = first_column..first_column + PANEL;
        let block = Block {
            rows: &quantised.values[first_row * quantised.width..][..block_rows * quantised.width],
            row_scales: &quantised.scales[first_row..][..tile_rows],
            row_zeros: &quantised.zeros[first_row..][..tile_rows],
            weights: &self.weights[panel * self.groups * GROUP_BYTES..]
                [..self.groups * GROUP_BYTES],
            column_scales: &self.scales[columns.clone()],
            column_sums: &self.sums[columns.clone()],
            bias: &self.bias[columns],
            groups: self.groups,
            kernel: self.kernel,
        };
        let offset = first_row * self.outputs + first_column;
        (block, offset, PANEL.min(self.outputs - first_column))
    }

    /// Relaxed SIMD's products for one task: the installed module's integer sums for all its
    /// rows and panels, then scaled back as [`Block::rescale`] does ([`Block::rescale_simd128`]).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn multiply_relaxed(&self, quantised: &QuantisedRows, rows: usize, output: &mut [f32]) {
        let products = wasm::RELAXED_PRODUCTS
            .get()
            .expect("layers are packed for relaxed SIMD only once it is installed");
        let columns = self.bias.len();
        let mut sums = vec![0; quantised.values.len() / quantised.width * columns];
        products(RelaxedProducts {
            rows: &quantised.values,
            width: quantised.width,
            weights: &self.weights,
            sums: &mut sums,
        });
        for panel in 0..columns / PANEL {
            // The panel's column scales, sums and biases.
            let (block, _, real_columns) = self.block(quantised, rows, 0, panel);
            let rows = quantised.scales.iter().zip(&quantised.zeros).enumerate();
            for (r, (&scale, &zero)) in rows {
                let sums = &sums[r * columns + panel * PANEL..][..real_columns];
                let output = &mut output[r * self.outputs + panel * PANEL..][..real_columns];
                block.rescale_simd128(sums, scale, zero, output);
            }
        }
    }

    /// SIMD128's products for one task: its rows widened to 16 bits once, then panel by panel,
    /// its weights widened once for all the task's tiles, so that the kernel's loop loads 16-bit
    /// values as they are (widening in the loop took as many shuffles as products). Packing the
    /// weights in 16 bits instead, twice the memory, was no faster.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn multiply_widened(&self, quantised: &QuantisedRows, rows: usize, output: &mut [f32]) {
        let wide_rows: Vec<i16> = quantised.values.iter().map(|&v| i16::from(v)).collect();
        let width = quantised.width;
        let mut wide_weights = vec![0i16; self.groups * GROUP_BYTES];
        for panel in 0..self.bias.len() / PANEL {
            // The panel's weights, as every block of it has them.
            let (first, ..) = self.block(quantised, rows, 0, panel);
            for (wide, &w) in wide_weights.iter_mut().zip(first.weights) {
                *wide = i16::from(w);
            }
            for tile in 0..quantised.tiles() {
                let (block, offset, columns) = self.block(quantised, rows, tile, panel);
                let wide_rows = &wide_rows[tile * PAGE_ROWS * width..][..PAGE_ROWS * width];
                let output = &mut output[offset..];
                block.multiply_simd128(wide_rows, &wide_weights, output, self.outputs, columns);
            }
        }
    }
}

/// A pseudo-random layer and rows for checking products, with shapes off every multiple of the
/// kernels' tiles: more rows than one task (and a partial tile), inputs in a partial group of 4,
/// outputs in a partial panel; activations skewed like a GELU's output, so that rows get
/// different zero points.
pub struct ProductCase {
    pub rows: usize,
    pub inputs: usize,
    pub outputs: usize,
    /// `rows × inputs`.
    pub x: Vec<f32>,
    /// `inputs × outputs` (burn's `Linear` layout).
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl ProductCase {
    /// The case for `seed`.
    pub fn new(seed: u64) -> Self {
        let (rows, inputs, outputs) = (110, 37, 45);
        let x = SplitMix64(seed)
            .centred_f32s(rows * inputs, 4.0)
            .into_iter()
            .map(|v| v.max(-0.2))
            .collect();
        Self {
            rows,
            inputs,
            outputs,
            x,
            weight: SplitMix64(seed + 1).centred_f32s(inputs * outputs, 0.5),
            bias: SplitMix64(seed + 2).centred_f32s(outputs, 1.0),
        }
    }

    /// The products with `kernel`, if it runs here ([`Kernel::runs_here`]).
    pub fn products(&self, kernel: Kernel) -> Option<Vec<f32>> {
        let layer = Int8Linear::new(
            &self.weight,
            self.inputs,
            self.outputs,
            Some(&self.bias),
            kernel,
        )?;
        Some(layer.forward(&self.x, self.rows))
    }
}

/// A digest of the products of two [`ProductCase`]s with one of the page's kernels (`None`
/// where the kernel does not run here), which the page and native compute alike on every CPU:
/// both quantise with the same rounded products and sums (no fused multiply-add), sum exactly
/// in integers and scale back with the same roundings. The browser test compares the page's
/// digest with native's: the same digest, the same bits.
pub fn page_parity_digest(kernel: Kernel) -> Option<String> {
    debug_assert!(
        kernel.portable(),
        "{kernel:?} is not one of the page's kernels"
    );
    // FNV-1a over the products' bits.
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for seed in [1, 11] {
        for value in ProductCase::new(seed).products(kernel)? {
            for byte in value.to_bits().to_le_bytes() {
                digest = (digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    Some(format!("{digest:016x}"))
}

/// A burn `Linear`'s int8 copy ([`Int8Linear`]), used while the layer still holds the very
/// weights it was made from: a layer trained or loaded since falls back to f32 by itself.
/// Empty (`Default`) until [`Int8Copy::of`] fills it, and where it cannot (off Flex).
#[derive(Clone, Default)]
pub struct Int8Copy(Option<Arc<CopyOf>>);

/// An [`Int8Linear`] and the tensors it was packed from (kept, so that their buffers cannot be
/// reused by other tensors while the copy lives).
struct CopyOf {
    weight: Tensor<Flex, 2>,
    bias: Option<Tensor<Flex, 1>>,
    layer: Int8Linear,
}

/// The kernel and shape, not the megabytes of weights (models print their fields).
impl std::fmt::Debug for Int8Copy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(copy) => write!(
                f,
                "Int8Copy({:?}, {} × {})",
                copy.layer.kernel, copy.layer.inputs, copy.layer.outputs
            ),
            None => f.write_str("Int8Copy(none)"),
        }
    }
}

impl Int8Copy {
    /// The int8 copy of `linear` for `kernel` when it runs on Flex and this CPU has the kernel.
    pub fn of<B: Backend>(linear: &Linear<B>, kernel: Kernel) -> Self {
        let Some((weight, bias)) = flex_parameters(linear) else {
            return Self(None);
        };
        let [inputs, outputs] = weight.dims();
        let values = weight.to_data();
        let values = values.as_slice::<f32>().expect("an f32 tensor");
        let bias_values = bias.as_ref().map(Tensor::to_data);
        let bias_values = bias_values
            .as_ref()
            .map(|bias| bias.as_slice::<f32>().expect("an f32 tensor"));
        Self(
            Int8Linear::new(values, inputs, outputs, bias_values, kernel).map(|layer| {
                Arc::new(CopyOf {
                    weight,
                    bias,
                    layer,
                })
            }),
        )
    }

    /// The kernel of the int8 weights this copy holds, if it holds any.
    pub fn kernel(&self) -> Option<Kernel> {
        self.0.as_ref().map(|copy| copy.layer.kernel)
    }

    /// Whether the copy multiplies with one of the page's kernels ([`Kernel::portable`]).
    pub fn portable(&self) -> bool {
        self.kernel().is_some_and(Kernel::portable)
    }

    /// `linear`'s output for `x` (`[rows, inputs]`) computed in int8, or `x` back when this copy
    /// is empty or no longer `linear`'s.
    pub fn forward<B: Backend>(
        &self,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
    ) -> Result<Tensor<B, 2>, Tensor<B, 2>> {
        let Some(copy) = &self.0 else { return Err(x) };
        if x.dtype() != burn::tensor::DType::F32 {
            return Err(x);
        }
        let current = flex_parameters(linear);
        let unchanged = current.is_some_and(|(weight, bias)| {
            same_buffer(&weight, &copy.weight)
                && match (&bias, &copy.bias) {
                    (Some(bias), Some(source)) => same_buffer(bias, source),
                    (None, None) => true,
                    _ => false,
                }
        });
        if !unchanged {
            return Err(x);
        }
        let layer = &copy.layer;
        let x: Tensor<Flex, 2> = as_flex(x).expect("the weights are on Flex, so x is too");
        let [rows, _] = x.dims();
        let device = x.device();
        let input = x.into_primitive().tensor();
        let output = match input.as_slice::<f32>() {
            Some(values) => layer.forward(values, rows),
            None => {
                let data =
                    Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(input)).into_data();
                layer.forward(data.as_slice::<f32>().expect("f32 activations"), rows)
            }
        };
        let output =
            Tensor::<Flex, 2>::from_data(TensorData::new(output, [rows, layer.outputs()]), &device);
        let output: Box<dyn Any> = Box::new(output);
        Ok(*output.downcast::<Tensor<B, 2>>().expect("B is Flex"))
    }
}

/// `linear`'s weight and bias as Flex f32 tensors, when they are.
fn flex_parameters<B: Backend>(
    linear: &Linear<B>,
) -> Option<(Tensor<Flex, 2>, Option<Tensor<Flex, 1>>)> {
    let weight = as_flex(linear.weight.val())?;
    let bias = match &linear.bias {
        Some(bias) => Some(as_flex(bias.val())?),
        None => None,
    };
    Some((weight, bias))
}

/// Whether `a` and `b` view the same buffer the same way.
fn same_buffer<const D: usize>(a: &Tensor<Flex, D>, b: &Tensor<Flex, D>) -> bool {
    let (a, b) = (
        a.clone().into_primitive().tensor(),
        b.clone().into_primitive().tensor(),
    );
    Arc::ptr_eq(&a.data_arc(), &b.data_arc()) && a.layout() == b.layout()
}

/// `tensor` as a Flex f32 tensor, when it is one.
fn as_flex<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Option<Tensor<Flex, D>> {
    if tensor.dtype() != burn::tensor::DType::F32 {
        return None;
    }
    let tensor: Box<dyn Any> = Box::new(tensor);
    tensor
        .downcast::<Tensor<Flex, D>>()
        .ok()
        .map(|tensor| *tensor)
}

/// One tile of quantised rows (the kernel's [`Kernel::tile_rows`]) against one panel of 32
/// columns, with what scales the integer products back:
/// `x·w ≈ row_scale · column_scale · (Σ q_x·q_w − row_zero · Σ q_w) + bias`.
struct Block<'a> {
    /// The kernel's tile rows of `groups · 4` bytes (rows past the real ones are zeros); the
    /// page's kernel reads them widened (`Int8Linear::multiply_widened`).
    #[cfg_attr(
        all(target_arch = "wasm32", target_feature = "simd128"),
        allow(dead_code)
    )]
    rows: &'a [u8],
    /// One per real row of the tile.
    row_scales: &'a [f32],
    row_zeros: &'a [i32],
    /// `groups` groups of GROUP_BYTES.
    weights: &'a [i8],
    /// 32 each.
    column_scales: &'a [f32],
    column_sums: &'a [i32],
    bias: &'a [f32],
    groups: usize,
    /// One that runs here (an [`Int8Linear`] is only packed for those).
    kernel: Kernel,
}

impl Block<'_> {
    /// Writes the tile's real rows' first `columns` outputs into `output`, whose rows are
    /// `stride` apart.
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    fn multiply(&self, output: &mut [f32], stride: usize, columns: usize) {
        assert!(
            self.row_scales.len() <= self.kernel.tile_rows()
                && self.row_zeros.len() == self.row_scales.len()
        );
        assert!(columns <= PANEL && self.column_scales.len() == PANEL);
        assert!(self.column_sums.len() == PANEL && self.bias.len() == PANEL);
        assert!(output.len() >= (self.row_scales.len() - 1) * stride + columns);
        // SAFETY: the CPU has the kernel's instructions (`kernel` is one it has); the slices
        // have the lengths documented on the fields, and `output` holds every row written.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            // Tasks configure AMX's tiles once for all their blocks; a block alone does here.
            let _tiles =
                (self.kernel == Kernel::Amx && !amx::configured()).then(|| amx::Tiles::configure());
            match self.kernel {
                Kernel::Amx => self.multiply_amx(output, stride, columns),
                Kernel::Vnni => self.multiply_vnni(output, stride, columns),
                Kernel::Avx2 => self.multiply_avx2(output, stride, columns),
                Kernel::Simd128 | Kernel::RelaxedSimd => {
                    self.multiply_portable(output, stride, columns)
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.multiply_portable(output, stride, columns);
    }

    /// The integer products one at a time: the kernels' test oracle, and the page kernels' sums
    /// off WebAssembly.
    #[cfg(any(test, not(all(target_arch = "wasm32", target_feature = "simd128"))))]
    fn multiply_portable(&self, output: &mut [f32], stride: usize, columns: usize) {
        let width = self.groups * 4;
        for (r, (&scale, &zero)) in self.row_scales.iter().zip(self.row_zeros).enumerate() {
            for c in 0..columns {
                let sum: i32 = (0..width)
                    .map(|i| {
                        let w = self.weights[(i / 4) * GROUP_BYTES + c * 4 + i % 4];
                        i32::from(self.rows[r * width + i]) * i32::from(w)
                    })
                    .sum();
                output[r * stride + c] = self.rescale(sum, scale, zero, c);
            }
        }
    }

    fn rescale(&self, sum: i32, row_scale: f32, row_zero: i32, c: usize) -> f32 {
        multiply_add(
            (sum - row_zero * self.column_sums[c]) as f32,
            row_scale * self.column_scales[c],
            self.bias[c],
            self.kernel.fused(),
        )
    }
}

/// Activations quantised per row: `x ≈ scale · (q − zero)` with `q` in 0..=levels, the range
/// widened to include 0 so that zero stays exact. Rows are padded with zeros to whole tiles
/// and to `width` (a multiple of 4) values.
struct QuantisedRows {
    values: Vec<u8>,
    width: usize,
    tile_rows: usize,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

impl QuantisedRows {
    fn new(x: &[f32], rows: usize, inputs: usize, width: usize, kernel: Kernel) -> Self {
        let tile_rows = kernel.tile_rows();
        let padded_rows = rows.div_ceil(tile_rows) * tile_rows;
        let mut values = vec![0u8; padded_rows * width];
        let (scales, zeros) = x
            .chunks_exact(inputs)
            .zip(values.chunks_exact_mut(width))
            .map(|(row, out)| quantise_row(row, &mut out[..inputs], kernel))
            .unzip();
        Self {
            values,
            width,
            tile_rows,
            scales,
            zeros,
        }
    }

    fn tiles(&self) -> usize {
        self.values.len() / (self.tile_rows * self.width)
    }
}

/// Quantises one row into `out` for `kernel`, returning its scale and zero point.
fn quantise_row(row: &[f32], out: &mut [u8], kernel: Kernel) -> (f32, i32) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 F and BW (it has VNNI, and AMX CPUs have it too).
        Kernel::Amx | Kernel::Vnni => unsafe {
            avx512::quantise_row_avx512(row, out, kernel.levels())
        },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128 | Kernel::RelaxedSimd => {
            wasm::quantise_row_simd128(row, out, kernel.levels())
        }
        _ => quantise_row_portable(row, out, kernel),
    }
}

/// The scale and zero point of a row whose values span `min..=max` (0 included).
fn row_range(min: f32, max: f32, levels: f32) -> (f32, f32) {
    let scale = if max > min { (max - min) / levels } else { 1.0 };
    (scale, (-min / scale).round_ties_even().clamp(0.0, levels))
}

fn quantise_row_portable(row: &[f32], out: &mut [u8], kernel: Kernel) -> (f32, i32) {
    let levels = kernel.levels();
    let (min, max) = row
        .iter()
        .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let (scale, zero) = row_range(min, max, levels);
    quantise_values(row, out, 1.0 / scale, zero, levels, kernel.fused());
    (scale, zero as i32)
}

fn quantise_values(row: &[f32], out: &mut [u8], inverse: f32, zero: f32, levels: f32, fused: bool) {
    for (q, &v) in out.iter_mut().zip(row) {
        *q = multiply_add(v, inverse, zero, fused)
            .round_ties_even()
            .clamp(0.0, levels) as u8;
    }
}

/// `a · b + c`, rounded once where `fused` ([`Kernel::fused`]), else twice.
#[inline(always)]
fn multiply_add(a: f32, b: f32, c: f32, fused: bool) -> f32 {
    if fused { a.mul_add(b, c) } else { a * b + c }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    fn f32_product(x: &[f32], w: &[f32], b: &[f32], rows: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; rows * n];
        for r in 0..rows {
            for c in 0..n {
                out[r * n + c] = b[c] + (0..k).map(|i| x[r * k + i] * w[i * n + c]).sum::<f32>();
            }
        }
        out
    }

    #[test]
    fn avx2_is_preferred_only_without_avx512() {
        use Kernel::{Amx, Avx2, Vnni};
        assert_eq!(Kernel::preferred(&[Amx, Vnni, Avx2], true), Some(Amx));
        assert_eq!(Kernel::preferred(&[Vnni, Avx2], true), Some(Vnni));
        // AVX-512 without VNNI (Skylake-SP): its f32 products are as fast as AVX2's int8.
        assert_eq!(Kernel::preferred(&[Avx2], true), None);
        assert_eq!(Kernel::preferred(&[Avx2], false), Some(Avx2));
        assert_eq!(Kernel::preferred(&[], false), None);
    }

    #[test]
    fn every_kernel_of_this_cpu_is_close_to_the_f32_product() {
        #[cfg(target_arch = "x86_64")]
        assert!(
            Kernel::available().contains(&Kernel::Avx2),
            "an x86-64-v3 build runs on AVX2"
        );
        let case = ProductCase::new(1);
        let (x, w, b) = (&case.x, &case.weight, &case.bias);
        let expected = f32_product(x, w, b, case.rows, case.inputs, case.outputs);
        let scale = expected.iter().map(|v| v.abs()).fold(0f32, f32::max);
        assert!(Kernel::Amx.same_results(Kernel::Vnni) && !Kernel::Vnni.same_results(Kernel::Avx2));
        let page_kernels = [Kernel::Simd128, Kernel::RelaxedSimd];
        for kernel in page_kernels {
            assert!(!kernel.same_results(Kernel::Vnni) && !kernel.fused());
            assert!(!Kernel::available().contains(&kernel) && kernel.runs_here());
        }
        let mut outputs: Vec<(Kernel, Vec<f32>)> = Vec::new();
        // The page's kernels too (here their plain loops): the numbers the page is checked
        // against.
        for kernel in Kernel::available().into_iter().chain(page_kernels) {
            let got = case.products(kernel).unwrap();
            // AMX and VNNI sum the same integer products: the same numbers, bit for bit;
            // SIMD128 too (relaxed SIMD as AVX2, in 7 bits), but scales them with products and
            // sums rounded separately.
            for (other, output) in &outputs {
                if kernel.same_results(*other) {
                    assert_eq!(&got, output, "{kernel:?} against {other:?}");
                } else if (kernel == Kernel::Simd128 && *other != Kernel::Avx2)
                    || (kernel == Kernel::RelaxedSimd && *other == Kernel::Avx2)
                {
                    let rounding = got.iter().zip(output).map(|(a, b)| (a - b).abs());
                    let rounding = rounding.fold(0f32, f32::max);
                    assert!(
                        rounding < 1e-5 * scale,
                        "{kernel:?} against {other:?}: {rounding}"
                    );
                }
            }
            let worst = got
                .iter()
                .zip(&expected)
                .map(|(g, e)| (g - e).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 0.02 * scale,
                "{kernel:?}: worst error {worst}, largest output {scale}"
            );
            assert!(worst > 0.0, "{kernel:?}: int8 products are not exact");
            outputs.push((kernel, got));
        }
    }

    #[test]
    fn simd_paths_match_the_portable_ones_exactly() {
        // Two of AMX's steps of 64 inputs.
        let groups = 32;
        for kernel in Kernel::available() {
            let levels = kernel.levels();
            // A row of 45 values: two vectors and a tail.
            let row = SplitMix64(4).centred_f32s(45, 6.0);
            let (mut simd, mut portable) = (vec![0u8; 45], vec![0u8; 45]);
            let range = quantise_row(&row, &mut simd, kernel);
            assert_eq!(range, quantise_row_portable(&row, &mut portable, kernel));
            assert_eq!(simd, portable, "{kernel:?}");
            assert!(simd.iter().any(|&q| f32::from(q) == levels), "{simd:?}");

            let mut rng = SplitMix64(5);
            let rows: Vec<u8> = (0..kernel.tile_rows() * groups * 4)
                .map(|_| rng.below(levels as usize + 1) as u8)
                .collect();
            let weights: Vec<i8> = (0..groups * GROUP_BYTES)
                .map(|_| (rng.below(255) as i32 - 127) as i8)
                .collect();
            let column_sums: Vec<i32> = (0..PANEL).map(|_| rng.below(2000) as i32 - 1000).collect();
            let block = Block {
                rows: &rows,
                row_scales: &SplitMix64(6).centred_f32s(5, 0.1),
                row_zeros: &[0, 17, levels as i32, 100, 3],
                weights: &weights,
                column_scales: &SplitMix64(7).centred_f32s(PANEL, 0.01),
                column_sums: &column_sums,
                bias: &SplitMix64(8).centred_f32s(PANEL, 1.0),
                groups,
                kernel,
            };
            // 5 rows of the tile and 21 of 32 columns are real; the rest of `output` stays
            // untouched.
            let (stride, columns) = (40, 21);
            let (mut simd, mut portable) = (vec![-1.0; 5 * stride], vec![-1.0; 5 * stride]);
            block.multiply(&mut simd, stride, columns);
            block.multiply_portable(&mut portable, stride, columns);
            assert_eq!(simd, portable, "{kernel:?}");
            assert_eq!(
                portable.iter().filter(|&&v| v == -1.0).count(),
                5 * (stride - columns)
            );
        }
    }

    #[test]
    fn a_copy_serves_its_layer_until_the_weights_change() {
        use burn::module::Param;
        use burn::nn::LinearConfig;
        let device = Default::default();
        let linear = LinearConfig::new(24, 40).init::<Flex>(&device);
        let Some(&kernel) = Kernel::available().first() else {
            return;
        };
        let copy = Int8Copy::of(&linear, kernel);
        assert_eq!(
            format!("{copy:?}"),
            format!("Int8Copy({kernel:?}, 24 × 40)")
        );
        let x = Tensor::<Flex, 2>::from_data(
            TensorData::new(SplitMix64(9).centred_f32s(9 * 24, 2.0), [9, 24]),
            &device,
        );
        let int8 = copy
            .forward(&linear, x.clone())
            .expect("a Flex layer gets a copy");
        let f32_output = linear.forward(x.clone());
        let error = (int8 - f32_output.clone()).abs().max().into_scalar();
        let largest = f32_output.abs().max().into_scalar();
        assert!(
            error < 0.02 * largest,
            "error {error}, largest output {largest}"
        );

        let mut changed = linear.clone();
        changed.weight = Param::from_tensor(linear.weight.val() * 1.0);
        assert!(
            copy.forward(&changed, x.clone()).is_err(),
            "new weights must fall back to f32"
        );
        let mut changed = linear.clone();
        changed.bias = linear
            .bias
            .as_ref()
            .map(|b| Param::from_tensor(b.val() + 1.0));
        assert!(
            copy.forward(&changed, x).is_err(),
            "a new bias must fall back to f32"
        );
    }
}
