//! Gradient-norm saliency of words for a classifier's label (AutoCAD §3.2, after Li et al. 2015).
//!
//! For token `t_i` with word embedding `e_i` and label `y`: `g_i = ∇_{e_i} logit_y`, the token
//! score is `‖g_i‖₂ / Σ_j ‖g_j‖₂` over the input's non-special tokens, and a word's score is the
//! maximum over its sub-tokens. Words are whitespace-delimited spans of the input text.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};

use crate::data::Input;
use crate::models::bert::BertInput;
use crate::models::classifier::SequenceClassifier;
use crate::tokenize::{TextTokenizer, TokenizeError, whitespace_words};

/// One word of an input with its saliency score.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WordSaliency {
    pub word: String,
    /// Which text of the input the word is in: 0, or 1 for a pair's hypothesis.
    pub text: usize,
    /// Byte offsets of the word within that text.
    pub start: usize,
    pub end: usize,
    pub score: f32,
}

/// Word saliencies of each input for its given label, words in text order.
///
/// Dropout must be off (see [`SequenceClassifier::without_dropout`]) for the scores to be
/// deterministic.
pub fn word_saliency<B: AutodiffBackend>(
    model: &SequenceClassifier<B>,
    tokenizer: &TextTokenizer,
    inputs: &[&Input],
    labels: &[usize],
    device: &B::Device,
) -> Result<Vec<Vec<WordSaliency>>, TokenizeError> {
    let tokens = tokenizer.encode_inputs(inputs)?;
    let input = tokens.to_input::<B>(device);
    let (_, grad) = label_gradients(model, &input, labels);
    let norms = grad
        .powi_scalar(2)
        .sum_dim(2)
        .sqrt()
        .into_data()
        .into_vec::<f32>()
        .expect("gradient norms are f32");

    Ok(inputs
        .iter()
        .enumerate()
        .map(|(row, input)| {
            let token_norms = &norms[row * tokens.seq_len..(row + 1) * tokens.seq_len];
            pool_to_words(input, &tokens.offsets[row], token_norms)
        })
        .collect())
}

/// The word embeddings of each row and the gradient of the row's `labels[row]` logit with
/// respect to them, both `[batch, seq, hidden]`.
pub fn label_gradients<B: AutodiffBackend>(
    model: &SequenceClassifier<B>,
    input: &BertInput<B>,
    labels: &[usize],
) -> (Tensor<B::InnerBackend, 3>, Tensor<B::InnerBackend, 3>) {
    let words = model
        .bert
        .embeddings
        .word_embeddings
        .forward(input.input_ids.clone())
        .detach()
        .require_grad();
    let logits = model.forward_from_word_embeddings(words.clone(), input);
    let [batch, n_labels] = logits.dims();
    let mut one_hot = vec![0f32; batch * n_labels];
    for (row, &label) in labels.iter().enumerate() {
        one_hot[row * n_labels + label] = 1.0;
    }
    let selector = Tensor::<B, 2>::from_data(
        TensorData::new(one_hot, [batch, n_labels]),
        &logits.device(),
    );
    // Rows do not interact, so the gradient of the sum is each row's own gradient.
    let gradients = (logits * selector).sum().backward();
    let grad = words
        .grad(&gradients)
        .expect("word embeddings require grad");
    (words.inner(), grad)
}

/// Normalises token scores over the real tokens and max-pools them into whitespace words.
fn pool_to_words(
    input: &Input,
    offsets: &[Option<(usize, usize, usize)>],
    token_norms: &[f32],
) -> Vec<WordSaliency> {
    let total: f32 = offsets
        .iter()
        .zip(token_norms)
        .filter(|(o, _)| o.is_some())
        .map(|(_, n)| n)
        .sum();
    let texts = input.texts();
    let mut result: Vec<WordSaliency> = texts
        .iter()
        .enumerate()
        .flat_map(|(text, content)| {
            whitespace_words(content)
                .into_iter()
                .map(move |w| WordSaliency {
                    word: content[w.start..w.end].to_string(),
                    text,
                    start: w.start,
                    end: w.end,
                    score: 0.0,
                })
        })
        .collect();
    for (offset, norm) in offsets.iter().zip(token_norms) {
        let Some((start, end, text)) = *offset else {
            continue;
        };
        let score = norm / total.max(f32::MIN_POSITIVE);
        let word = result
            .iter_mut()
            .find(|w| w.text == text && w.start <= start && end <= w.end);
        if let Some(word) = word {
            word.score = word.score.max(score);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_normalises_over_tokens_and_takes_the_max_sub_token() {
        let input = Input::Text {
            text: "un believable film".into(),
        };
        // [CLS] un believ ##able film [SEP]
        let offsets = vec![
            None,
            Some((0, 2, 0)),
            Some((3, 9, 0)),
            Some((9, 13, 0)),
            Some((14, 18, 0)),
            None,
        ];
        let norms = [9.0, 1.0, 2.0, 4.0, 3.0, 9.0];
        let words = pool_to_words(&input, &offsets, &norms);
        let scores: Vec<(&str, f32)> = words.iter().map(|w| (w.word.as_str(), w.score)).collect();
        assert_eq!(
            scores,
            vec![("un", 0.1), ("believable", 0.4), ("film", 0.3)]
        );
    }
}
