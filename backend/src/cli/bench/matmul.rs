//! `flipside bench matmul`: the encoder's linear layers alone, in GFLOPS, against PyTorch's
//! `F.linear` on the same shapes and threads. On CPUs these products are most of encoding and
//! fine-tuning, so their speed bounds `bench encode` and `bench train`: this bench tells how much
//! of a gap is the matrix-product kernel and how much is everything around it.

use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use clap::Args;
use serde::Deserialize;

use super::{TorchBenchArgs, run_reference_script};
use crate::compute::Compute;
use crate::home::Home;
use crate::model_dirs::{BertFiles, DEFAULT_ENCODER, resolve_model_dir};
use crate::with_backend;
use flipside_shared::models::bert::BertConfig;
use flipside_shared::ops::bf16::{self, Bf16Kernel, Strided};
use flipside_shared::ops::int8::{Int8Linear, Kernel};
use flipside_shared::random::SplitMix64;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/torch_linear_layers.py");

#[derive(Debug, Args)]
pub struct MatmulBenchArgs {
    /// Token rows of every product: a batch of 32 Rotten Tomatoes sentences, length-sorted, has
    /// about 900
    #[arg(long, default_value_t = 896)]
    pub rows: usize,
    /// Timed passes through all the encoder's linear layers (after one untimed pass)
    #[arg(long, default_value_t = 20)]
    pub passes: usize,
    /// The encoder whose layer shapes are multiplied: a BERT directory or a model asset name
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub model: String,
    #[command(flatten)]
    pub sides: TorchBenchArgs,
}

/// The products of one pass: `(inputs, outputs)` of every linear layer of every encoder layer,
/// in the model's order (query, key, value, attention output, intermediate, output).
#[derive(Debug)]
struct Shapes {
    layers: Vec<(usize, usize)>,
}

impl Shapes {
    fn of(config: &BertConfig) -> Self {
        let (hidden, intermediate) = (config.hidden_size, config.intermediate_size);
        let one_layer = [
            (hidden, hidden),
            (hidden, hidden),
            (hidden, hidden),
            (hidden, hidden),
            (hidden, intermediate),
            (intermediate, hidden),
        ];
        Self {
            layers: (0..config.num_hidden_layers)
                .flat_map(|_| one_layer)
                .collect(),
        }
    }

    /// Floating-point operations of one pass over `rows` tokens (a multiply and an add each).
    fn flops(&self, rows: usize) -> f64 {
        self.layers
            .iter()
            .map(|&(inputs, outputs)| 2.0 * (rows * inputs * outputs) as f64)
            .sum()
    }
}

#[derive(Deserialize)]
struct ReferenceResult {
    seconds: f64,
    torch: String,
    threads: usize,
}

pub fn bench_matmul(home: &Home, args: MatmulBenchArgs) -> Result<()> {
    let threads = args.sides.threads();
    let model_dir = resolve_model_dir(home, &args.model)?;
    let shapes = Shapes::of(&BertFiles::read(&model_dir)?.config);
    let flops = shapes.flops(args.rows) * args.passes as f64;
    println!(
        "matmul bench: {} linear layers of {} ({:.1} MFLOP per token), {} rows each, {} passes, {threads} threads; CPU features: {}",
        shapes.layers.len(),
        args.model,
        shapes.flops(1) / 1e6,
        args.rows,
        args.passes,
        super::cpu_features()
    );
    let reference = match args.sides.reference_python(home)? {
        Some(python) => {
            let request = serde_json::json!({
                "shapes": shapes.layers, "rows": args.rows, "passes": args.passes,
                "threads": threads, "device": args.sides.device,
            });
            let stdout = run_reference_script(python, REFERENCE_SCRIPT, &request, "torch")?;
            let result: ReferenceResult =
                serde_json::from_slice(&stdout).context("the reference printed no result")?;
            Some(result)
        }
        None => None,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let seconds = pool.install(|| {
        with_backend!(
            args.sides.device,
            time_flipside(&shapes, args.rows, args.passes)
        )
    })?;
    let kernels = args.sides.int8_kernels();
    let int8_seconds: Vec<f64> = kernels
        .iter()
        .map(|&kernel| pool.install(|| time_int8(&shapes, args.rows, args.passes, kernel)))
        .collect();

    let bf16_kernels = Bf16Kernel::available();
    let bf16_seconds: Vec<_> = bf16_kernels
        .iter()
        .map(|&kernel| {
            Product::ALL.map(|product| {
                pool.install(|| time_bf16(&shapes, args.rows, args.passes, kernel, product))
            })
        })
        .collect();

    let tokens = (args.rows * args.passes) as f64;
    let ours = flops / seconds / 1e9;
    println!(
        "{:<40} {ours:>7.1} GFLOPS  {:>8.0} tokens/s",
        "flipside (burn matmul + bias)",
        tokens / seconds
    );
    for (kernel, int8_seconds) in kernels.iter().zip(int8_seconds) {
        println!(
            "{:<40} {:>7.1} GOPS    {:>8.0} tokens/s  ({:.2}x burn's f32)",
            format!("flipside int8 ({})", kernel.name()),
            flops / int8_seconds / 1e9,
            tokens / int8_seconds,
            seconds / int8_seconds
        );
    }
    let bf16_rows = bf16_kernels
        .iter()
        .zip(&bf16_seconds)
        .flat_map(|(kernel, seconds)| {
            Product::ALL
                .iter()
                .zip(seconds)
                .map(move |(product, &s)| (kernel, product, s))
        });
    for (kernel, product, bf16_seconds) in bf16_rows {
        println!(
            "{:<40} {:>7.1} GFLOPS  {:>8.0} tokens/s  ({:.2}x burn's f32 x · W)",
            format!("flipside bf16 ({}), {}", kernel.name(), product.name()),
            flops / bf16_seconds / 1e9,
            tokens / bf16_seconds,
            seconds / bf16_seconds
        );
    }
    if let Some(reference) = reference {
        let theirs = flops / reference.seconds / 1e9;
        let label = format!(
            "F.linear (torch {}), {} threads",
            reference.torch, reference.threads
        );
        println!(
            "{label:<40} {theirs:>7.1} GFLOPS  {:>8.0} tokens/s",
            tokens / reference.seconds
        );
        println!("ratio flipside / torch: {:.2}x", ours / theirs);
    }
    Ok(())
}

/// Seconds of `passes` passes through the products, each `rows × inputs` by `inputs × outputs`
/// plus a bias, as `burn::nn::Linear` computes them; distinct weights per layer, as in the model.
fn time_flipside<B: Backend>(
    compute: Compute<B>,
    shapes: &Shapes,
    rows: usize,
    passes: usize,
) -> Result<f64> {
    let device = &compute.device;
    let normal = Distribution::Normal(0.0, 0.02);
    let layers: Vec<(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>)> = shapes
        .layers
        .iter()
        .map(|&(inputs, outputs)| {
            (
                Tensor::random([rows, inputs], normal, device),
                Tensor::random([inputs, outputs], normal, device),
                Tensor::zeros([1, outputs], device),
            )
        })
        .collect();
    let pass = || -> Result<()> {
        for (x, weight, bias) in &layers {
            drop(x.clone().matmul(weight.clone()) + bias.clone());
        }
        B::sync(device).map_err(|e| anyhow!("the device failed: {e:?}"))
    };
    pass()?;
    let started = Instant::now();
    for _ in 0..passes {
        pass()?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Seconds of the same passes through [`Int8Linear`]s (weights packed beforehand, activations
/// quantised in every product, as in encoding).
fn time_int8(shapes: &Shapes, rows: usize, passes: usize, kernel: Kernel) -> f64 {
    let mut rng = SplitMix64(7);
    let mut normal = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| (rng.uniform() as f32 - 0.5) * 0.07)
            .collect()
    };
    let layers: Vec<(Vec<f32>, Int8Linear)> = shapes
        .layers
        .iter()
        .map(|&(inputs, outputs)| {
            let weight = normal(inputs * outputs);
            let bias = vec![0.0; outputs];
            let layer = Int8Linear::new(&weight, inputs, outputs, Some(&bias), kernel)
                .expect("the kernel is one this CPU has");
            (normal(rows * inputs), layer)
        })
        .collect();
    let pass = || {
        for (x, layer) in &layers {
            drop(layer.forward(x, rows));
        }
    };
    pass();
    let started = Instant::now();
    for _ in 0..passes {
        pass();
    }
    started.elapsed().as_secs_f64()
}

/// The three products of a linear layer in training: the forward pass and its two gradients.
#[derive(Debug, Clone, Copy)]
enum Product {
    Forward,
    InputGradient,
    WeightGradient,
}

impl Product {
    const ALL: [Self; 3] = [Self::Forward, Self::InputGradient, Self::WeightGradient];

    fn name(self) -> &'static str {
        match self {
            Self::Forward => "x · W",
            Self::InputGradient => "dy · Wᵀ",
            Self::WeightGradient => "xᵀ · dy",
        }
    }
}

/// Seconds of the same passes through bf16 products ([`bf16::matmul`], operands packed in every
/// product, as in training), each layer's `product`: the same FLOPs whichever it is.
fn time_bf16(
    shapes: &Shapes,
    rows: usize,
    passes: usize,
    kernel: Bf16Kernel,
    product: Product,
) -> f64 {
    let mut rng = SplitMix64(7);
    let mut normal = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| (rng.uniform() as f32 - 0.5) * 0.07)
            .collect()
    };
    let layers: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = shapes
        .layers
        .iter()
        .map(|&(inputs, outputs)| {
            (
                normal(rows * inputs),
                normal(inputs * outputs),
                normal(rows * outputs),
            )
        })
        .collect();
    let pass = || {
        for (&(k, n), (x, w, dy)) in shapes.layers.iter().zip(&layers) {
            let m = rows;
            drop(match product {
                Product::Forward => {
                    bf16::matmul(kernel, Strided::rows(x, k), Strided::rows(w, n), m, k, n)
                }
                Product::InputGradient => bf16::matmul(
                    kernel,
                    Strided::rows(dy, n),
                    Strided::transposed(w, n),
                    m,
                    n,
                    k,
                ),
                Product::WeightGradient => bf16::matmul(
                    kernel,
                    Strided::transposed(x, k),
                    Strided::rows(dy, n),
                    k,
                    m,
                    n,
                ),
            });
        }
    };
    pass();
    let started = Instant::now();
    for _ in 0..passes {
        pass();
    }
    started.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minilm_layer_costs_what_its_products_multiply_out_to() {
        let config: BertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
            "num_attention_heads": 12, "intermediate_size": 1536,
        }))
        .unwrap();
        let shapes = Shapes::of(&config);
        assert_eq!(shapes.layers.len(), 36);
        assert_eq!(shapes.layers[4], (384, 1536));
        assert_eq!(shapes.layers[5], (1536, 384));
        // Per token and layer: 4 · 2 · 384² + 2 · 2 · 384 · 1536 = 3,538,944; six layers.
        assert_eq!(shapes.flops(1), 6.0 * 3_538_944.0);
        assert_eq!(shapes.flops(10), 10.0 * shapes.flops(1));
    }
}
