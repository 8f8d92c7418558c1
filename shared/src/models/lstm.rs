//! An LSTM whose four gates share one weight matrix (PyTorch's layout: input, forget, cell,
//! output), computed the way fast implementations do: the input transform of every time step
//! in one matrix product before the recurrence, then one `[batch, hidden] × [hidden, 4·hidden]`
//! product per step. burn's `Lstm` keeps eight separate linear layers and rewrites its whole
//! output tensor at every step; this one computes the same function with fewer, larger
//! operations (`tests` checks it against burn's).

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, LstmState};
use burn::tensor::Tensor;
use burn::tensor::activation::{sigmoid, tanh};
use burn::tensor::backend::Backend;

use crate::ops::products::per_token;

/// A unidirectional, batch-first LSTM with fused gates.
#[derive(Module, Debug)]
pub struct FusedLstm<B: Backend> {
    /// `x_t ↦ W_x x_t + b`, `[d_input → 4·d_hidden]` (the only bias).
    pub input: Linear<B>,
    /// `h ↦ W_h h`, `[d_hidden → 4·d_hidden]`.
    pub hidden: Linear<B>,
}

impl<B: Backend> FusedLstm<B> {
    /// A new LSTM (each gate's weights initialised as a `d_input → d_hidden` linear layer's).
    pub fn new(d_input: usize, d_hidden: usize, device: &B::Device) -> Self {
        Self {
            input: LinearConfig::new(d_input, 4 * d_hidden).init(device),
            hidden: LinearConfig::new(d_hidden, 4 * d_hidden)
                .with_bias(false)
                .init(device),
        }
    }

    /// The hidden size.
    pub fn d_hidden(&self) -> usize {
        self.hidden.weight.dims()[0]
    }

    /// Runs over `inputs` (`[batch, seq, d_input]`) from `state` (zeros when none): the hidden
    /// state of every step `[batch, seq, d_hidden]` and the state after the last step. When
    /// training on burn's CPU backend the recurrence is one op with its own backward
    /// ([`crate::ops::lstm`]).
    pub fn forward(
        &self,
        inputs: Tensor<B, 3>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            type Ad = burn::backend::Autodiff<burn::backend::Flex>;
            let [batch, seq, _] = inputs.dims();
            let is_f32 = inputs.dtype() == burn::tensor::DType::F32;
            if let Some(lstm) = (self as &dyn std::any::Any).downcast_ref::<FusedLstm<Ad>>()
                && is_f32
                && seq > 0
            {
                let inputs: Tensor<Ad, 3> = crate::ops::same_type(inputs);
                let state: Option<LstmState<Ad, 2>> = crate::ops::same_type(state);
                let d = lstm.d_hidden();
                let (cell, hidden) = lstm.state_or_zeros(state, batch, &inputs.device());
                let steps = crate::ops::lstm::lstm_recurrence(
                    per_token(&lstm.input, inputs),
                    lstm.hidden.weight.val(),
                    cell,
                    hidden,
                );
                let hiddens = steps.clone().slice([0..batch, 0..seq, 0..d]);
                let last = |range: std::ops::Range<usize>| {
                    steps
                        .clone()
                        .slice([0..batch, seq - 1..seq, range])
                        .reshape([batch, d])
                };
                let state = LstmState::new(last(d..2 * d), last(0..d));
                return crate::ops::same_type((hiddens, state));
            }
        }
        self.forward_with_burn_ops(inputs, state)
    }

    /// The cell and hidden state of `state`, or zeros for `batch` rows when there is none.
    fn state_or_zeros(
        &self,
        state: Option<LstmState<B, 2>>,
        batch: usize,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        match state {
            Some(state) => (state.cell, state.hidden),
            None => {
                let zeros = Tensor::zeros([batch, self.d_hidden()], device);
                (zeros.clone(), zeros)
            }
        }
    }

    /// [`FusedLstm::forward`] in burn's ops, a few a step (what every backend but training on
    /// the CPU runs).
    pub fn forward_with_burn_ops(
        &self,
        inputs: Tensor<B, 3>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        let [batch, seq, _] = inputs.dims();
        let d = self.d_hidden();
        let device = inputs.device();
        let (mut cell, mut hidden) = self.state_or_zeros(state, batch, &device);
        let transformed = per_token(&self.input, inputs);
        let mut outputs = Vec::with_capacity(seq);
        for t in 0..seq {
            let gates = transformed
                .clone()
                .slice([0..batch, t..t + 1, 0..4 * d])
                .reshape([batch, 4 * d])
                + self.hidden.forward(hidden);
            let [input, forget, candidate, output]: [Tensor<B, 2>; 4] =
                gates.chunk(4, 1).try_into().expect("four gates");
            cell = sigmoid(forget) * cell + sigmoid(input) * tanh(candidate);
            hidden = sigmoid(output) * tanh(cell.clone());
            outputs.push(hidden.clone().reshape([batch, 1, d]));
        }
        let outputs = if outputs.is_empty() {
            Tensor::zeros([batch, 0, d], &device)
        } else {
            Tensor::cat(outputs, 1)
        };
        (outputs, LstmState::new(cell, hidden))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::module::Param;
    use burn::nn::{Lstm, LstmConfig};
    use burn::tensor::{Distribution, Tolerance};

    use super::*;

    type B = Flex;

    /// burn's LSTM with the same function as `fused`: its gates are row blocks of the fused
    /// weights, and the fused bias goes to the input transforms.
    fn burn_lstm(fused: &FusedLstm<B>) -> Lstm<B> {
        let device = &Default::default();
        let d = fused.d_hidden();
        let mut lstm = LstmConfig::new(fused.input.weight.dims()[0], d, true).init::<B>(device);
        let gates = [
            &mut lstm.input_gate,
            &mut lstm.forget_gate,
            &mut lstm.cell_gate,
            &mut lstm.output_gate,
        ];
        let [d_in, _] = fused.input.weight.dims();
        let bias = fused.input.bias.as_ref().expect("bias").val();
        for (k, gate) in gates.into_iter().enumerate() {
            let columns = k * d..(k + 1) * d;
            gate.input_transform.weight =
                Param::from_tensor(fused.input.weight.val().slice([0..d_in, columns.clone()]));
            gate.input_transform.bias =
                Some(Param::from_tensor(bias.clone().slice([columns.clone()])));
            gate.hidden_transform.weight =
                Param::from_tensor(fused.hidden.weight.val().slice([0..d, columns]));
            gate.hidden_transform.bias = Some(Param::from_tensor(Tensor::zeros([d], device)));
        }
        lstm
    }

    #[test]
    fn computes_what_burns_lstm_computes() {
        let device = Default::default();
        let fused = FusedLstm::<B>::new(5, 3, &device);
        let reference = burn_lstm(&fused);
        let inputs = Tensor::<B, 3>::random([2, 4, 5], Distribution::Normal(0.0, 1.0), &device);
        let cell = Tensor::<B, 2>::random([2, 3], Distribution::Normal(0.0, 1.0), &device);
        let hidden = Tensor::<B, 2>::random([2, 3], Distribution::Normal(0.0, 1.0), &device);
        let state = || LstmState::new(cell.clone(), hidden.clone());
        for given in [false, true] {
            let (ours, our_state) = fused.forward(inputs.clone(), given.then(state));
            let (theirs, their_state) = reference.forward(inputs.clone(), given.then(state));
            let tolerance = Tolerance::<f32>::absolute(1e-6);
            ours.into_data()
                .assert_approx_eq(&theirs.into_data(), tolerance);
            our_state
                .cell
                .into_data()
                .assert_approx_eq(&their_state.cell.into_data(), tolerance);
            our_state
                .hidden
                .into_data()
                .assert_approx_eq(&their_state.hidden.into_data(), tolerance);
        }
    }

    #[test]
    fn steps_one_at_a_time_as_over_the_whole_sequence() {
        let device = Default::default();
        let lstm = FusedLstm::<B>::new(4, 6, &device);
        let inputs = Tensor::<B, 3>::random([3, 5, 4], Distribution::Normal(0.0, 1.0), &device);
        let (whole, _) = lstm.forward(inputs.clone(), None);
        let mut state = None;
        for t in 0..5 {
            let (out, next) = lstm.forward(inputs.clone().slice([0..3, t..t + 1, 0..4]), state);
            out.into_data().assert_approx_eq(
                &whole.clone().slice([0..3, t..t + 1, 0..6]).into_data(),
                Tolerance::<f32>::absolute(1e-6),
            );
            state = Some(next);
        }
    }
}
