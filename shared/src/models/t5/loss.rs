//! T5's training losses over teacher-forced logits: token cross-entropy (MLE) and AutoCAD's
//! unlikelihood term, each averaged over the target tokens its mask keeps.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

use crate::models::sequence_loss::{log_sum_exp, token_nll};

/// Whether each vocabulary entry is the label, `[rows, steps, vocab]`.
fn is_label<B: Backend>(labels: &Tensor<B, 2, Int>, vocab: usize) -> Tensor<B, 3, Bool> {
    let [rows, steps] = labels.dims();
    let ids = Tensor::<B, 1, Int>::arange(0..vocab as i64, &labels.device())
        .reshape([1, 1, vocab])
        .expand([rows, steps, vocab]);
    ids.equal(
        labels
            .clone()
            .reshape([rows, steps, 1])
            .expand([rows, steps, vocab]),
    )
}

/// Mean of `values` over the positions `mask` keeps (zero when it keeps none).
fn masked_mean<B: Backend>(values: Tensor<B, 2>, mask: Tensor<B, 2>) -> Tensor<B, 1> {
    let count = mask.clone().sum().clamp_min(1.0);
    (values * mask).sum() / count
}

/// Mean negative log-likelihood of `labels` `[rows, steps]` under `logits`
/// `[rows, steps, vocab]`, over the positions where `mask` (1/0) is 1.
pub fn cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    mask: Tensor<B, 2>,
) -> Tensor<B, 1> {
    masked_mean(token_nll(logits, labels), mask)
}

/// Mean unlikelihood `−log(1 − p(label))` over the positions where `mask` is 1, with
/// `log(1 − p) = logsumexp(logits without the label) − logsumexp(logits)` so that it stays
/// finite as `p → 1` (AutoCAD's `log(Σp − p + 1e-20)` underflows in half precision).
pub fn unlikelihood<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    mask: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let vocab = logits.dims()[2];
    let others = logits
        .clone()
        .mask_fill(is_label(&labels, vocab), f32::NEG_INFINITY);
    let log_one_minus_p = log_sum_exp(others) - log_sum_exp(logits);
    masked_mean(log_one_minus_p.neg(), mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    fn tensor3(values: Vec<f32>, shape: [usize; 3]) -> Tensor<Flex, 3> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn three_token_case_by_hand() {
        // One row, two steps, vocabulary of 3. Step 0: logits (2, 0, 0), label 0:
        // p = e² / (e² + 2) = 0.786986; CE = −ln p = 0.239545; UL = −ln(1 − p) = 1.546398.
        // Step 1: logits (0, 1, −1), label 2, masked out of both means.
        let logits = tensor3(vec![2.0, 0.0, 0.0, 0.0, 1.0, -1.0], [1, 2, 3]);
        let labels = Tensor::<Flex, 2, Int>::from_data(
            TensorData::new(vec![0i64, 2], [1, 2]),
            &Default::default(),
        );
        let mask = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![1.0f32, 0.0], [1, 2]),
            &Default::default(),
        );
        let ce = cross_entropy(logits.clone(), labels.clone(), mask.clone()).into_scalar();
        let ul = unlikelihood(logits.clone(), labels.clone(), mask).into_scalar();
        assert!((ce - 0.239545).abs() < 1e-5, "{ce}");
        assert!((ul - 1.546398).abs() < 1e-5, "{ul}");
        // Both steps kept: step 1's p(2) = e⁻¹ / (1 + e + e⁻¹) = 0.0900306.
        let both = Tensor::<Flex, 2>::ones([1, 2], &Default::default());
        let ul = unlikelihood(logits, labels, both).into_scalar();
        let expected = (1.546398 - (1.0f32 - 0.0900306).ln()) / 2.0;
        assert!((ul - expected).abs() < 1e-5, "{ul} vs {expected}");
    }

    #[test]
    fn unlikelihood_stays_finite_when_the_label_is_certain() {
        let logits = tensor3(vec![60.0, 0.0, 0.0], [1, 1, 3]);
        let labels = Tensor::<Flex, 2, Int>::zeros([1, 1], &Default::default());
        let mask = Tensor::<Flex, 2>::ones([1, 1], &Default::default());
        let ul = unlikelihood(logits, labels, mask).into_scalar();
        // −log(2e⁻⁶⁰ / (e⁶⁰ + 2)) ≈ 60 − ln 2.
        assert!((ul - (60.0 - 2f32.ln())).abs() < 1e-3, "{ul}");
    }
}
