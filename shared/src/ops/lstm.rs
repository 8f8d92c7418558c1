//! An LSTM's recurrence over a whole sequence as one autodiff op on `Autodiff<Flex>`.
//!
//! Composed of burn ops ([`crate::models::lstm::FusedLstm`]'s loop), a time step is about 40
//! autodiff ops forward and backward, and each step's slice of the input transform gets a
//! gradient the size of the whole sequence's: in `perf`, copies and fills were 17 % of a Dis-AE
//! training step and libm's scalar `tanhf` and `expm1f` 6 %. Here a step forward is one product
//! (`h · W_h`) and one loop over the gates; the backward walks the steps back with one product
//! a step (`dgates · W_hᵀ`) and finishes with one product for `W_h`'s gradient over all steps.
//! The batch's rows run in one part per thread (a row's steps need no other row's). The gates
//! are PyTorch's (input, forget, cell, output).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::{Autodiff, Flex};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use rayon::prelude::*;

use super::activation::exp_non_positive;
use super::bf16::Strided;
use super::cpu_products::Products;
use super::register_gradient;

type Ad = Autodiff<Flex>;

/// What the backward step needs: `W_h` and each part of the batch's steps.
#[derive(Debug, Clone)]
struct Saved {
    seq: usize,
    hidden: usize,
    /// `W_h`, `[hidden, 4·hidden]`.
    weight: Vec<f32>,
    parts: Vec<Part>,
}

/// The steps of a run of the batch's rows, every sequence time-major (`[seq][rows][·]`).
#[derive(Debug, Clone)]
struct Part {
    rows: usize,
    /// The activated gates of every step, `[seq][rows][4·hidden]`.
    gates: Vec<f32>,
    /// The cell states `c₋₁ … c_{T−1}`, `[seq + 1][rows][hidden]`.
    cells: Vec<f32>,
    /// The hidden states `h₋₁ … h_{T−1}`, `[seq + 1][rows][hidden]`.
    hiddens: Vec<f32>,
}

#[derive(Debug)]
struct LstmStep;

impl Backward<Flex, 4> for LstmStep {
    type State = Saved;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node).into_data();
        let grad = grad.as_slice::<f32>().expect("an f32 gradient");
        let saved = ops.state;
        let [transformed, weight, cell, hidden] = ops.parents.map(|node| node.map(|n| n.id));
        let gradients = backward(&saved, grad);
        let (b, s, h) = (gradients.cell.len() / saved.hidden, saved.seq, saved.hidden);
        register_gradient(grads, transformed, gradients.inputs, vec![b, s, 4 * h]);
        register_gradient(grads, weight, gradients.weight, vec![h, 4 * h]);
        register_gradient(grads, cell, gradients.cell, vec![b, h]);
        register_gradient(grads, hidden, gradients.hidden, vec![b, h]);
    }
}

/// Runs the recurrence over `transformed` (`[batch, seq, 4·hidden]`: each step's `W_x x_t + b`)
/// with `weight` (`W_h`, `[hidden, 4·hidden]`, as burn's `Linear` stores it: `h · W_h`) from the
/// state `cell`, `hidden` (`[batch, hidden]`): every step's hidden state followed by its cell
/// state, `[batch, seq, 2·hidden]`, recording [`LstmStep`] when any input needs its gradient.
///
/// A row's steps depend on no other row's, so the batch runs as one part of consecutive rows
/// per rayon thread, forward and back, each part's products on its own thread; only `W_h`'s
/// gradient sums over the parts, in their order. The parts depend on the thread count alone,
/// so a run's numbers are the same each time.
pub fn lstm_recurrence(
    transformed: Tensor<Ad, 3>,
    weight: Tensor<Ad, 2>,
    cell: Tensor<Ad, 2>,
    hidden: Tensor<Ad, 2>,
) -> Tensor<Ad, 3> {
    let [batch, seq, four] = transformed.dims();
    let size = four / 4;
    assert_eq!(weight.dims(), [size, four], "W_h is [hidden, 4·hidden]");
    assert_eq!(
        cell.dims(),
        [batch, size],
        "the cell state is [batch, hidden]"
    );
    assert_eq!(
        hidden.dims(),
        [batch, size],
        "the hidden state is [batch, hidden]"
    );
    let transformed = transformed.into_primitive().tensor();
    let weight = weight.into_primitive().tensor();
    let cell = cell.into_primitive().tensor();
    let hidden = hidden.into_primitive().tensor();
    let values = |tensor: &FloatTensor<Ad>| -> Vec<f32> {
        tensor
            .primitive
            .clone()
            .into_data()
            .into_vec::<f32>()
            .expect("f32 values")
    };
    let rows = rows_per_part(batch);
    let (cells, hiddens) = (values(&cell), values(&hidden));
    let mut saved = Saved {
        seq,
        hidden: size,
        weight: values(&weight),
        parts: cells
            .chunks(rows * size)
            .zip(hiddens.chunks(rows * size))
            .map(|(cells, hiddens)| Part {
                rows: cells.len() / size,
                gates: Vec::new(),
                cells: cells.to_vec(),
                hiddens: hiddens.to_vec(),
            })
            .collect(),
    };
    let mut output = vec![0.0f32; batch * seq * 2 * size];
    let inputs = values(&transformed);
    let (weight_values, parts) = (&saved.weight, &mut saved.parts);
    parts
        .par_iter_mut()
        .zip(inputs.par_chunks(rows * seq * four))
        .zip(output.par_chunks_mut(rows * seq * 2 * size))
        .for_each(|((part, inputs), output)| {
            forward(part, weight_values, seq, size, inputs, output)
        });
    let output = FlexTensor::from_data(TensorData::new(output, [batch, seq, 2 * size]));
    let parents = [&transformed, &weight, &cell, &hidden].map(|t| t.node.clone());
    let output = match LstmStep
        .prepare::<NoCheckpointing>(parents)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(saved, output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

/// Rows a part: the batch over rayon's threads.
fn rows_per_part(batch: usize) -> usize {
    batch.div_ceil(rayon::current_num_threads().max(1)).max(1)
}

/// The logistic function, from one `e^(−|x|)` (branch-free).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let e = exp_non_positive(-x.abs());
    let positive = 1.0 / (1.0 + e);
    if x >= 0.0 { positive } else { 1.0 - positive }
}

/// tanh as `2σ(2x) − 1`.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}

/// The steps of `part` forward from its state, filling its gates, cells and hiddens, given
/// its rows' `transformed` inputs (`[rows, seq, 4·h]`); writes its rows' `output`
/// (`[rows, seq, 2·h]`).
fn forward(
    part: &mut Part,
    weight: &[f32],
    seq: usize,
    h: usize,
    transformed: &[f32],
    output: &mut [f32],
) {
    let batch = part.rows;
    let four = 4 * h;
    part.gates = vec![0.0; seq * batch * four];
    part.cells.resize((seq + 1) * batch * h, 0.0);
    part.hiddens.resize((seq + 1) * batch * h, 0.0);
    for t in 0..seq {
        let previous = &part.hiddens[t * batch * h..][..batch * h];
        let recurrent = Products::F32.matmul(
            Strided::rows(previous, h),
            Strided::rows(weight, four),
            batch,
            h,
            four,
        );
        let (cells_before, cells_after) = part.cells.split_at_mut((t + 1) * batch * h);
        let cells_before = &cells_before[t * batch * h..];
        let hiddens_after = &mut part.hiddens[(t + 1) * batch * h..][..batch * h];
        for b in 0..batch {
            let pre = &transformed[(b * seq + t) * four..][..four];
            let recurrent = &recurrent[b * four..][..four];
            let gates = &mut part.gates[(t * batch + b) * four..][..four];
            // The cell gate (the third block) through tanh, the others through the logistic.
            for (block, gates) in gates.chunks_exact_mut(h).enumerate() {
                let inputs = pre[block * h..][..h]
                    .iter()
                    .zip(&recurrent[block * h..][..h]);
                let gates = gates.iter_mut().zip(inputs);
                if block == 2 {
                    gates.for_each(|(gate, (&x, &r))| *gate = tanh(x + r));
                } else {
                    gates.for_each(|(gate, (&x, &r))| *gate = sigmoid(x + r));
                }
            }
            let out = &mut output[(b * seq + t) * 2 * h..][..2 * h];
            for j in 0..h {
                let (i, f, g, o) = (gates[j], gates[h + j], gates[2 * h + j], gates[3 * h + j]);
                let c = f * cells_before[b * h + j] + i * g;
                let hidden = o * tanh(c);
                cells_after[b * h + j] = c;
                hiddens_after[b * h + j] = hidden;
                out[j] = hidden;
                out[h + j] = c;
            }
        }
    }
}

/// The gradients of the four inputs.
struct InputGradients {
    inputs: Vec<f32>,
    weight: Vec<f32>,
    cell: Vec<f32>,
    hidden: Vec<f32>,
}

/// Back through the steps, given the output's gradient `grad` (`[batch, seq, 2·hidden]`): each
/// part on its own thread, then `W_h`'s gradients summed in the parts' order.
fn backward(saved: &Saved, grad: &[f32]) -> InputGradients {
    let (seq, h) = (saved.seq, saved.hidden);
    let rows = saved.parts.first().map_or(1, |part| part.rows);
    // `W_hᵀ` stored row-major once: read in place through strides, each step's product would
    // repack it (on a 2-core Zen 4, a fifth of a Dis-AE training step went to that packing).
    let four = 4 * h;
    let mut weight_t = vec![0.0f32; four * h];
    for (r, row) in saved.weight.chunks_exact(four).enumerate() {
        for (c, &value) in row.iter().enumerate() {
            weight_t[c * h + r] = value;
        }
    }
    let parts: Vec<InputGradients> = saved
        .parts
        .par_iter()
        .zip(grad.par_chunks(rows * seq * 2 * h))
        .map(|(part, grad)| part_backward(part, &weight_t, seq, h, grad))
        .collect();
    let mut parts = parts.into_iter();
    let Some(mut total) = parts.next() else {
        // An empty batch.
        return InputGradients {
            inputs: Vec::new(),
            weight: vec![0.0; h * 4 * h],
            cell: Vec::new(),
            hidden: Vec::new(),
        };
    };
    for part in parts {
        total.inputs.extend(part.inputs);
        total.cell.extend(part.cell);
        total.hidden.extend(part.hidden);
        total
            .weight
            .iter_mut()
            .zip(part.weight)
            .for_each(|(sum, w)| *sum += w);
    }
    total
}

/// Back through `part`'s steps, given its rows' output gradient `grad` (`[rows, seq, 2·h]`)
/// and `W_hᵀ` (`[4·h, h]`, row-major).
fn part_backward(
    part: &Part,
    weight_t: &[f32],
    seq: usize,
    h: usize,
    grad: &[f32],
) -> InputGradients {
    let batch = part.rows;
    let four = 4 * h;
    let mut d_hidden = vec![0.0f32; batch * h];
    let mut d_cell = vec![0.0f32; batch * h];
    // The pre-activation gates' gradients, time-major, and batch-major for the inputs.
    let mut d_gates = vec![0.0f32; seq * batch * four];
    let mut inputs = vec![0.0f32; batch * seq * four];
    for t in (0..seq).rev() {
        let cells_before = &part.cells[t * batch * h..][..batch * h];
        let cells = &part.cells[(t + 1) * batch * h..][..batch * h];
        for b in 0..batch {
            let gates = &part.gates[(t * batch + b) * four..][..four];
            let incoming = &grad[(b * seq + t) * 2 * h..][..2 * h];
            let d = &mut d_gates[(t * batch + b) * four..][..four];
            for j in 0..h {
                let (i, f, g, o) = (gates[j], gates[h + j], gates[2 * h + j], gates[3 * h + j]);
                let tanh_c = tanh(cells[b * h + j]);
                let dh = incoming[j] + d_hidden[b * h + j];
                let dc = incoming[h + j] + d_cell[b * h + j] + dh * o * (1.0 - tanh_c * tanh_c);
                d[j] = dc * g * i * (1.0 - i);
                d[h + j] = dc * cells_before[b * h + j] * f * (1.0 - f);
                d[2 * h + j] = dc * i * (1.0 - g * g);
                d[3 * h + j] = dh * tanh_c * o * (1.0 - o);
                d_cell[b * h + j] = dc * f;
            }
            inputs[(b * seq + t) * four..][..four].copy_from_slice(d);
        }
        let step = &d_gates[t * batch * four..][..batch * four];
        d_hidden = Products::F32.matmul(
            Strided::rows(step, four),
            Strided::rows(weight_t, h),
            batch,
            four,
            h,
        );
    }
    // W_h's gradient over every step at once: [h₋₁ … h_{T−2}]ᵀ · dgates.
    let previous = &part.hiddens[..seq * batch * h];
    let weight = Products::F32.matmul(
        Strided::transposed(previous, h),
        Strided::rows(&d_gates, four),
        h,
        seq * batch,
        four,
    );
    InputGradients {
        inputs,
        weight,
        cell: d_cell,
        hidden: d_hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tolerance};

    use crate::models::lstm::FusedLstm;

    /// The op and burn's ops in `FusedLstm`'s loop compute the same outputs and gradients,
    /// with the batch in one part and split over two or three threads.
    #[test]
    fn matches_the_loop_of_burn_ops_with_its_gradients() {
        for threads in [1, 2, 3] {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(compare_with_burn_ops);
        }
    }

    fn compare_with_burn_ops() {
        let device = Default::default();
        let (batch, seq, d_in, h) = (3, 5, 4, 6);
        let lstm = FusedLstm::<Ad>::new(d_in, h, &device);
        let random = |shape: [usize; 2]| {
            Tensor::<Ad, 2>::random(shape, Distribution::Normal(0.0, 1.0), &device).require_grad()
        };
        let inputs =
            Tensor::<Ad, 3>::random([batch, seq, d_in], Distribution::Normal(0.0, 1.0), &device)
                .require_grad();
        let (cell, hidden) = (random([batch, h]), random([batch, h]));
        let state = || burn::nn::LstmState::new(cell.clone(), hidden.clone());

        let (outputs, last) = lstm.forward_with_burn_ops(inputs.clone(), Some(state()));
        let reference = Tensor::cat(vec![outputs, last.cell.reshape([batch, 1, h])], 1);
        let fused = lstm_recurrence(
            lstm.input.forward(inputs.clone()),
            lstm.hidden.weight.val(),
            cell.clone(),
            hidden.clone(),
        );
        let [_, _, two] = fused.dims();
        let fused_hidden = fused.clone().slice([0..batch, 0..seq, 0..two / 2]);
        let fused_last_cell = fused.clone().slice([0..batch, seq - 1..seq, two / 2..two]);
        let ours = Tensor::cat(vec![fused_hidden, fused_last_cell], 1);
        let tolerance = Tolerance::<f32>::absolute(1e-5);
        ours.clone()
            .into_data()
            .assert_approx_eq(&reference.clone().into_data(), tolerance);

        // A loss that weighs every output differently.
        let weights = Tensor::<Ad, 3>::random([batch, seq + 1, h], Distribution::Default, &device);
        let gradients = |output: Tensor<Ad, 3>| {
            let grads = (output * weights.clone()).sum().backward();
            [
                inputs.grad(&grads).unwrap().into_data(),
                lstm.input.weight.val().grad(&grads).unwrap().into_data(),
                lstm.hidden.weight.val().grad(&grads).unwrap().into_data(),
                cell.grad(&grads).unwrap().into_data(),
                hidden.grad(&grads).unwrap().into_data(),
            ]
        };
        for (ours, theirs) in gradients(ours).iter().zip(gradients(reference)) {
            ours.assert_approx_eq(&theirs, Tolerance::<f32>::absolute(1e-4));
        }
    }
}
