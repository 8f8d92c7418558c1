//! The Dis-AE's losses (LASS Eq. 1–7) and the annealing of their weights.
//!
//! Reconstruction terms are summed over each text's tokens and averaged over texts, as in Coop's
//! BiMeanVAE (and Eq. 1's sum of log-likelihoods), so the weights α = 5, β = γ = 1 have the
//! paper's scale. Eq. 3 prints a minus sign before the KL divergence; minimising it would push
//! `C(z_c)` away from uniform, the opposite of what the text says, so `L_n` is `+KL(U ‖ p)`.
//! A variational Dis-AE ([`super::DisAeConfig::variational`]) adds BiMeanVAE's KL term.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use serde::{Deserialize, Serialize};

use super::{DisAe, Encoding, Memory, PaddedIds, Sentiment};
use crate::models::sequence_loss::{log_sum_exp, token_nll};

/// `−log q(x | z)` summed over each text's real target tokens and averaged over texts: logits
/// `[batch, seq, vocab]`, targets and their 1/0 mask `[batch, seq]`.
pub fn reconstruction<B: Backend>(
    logits: Tensor<B, 3>,
    targets: Tensor<B, 2, Int>,
    mask: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let rows = targets.dims()[0] as f64;
    (token_nll(logits, targets) * mask).sum().div_scalar(rows)
}

/// `L_e` (Eq. 2): cross-entropy of the classifier's logits `[batch, classes]` against each
/// row's class, averaged over rows.
pub fn emotion<B: Backend>(logits: Tensor<B, 2>, classes: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let [rows, labels] = logits.dims();
    token_nll(
        logits.reshape([1, rows, labels]),
        classes.reshape([1, rows]),
    )
    .mean()
}

/// `L_n` (Eq. 3): `KL(U ‖ softmax(logits))` for each row of `[batch, classes]` logits — zero
/// exactly when the classifier sees no sentiment — averaged over rows.
pub fn neutrality<B: Backend>(logits: Tensor<B, 2>) -> Tensor<B, 1> {
    let [rows, labels] = logits.dims();
    // Σᵢ (1/M)(log(1/M) − log pᵢ) with log pᵢ = xᵢ − logsumexp(x).
    let lse = log_sum_exp(logits.clone().reshape([1, rows, labels])).reshape([rows]);
    let mean_logit = logits.mean_dim(1).reshape([rows]);
    (lse - mean_logit).sub_scalar((labels as f64).ln()).mean()
}

/// `L_r` (Eq. 4): the classifier's logits of the label vectors `[classes, classes]`, row i
/// against class i, summed over classes.
pub fn label_vectors<B: Backend>(logits: Tensor<B, 2>) -> Tensor<B, 1> {
    let [classes, _] = logits.dims();
    let own = Tensor::<B, 1, Int>::arange(0..classes as i64, &logits.device());
    emotion(logits, own).mul_scalar(classes as f64)
}

/// Cosine similarity of each row of `a` with the same row of `b`, `[batch]`.
pub fn cosine<B: Backend>(a: Tensor<B, 2>, b: Tensor<B, 2>) -> Tensor<B, 1> {
    let [rows, _] = a.dims();
    let dot = (a.clone() * b.clone()).sum_dim(1);
    let norms = (a.powi_scalar(2).sum_dim(1) * b.powi_scalar(2).sum_dim(1))
        .sqrt()
        .clamp_min(1e-8);
    (dot / norms).reshape([rows])
}

/// `L_dis` (Eq. 5): `2 + cos(z_e^a, z_e^b) − cos(z_c^a, z_c^b)` averaged over pairs: low when
/// the pair's sentiments point apart and their contents together.
pub fn distance<B: Backend>(
    sentiment_a: Tensor<B, 2>,
    sentiment_b: Tensor<B, 2>,
    content_a: Tensor<B, 2>,
    content_b: Tensor<B, 2>,
) -> Tensor<B, 1> {
    (cosine(sentiment_a, sentiment_b) - cosine(content_a, content_b))
        .add_scalar(2.0)
        .mean()
}

/// Coop's free bits: a latent dimension's KL term counts only above this many nats, so that
/// the posterior keeps some information instead of collapsing onto the prior.
pub const FREE_BITS: f64 = 0.25;

/// BiMeanVAE's KL term: `KL(N(μ, σ²) ‖ N(0, 1))` of each latent dimension of `mean` and
/// `log_variance` (`[batch, d]`), averaged over rows, summed over the dimensions whose average
/// exceeds `free_bits`.
pub fn gaussian_kl<B: Backend>(
    mean: Tensor<B, 2>,
    log_variance: Tensor<B, 2>,
    free_bits: f64,
) -> Tensor<B, 1> {
    let per_dimension = (mean.powi_scalar(2) + log_variance.clone().exp() - log_variance)
        .sub_scalar(1.0)
        .mul_scalar(0.5)
        .mean_dim(0);
    let counted = per_dimension.clone().greater_elem(free_bits).float();
    (per_dimension * counted).sum()
}

/// The weights of Eq. 7 (and a variational Dis-AE's KL term) at one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossWeights {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
    pub kl: f64,
}

/// α (on `L_emo`), β (`L_dis`), γ (`L_cf`) and a variational Dis-AE's KL weight, each rising
/// linearly from 0 to its maximum over the first `ramp_steps` steps (LASS anneals them up from
/// 0 to 5, 1 and 1 as VAEs anneal their KL term, to 1; it does not say how fast). A training
/// stage ramps over at most its first quarter ([`Annealing::for_stage`]): a few hundred pairs
/// train for only tens of steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Annealing {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
    pub kl: f64,
    pub ramp_steps: usize,
}

impl Default for Annealing {
    fn default() -> Self {
        Self {
            alpha: 5.0,
            beta: 1.0,
            gamma: 1.0,
            kl: 1.0,
            ramp_steps: 1000,
        }
    }
}

impl Annealing {
    /// The annealing of a stage of `total_steps` steps: the ramp ends by the stage's first
    /// quarter, so that its weights reach their maxima.
    pub fn for_stage(self, total_steps: usize) -> Self {
        Self {
            ramp_steps: self.ramp_steps.min(total_steps / 4),
            ..self
        }
    }

    /// The weights at `step` (0-based).
    pub fn weights(&self, step: usize) -> LossWeights {
        let fraction = if self.ramp_steps == 0 {
            1.0
        } else {
            (step as f64 / self.ramp_steps as f64).min(1.0)
        };
        LossWeights {
            alpha: self.alpha * fraction,
            beta: self.beta * fraction,
            gamma: self.gamma * fraction,
            kl: self.kl * fraction,
        }
    }
}

/// Eq. 7's terms for a batch (`L_dis` and `L_cf` only for pairs).
#[derive(Debug, Clone)]
pub struct DisAeLosses<B: Backend> {
    pub reconstruction: Tensor<B, 1>,
    /// `L_emo = L_e + L_n + L_r`.
    pub emotion: Tensor<B, 1>,
    pub distance: Option<Tensor<B, 1>>,
    pub counterfactual: Option<Tensor<B, 1>>,
    /// A variational Dis-AE's KL term.
    pub kl: Option<Tensor<B, 1>>,
}

impl<B: Backend> DisAeLosses<B> {
    /// `L_rec + α L_emo + β L_dis + γ L_cf` (+ the KL term's weight × it).
    pub fn total(&self, weights: LossWeights) -> Tensor<B, 1> {
        let mut total =
            self.reconstruction.clone() + self.emotion.clone().mul_scalar(weights.alpha);
        if let Some(distance) = &self.distance {
            total = total + distance.clone().mul_scalar(weights.beta);
        }
        if let Some(counterfactual) = &self.counterfactual {
            total = total + counterfactual.clone().mul_scalar(weights.gamma);
        }
        if let Some(kl) = &self.kl {
            total = total + kl.clone().mul_scalar(weights.kl);
        }
        total
    }
}

impl<B: Backend> Encoding<B> {
    /// For training: a variational Dis-AE's draw `z = μ + σ ε` of both vectors and their KL
    /// term ([`gaussian_kl`] with [`FREE_BITS`], summed); a deterministic one's encoding as it is.
    pub fn sampled(self) -> (Self, Option<Tensor<B, 1>>) {
        let Some([sentiment_log_variance, content_log_variance]) = self.log_variances.clone()
        else {
            return (self, None);
        };
        let draw = |mean: Tensor<B, 2>, log_variance: Tensor<B, 2>| {
            let noise =
                Tensor::random(mean.shape(), Distribution::Normal(0.0, 1.0), &mean.device());
            mean + log_variance.mul_scalar(0.5).exp() * noise
        };
        let kl = gaussian_kl(
            self.sentiment.clone(),
            sentiment_log_variance.clone(),
            FREE_BITS,
        ) + gaussian_kl(
            self.content.clone(),
            content_log_variance.clone(),
            FREE_BITS,
        );
        let sampled = Self {
            sentiment: draw(self.sentiment, sentiment_log_variance),
            content: draw(self.content, content_log_variance),
            ..self
        };
        (sampled, Some(kl))
    }
}

/// Texts (each `[BOS, tokens…, EOS]`) and their sentiment classes.
#[derive(Debug, Clone)]
pub struct LabelledBatch<B: Backend> {
    pub tokens: PaddedIds<B>,
    /// Class indices, `[batch]`.
    pub classes: Tensor<B, 1, Int>,
}

impl<B: Backend> DisAe<B> {
    /// `L_rec` of decoding `texts` from `latent` (and `memory`): BOS and the tokens in, the
    /// tokens and EOS out.
    fn reconstruction_of(
        &self,
        latent: Tensor<B, 2>,
        memory: Option<&Memory<B>>,
        texts: &PaddedIds<B>,
    ) -> Tensor<B, 1> {
        let [rows, seq] = texts.ids.dims();
        let inputs = texts.ids.clone().slice([0..rows, 0..seq - 1]);
        let targets = texts.ids.clone().slice([0..rows, 1..seq]);
        let mask = texts.mask.clone().slice([0..rows, 1..seq]);
        reconstruction(self.decode(latent, memory, inputs), targets, mask)
    }

    /// Unpaired texts (the corpus-first stage): `L_rec`, and `L_emo` with each text's class.
    pub fn text_losses(&self, batch: &LabelledBatch<B>) -> DisAeLosses<B> {
        let (encoded, kl) = self.encode(&batch.tokens).sampled();
        let emotion = emotion(
            self.classify(encoded.sentiment.clone()),
            batch.classes.clone(),
        ) + neutrality(self.classify(encoded.content.clone()))
            + label_vectors(self.classify_label_vectors());
        let latent = self.latent(Sentiment::Encoded(encoded.sentiment), encoded.content);
        DisAeLosses {
            reconstruction: self.reconstruction_of(latent, encoded.memory.as_ref(), &batch.tokens),
            emotion,
            distance: None,
            counterfactual: None,
            kl,
        }
    }

    /// All of Eq. 7's terms for pairs: row i of `a` and of `b` share content and differ in
    /// sentiment. `L_cf` decodes each text from its own sentiment and its partner's content.
    pub fn pair_losses(&self, a: &LabelledBatch<B>, b: &LabelledBatch<B>) -> DisAeLosses<B> {
        let (ea, kl_a) = self.encode(&a.tokens).sampled();
        let (eb, kl_b) = self.encode(&b.tokens).sampled();
        let emotion = emotion(self.classify(ea.sentiment.clone()), a.classes.clone())
            + emotion(self.classify(eb.sentiment.clone()), b.classes.clone())
            + neutrality(self.classify(ea.content.clone()))
            + neutrality(self.classify(eb.content.clone()))
            + label_vectors(self.classify_label_vectors());
        let distance = distance(
            ea.sentiment.clone(),
            eb.sentiment.clone(),
            ea.content.clone(),
            eb.content.clone(),
        );
        // Each text from a sentiment and a content (its vector and memory).
        let decode = |sentiment: &Tensor<B, 2>, content: &Encoding<B>, texts: &PaddedIds<B>| {
            let latent = self.latent(
                Sentiment::Encoded(sentiment.clone()),
                content.content.clone(),
            );
            self.reconstruction_of(latent, content.memory.as_ref(), texts)
        };
        DisAeLosses {
            reconstruction: decode(&ea.sentiment, &ea, &a.tokens)
                + decode(&eb.sentiment, &eb, &b.tokens),
            emotion,
            distance: Some(distance),
            counterfactual: Some(
                decode(&ea.sentiment, &eb, &a.tokens) + decode(&eb.sentiment, &ea, &b.tokens),
            ),
            kl: kl_a.zip(kl_b).map(|(a, b)| a + b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    fn matrix(values: Vec<f32>, shape: [usize; 2]) -> Tensor<Flex, 2> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    fn scalar(x: Tensor<Flex, 1>) -> f32 {
        x.into_scalar()
    }

    #[test]
    fn reconstruction_sums_over_tokens_and_averages_over_texts() {
        // Two texts, two steps, vocabulary 2. Text 0: logits (0, 0) → label 0 (ln 2), then
        // (ln 3, 0) → label 0 (−ln ¾); text 1: (0, 0) → label 1 (ln 2), then padding.
        let logits = Tensor::<Flex, 3>::from_data(
            TensorData::new(
                vec![0.0, 0.0, 3f32.ln(), 0.0, 0.0, 0.0, 9.0, -9.0],
                [2, 2, 2],
            ),
            &Default::default(),
        );
        let targets = Tensor::<Flex, 2, Int>::from_data(
            TensorData::new(vec![0i64, 0, 1, 1], [2, 2]),
            &Default::default(),
        );
        let mask = matrix(vec![1.0, 1.0, 1.0, 0.0], [2, 2]);
        let expected = (2.0 * 2f32.ln() - 0.75f32.ln()) / 2.0;
        let got = scalar(reconstruction(logits, targets, mask));
        assert!((got - expected).abs() < 1e-5, "{got} vs {expected}");
    }

    #[test]
    fn emotion_neutrality_and_label_terms_by_hand() {
        // Logits (ln 3, 0): p = (¾, ¼).
        let logits = matrix(vec![3f32.ln(), 0.0], [1, 2]);
        let class = |c: i64| {
            Tensor::<Flex, 1, Int>::from_data(TensorData::new(vec![c], [1]), &Default::default())
        };
        assert!((scalar(emotion(logits.clone(), class(0))) - -(0.75f32.ln())).abs() < 1e-6);
        assert!((scalar(emotion(logits.clone(), class(1))) - -(0.25f32.ln())).abs() < 1e-6);
        // KL(U ‖ p) = ½ ln(½ / ¾) + ½ ln(½ / ¼) = 0.143841.
        assert!((scalar(neutrality(logits)) - 0.143841).abs() < 1e-5);
        assert!(scalar(neutrality(matrix(vec![2.0, 2.0, -1.0, -1.0], [2, 2]))).abs() < 1e-6);
        // Label vectors: row 0 logits (ln 3, 0) → −ln ¾; row 1 (0, ln 3) → −ln ¾; summed.
        let rows = matrix(vec![3f32.ln(), 0.0, 0.0, 3f32.ln()], [2, 2]);
        assert!((scalar(label_vectors(rows)) - -2.0 * 0.75f32.ln()).abs() < 1e-5);
    }

    #[test]
    fn distance_is_zero_for_opposite_sentiments_and_equal_contents() {
        let opposite = (
            matrix(vec![1.0, 0.0], [1, 2]),
            matrix(vec![-2.0, 0.0], [1, 2]),
        );
        let same = (
            matrix(vec![1.0, 1.0], [1, 2]),
            matrix(vec![3.0, 3.0], [1, 2]),
        );
        let best = distance(opposite.0.clone(), opposite.1, same.0.clone(), same.1);
        assert!(scalar(best).abs() < 1e-6);
        // Equal sentiments (cos 1) and orthogonal contents (cos 0): 3.
        let worst = distance(
            opposite.0.clone(),
            opposite.0,
            same.0,
            matrix(vec![1.0, -1.0], [1, 2]),
        );
        assert!((scalar(worst) - 3.0).abs() < 1e-6);
    }

    #[test]
    fn annealing_ramps_linearly_then_holds() {
        let annealing = Annealing {
            ramp_steps: 4,
            ..Annealing::default()
        };
        assert_eq!(
            annealing.weights(0),
            LossWeights {
                alpha: 0.0,
                beta: 0.0,
                gamma: 0.0,
                kl: 0.0
            }
        );
        assert_eq!(
            annealing.weights(1),
            LossWeights {
                alpha: 1.25,
                beta: 0.25,
                gamma: 0.25,
                kl: 0.25
            }
        );
        assert_eq!(annealing.weights(4), annealing.weights(400));
        assert_eq!(annealing.weights(4).alpha, 5.0);
        let immediate = Annealing {
            ramp_steps: 0,
            ..annealing
        };
        assert_eq!(immediate.weights(0).gamma, 1.0);
        // A stage of 20 steps (32 pairs, 20 epochs) ramps over its first 5, a long one over
        // the requested 1000.
        let paper = Annealing::default();
        assert_eq!(paper.for_stage(20).ramp_steps, 5);
        assert_eq!(paper.for_stage(20).weights(5).gamma, 1.0);
        assert_eq!(paper.for_stage(11_640).ramp_steps, 1000);
    }

    #[test]
    fn the_total_weighs_each_term() {
        let one = |x: f32| {
            Tensor::<Flex, 1>::from_data(TensorData::new(vec![x], [1]), &Default::default())
        };
        let losses = DisAeLosses {
            reconstruction: one(10.0),
            emotion: one(2.0),
            distance: Some(one(1.5)),
            counterfactual: Some(one(7.0)),
            kl: Some(one(4.0)),
        };
        let weights = LossWeights {
            alpha: 5.0,
            beta: 1.0,
            gamma: 0.5,
            kl: 0.25,
        };
        assert!((scalar(losses.total(weights)) - (10.0 + 10.0 + 1.5 + 3.5 + 1.0)).abs() < 1e-5);
    }

    #[test]
    fn gaussian_kl_by_hand_counts_only_dimensions_above_the_free_bits() {
        // Dimension 0: μ = ±1, σ² = 1 → ½(1 + 1 − 0 − 1) = 0.5 in each row. Dimension 1: μ = 0,
        // σ² = 1.5 → ½(1.5 − ln 1.5 − 1) = 0.047267, under 0.25.
        let mean = matrix(vec![1.0, 0.0, -1.0, 0.0], [2, 2]);
        let log_variance = matrix(vec![0.0, 1.5f32.ln(), 0.0, 1.5f32.ln()], [2, 2]);
        let both = scalar(gaussian_kl(mean.clone(), log_variance.clone(), 0.0));
        assert!((both - 0.547267).abs() < 1e-5, "{both}");
        let counted = scalar(gaussian_kl(mean, log_variance, FREE_BITS));
        assert!((counted - 0.5).abs() < 1e-6, "{counted}");
        // The prior itself costs nothing.
        let prior = gaussian_kl(
            matrix(vec![0.0; 4], [2, 2]),
            matrix(vec![0.0; 4], [2, 2]),
            0.0,
        );
        assert!(scalar(prior).abs() < 1e-7);
    }
}
