//! CF-DPR's bi-encoder (CORE §3.1): a query encoder and a document encoder, each BERT with mean
//! pooling and L2 normalisation, trained with DPR's contrastive loss (CORE Eq. 1).

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use crate::models::bert::{BertInput, BertModel};
use crate::models::pooling::{l2_normalize, mean_pool};

/// Two BERT encoders, or one shared by both sides.
#[derive(Module, Debug)]
pub struct BiEncoder<B: Backend> {
    pub query: BertModel<B>,
    /// `None` when documents are encoded with the query encoder's weights.
    pub document: Option<BertModel<B>>,
}

impl<B: Backend> BiEncoder<B> {
    /// Unit-length query embeddings, `[batch, hidden]`.
    pub fn embed_queries(&self, input: &BertInput<B>) -> Tensor<B, 2> {
        embed(&self.query, input)
    }

    /// Unit-length document embeddings, `[batch, hidden]` (with the query encoder when the
    /// weights are shared).
    pub fn embed_documents(&self, input: &BertInput<B>) -> Tensor<B, 2> {
        embed(self.document.as_ref().unwrap_or(&self.query), input)
    }
}

fn embed<B: Backend>(model: &BertModel<B>, input: &BertInput<B>) -> Tensor<B, 2> {
    l2_normalize(mean_pool(model.forward(input), &input.attention_mask))
}

/// CORE's Eq. 1 with in-batch negatives: query `i` should score highest with document row `i`
/// (its counterfactual); every other document row — the other queries' counterfactuals and all
/// hard negatives appended after them — is a negative. Similarities are cosines (the rows are
/// unit vectors) multiplied by `scale`, the inverse temperature: DPR's raw dot products of
/// unnormalised vectors have a range that cosines lack. Returns the mean negative log-likelihood.
pub fn contrastive_loss<B: Backend>(
    queries: Tensor<B, 2>,
    documents: Tensor<B, 2>,
    scale: f32,
) -> Tensor<B, 1> {
    let [count, _] = queries.dims();
    assert!(
        documents.dims()[0] >= count,
        "every query needs its positive document"
    );
    let device = queries.device();
    let logits = queries.matmul(documents.transpose()) * scale;
    let targets = Tensor::<B, 1, Int>::from_data(
        TensorData::new((0..count as i64).collect::<Vec<_>>(), [count]),
        &device,
    );
    CrossEntropyLossConfig::new()
        .init(&device)
        .forward(logits, targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn contrastive_loss_matches_a_hand_computation() {
        let device = Default::default();
        let q = Tensor::<Flex, 2>::from_floats([[1.0, 0.0], [0.0, 1.0]], &device);
        let d = Tensor::<Flex, 2>::from_floats([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], &device);
        // Row 0 scores (2, 0, 1.2) with scale 2, target 0; row 1 scores (0, 2, 1.6), target 1.
        let nll = |scores: [f64; 3], target: usize| {
            let total: f64 = scores.iter().map(|s| s.exp()).sum();
            -(scores[target].exp() / total).ln()
        };
        let expected = (nll([2.0, 0.0, 1.2], 0) + nll([0.0, 2.0, 1.6], 1)) / 2.0;
        let loss: f32 = contrastive_loss(q, d, 2.0).into_scalar();
        assert!(
            (loss as f64 - expected).abs() < 1e-6,
            "{loss} vs {expected}"
        );
    }
}
