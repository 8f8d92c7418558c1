//! Generating with T5: [`search`](crate::models::search)'s greedy, nucleus and beam search,
//! each step one incremental decoder call over a [`DecoderCache`].

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::{DecoderCache, Encoded, T5Model};
use crate::models::contrast::{ContrastDecoder, LabelContrast};
pub use crate::models::search::{DecodeSettings, Decoded, Search};
use crate::models::search::{SpecialTokens, StepDecoder, logit_rows};

/// Generates one output per row of `encoded`.
pub fn generate<B: Backend>(
    model: &T5Model<B>,
    encoded: &Encoded<B>,
    settings: &DecodeSettings,
) -> Vec<Decoded> {
    let mut steps = T5Steps {
        model,
        encoded: encoded.clone(),
        cache: DecoderCache::new(),
    };
    crate::models::search::generate(&mut steps, settings)
}

/// Generates one output per input of `encoded`, whose rows are the inputs then as many
/// contrasting inputs, steered by `label_contrast` ([`ContrastDecoder`]).
pub fn generate_contrasted<B: Backend>(
    model: &T5Model<B>,
    encoded: &Encoded<B>,
    label_contrast: LabelContrast,
    settings: &DecodeSettings,
) -> Vec<Decoded> {
    let steps = T5Steps {
        model,
        encoded: encoded.clone(),
        cache: DecoderCache::new(),
    };
    crate::models::search::generate(
        &mut ContrastDecoder::new(steps, label_contrast, settings),
        settings,
    )
}

/// T5's decoder over an encoder output, one token per call.
struct T5Steps<'a, B: Backend> {
    model: &'a T5Model<B>,
    encoded: Encoded<B>,
    cache: DecoderCache<B>,
}

impl<B: Backend> T5Steps<'_, B> {
    fn rows_tensor(&self, rows: &[usize]) -> Tensor<B, 1, Int> {
        let rows: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let n = rows.len();
        Tensor::from_data(TensorData::new(rows, [n]), &self.encoded.hidden.device())
    }
}

impl<B: Backend> StepDecoder for T5Steps<'_, B> {
    fn rows(&self) -> usize {
        self.encoded.hidden.dims()[0]
    }

    fn special_tokens(&self) -> SpecialTokens {
        SpecialTokens {
            start: self.model.decoder_start_token_id,
            end: self.model.eos_token_id,
            pad: self.model.pad_token_id,
        }
    }

    fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
        let device = self.encoded.hidden.device();
        let ids: Vec<i64> = last.iter().map(|&t| t as i64).collect();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [last.len(), 1]), &device);
        let logits = self.model.decode(&self.encoded, ids, Some(&mut self.cache));
        logit_rows(logits)
    }

    fn repeat_rows(&mut self, times: usize) {
        let rows: Vec<usize> = (0..self.rows())
            .flat_map(|r| std::iter::repeat_n(r, times))
            .collect();
        self.encoded = self.encoded.select(self.rows_tensor(&rows));
    }

    fn reorder(&mut self, rows: &[usize]) {
        // Every copy of an input has the same encoder output: only the cache moves, unless
        // inputs leave.
        let index = self.rows_tensor(rows);
        if rows.len() != self.rows() {
            self.encoded = self.encoded.select(index.clone());
        }
        self.cache.select(index);
    }
}
