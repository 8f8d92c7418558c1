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

use crate::ops::products::{matmul, per_token};

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
        self.recur(per_token(&self.input, inputs), state)
    }

    /// What `fed` (`[batch, d_input − d]`) adds to every step's gates, the bias included
    /// (`[batch, 4·d_hidden]`): computed once, it serves a decoding's every step
    /// ([`FusedLstm::forward_beside`]).
    pub fn fed_gates(&self, fed: Tensor<B, 2>) -> Tensor<B, 2> {
        let [_, d_fed] = fed.dims();
        let [d_input, four] = self.input.weight.dims();
        let rows = d_input - d_fed..d_input;
        let of_fed = matmul(fed, self.input.weight.val().slice([rows, 0..four]));
        match &self.input.bias {
            Some(bias) => of_fed + bias.val().unsqueeze(),
            None => of_fed,
        }
    }

    /// [`FusedLstm::forward`] over the inputs `[tokens_t ; fed]` (`tokens` `[batch, seq, d]`,
    /// `fed` one input a row: a decoder given its latent beside every token), given `fed` as its
    /// [`FusedLstm::fed_gates`]: the rows of `W_x` that read `fed` multiply it once a row, not
    /// once a step, and the inputs are never built.
    pub fn forward_beside(
        &self,
        tokens: Tensor<B, 3>,
        fed_gates: Tensor<B, 2>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        let [batch, seq, d] = tokens.dims();
        let four = fed_gates.dims()[1];
        let of_tokens = matmul(
            tokens.reshape([batch * seq, d]),
            self.input.weight.val().slice([0..d, 0..four]),
        );
        let transformed =
            of_tokens.reshape([batch, seq, four]) + fed_gates.reshape([batch, 1, four]);
        self.recur(transformed, state)
    }

    /// The recurrence over `transformed` (`[batch, seq, 4·d_hidden]`: each step's `W_x x_t + b`):
    /// one op when training on burn's CPU backend, else burn's ops a step at a time.
    fn recur(
        &self,
        transformed: Tensor<B, 3>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            type Ad = burn::backend::Autodiff<burn::backend::Flex>;
            let [batch, seq, _] = transformed.dims();
            let is_f32 = transformed.dtype() == burn::tensor::DType::F32;
            if let Some(lstm) = (self as &dyn std::any::Any).downcast_ref::<FusedLstm<Ad>>()
                && is_f32
                && seq > 0
            {
                let transformed: Tensor<Ad, 3> = crate::ops::same_type(transformed);
                let state: Option<LstmState<Ad, 2>> = crate::ops::same_type(state);
                let d = lstm.d_hidden();
                let (cell, hidden) = lstm.state_or_zeros(state, batch, &transformed.device());
                let steps = crate::ops::lstm::lstm_recurrence(
                    transformed,
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
        self.recur_with_burn_ops(transformed, state)
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
        self.recur_with_burn_ops(per_token(&self.input, inputs), state)
    }

    /// [`FusedLstm::recur`] in burn's ops.
    fn recur_with_burn_ops(
        &self,
        transformed: Tensor<B, 3>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        let [batch, seq, _] = transformed.dims();
        let d = self.d_hidden();
        let device = transformed.device();
        let (mut cell, mut hidden) = self.state_or_zeros(state, batch, &device);
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

    /// Fed beside every token, a constant input gives the outputs, the last state and (when
    /// training) the gradients of the inputs built in full; the fused op's path and burn's alike.
    #[test]
    fn a_constant_fed_beside_each_token_equals_the_inputs_built_in_full() {
        type Ad = burn::backend::Autodiff<B>;
        let device = Default::default();
        let lstm = FusedLstm::<Ad>::new(7, 5, &device);
        let normal = Distribution::Normal(0.0, 1.0);
        let tokens = Tensor::<Ad, 3>::random([3, 4, 3], normal, &device).require_grad();
        let fed = Tensor::<Ad, 2>::random([3, 4], normal, &device).require_grad();
        let built = Tensor::cat(
            vec![
                tokens.clone(),
                fed.clone().reshape([3, 1, 4]).expand([3, 4, 4]),
            ],
            2,
        );
        let tolerance = Tolerance::<f32>::absolute(1e-5);
        let (beside, beside_state) =
            lstm.forward_beside(tokens.clone(), lstm.fed_gates(fed.clone()), None);
        let (full, full_state) = lstm.forward(built, None);
        beside
            .clone()
            .into_data()
            .assert_approx_eq(&full.clone().into_data(), tolerance);
        beside_state
            .cell
            .into_data()
            .assert_approx_eq(&full_state.cell.into_data(), tolerance);
        let gradients = |outputs: Tensor<Ad, 3>| {
            let grads = outputs.powi_scalar(2).sum().backward();
            let weight = lstm
                .input
                .weight
                .val()
                .grad(&grads)
                .expect("W_x's gradient");
            (
                tokens.grad(&grads).unwrap(),
                fed.grad(&grads).unwrap(),
                weight,
            )
        };
        let (ours, theirs) = (gradients(beside), gradients(full));
        ours.0
            .into_data()
            .assert_approx_eq(&theirs.0.into_data(), tolerance);
        ours.1
            .into_data()
            .assert_approx_eq(&theirs.1.into_data(), tolerance);
        ours.2
            .into_data()
            .assert_approx_eq(&theirs.2.into_data(), tolerance);
        // Outside autodiff (inference, and every backend but the CPU's when training): burn's ops.
        let plain = FusedLstm::<B>::new(7, 5, &device);
        let (tokens, fed) = (tokens.inner(), fed.inner());
        let built = Tensor::cat(
            vec![
                tokens.clone(),
                fed.clone().reshape([3, 1, 4]).expand([3, 4, 4]),
            ],
            2,
        );
        let (beside, _) = plain.forward_beside(tokens, plain.fed_gates(fed), None);
        let (full, _) = plain.forward_with_burn_ops(built, None);
        beside
            .into_data()
            .assert_approx_eq(&full.into_data(), tolerance);
    }
}
