//! Gradient saliency: the gradient is right (finite differences), and a trained classifier
//! points at the word that carries the label.

use crate::common;

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::tensor::{Tensor, TensorData};
use flipside_backend::compute::{Batches, Compute, Cpu};
use flipside_backend::data::{ReadOptions, read_file};
use flipside_backend::training::classifier::{TrainConfig, TrainRun, train_classifier};
use flipside_shared::saliency::label_gradients;

type Ad = Autodiff<Cpu>;

#[test]
fn label_gradient_matches_a_finite_difference() {
    let device = Default::default();
    let (model, _, files) = common::minilm_classifier::<Ad>(&["neg", "pos"], 32, 3);
    let model = model.without_dropout();
    let tokenizer = files.tokenizer(32).unwrap();
    let input = tokenizer
        .encode_texts(&["the plot was thin but the acting was superb"])
        .unwrap()
        .to_input::<Ad>(&device);

    let (words, grad) = label_gradients(&model, &input, &[1]);
    let [_, seq, hidden] = grad.dims();
    let grad_rows = grad.into_data().into_vec::<f32>().unwrap();
    let inner = model.valid();
    let inner_input = flipside_shared::models::bert::BertInput {
        input_ids: input.input_ids.clone().inner(),
        token_type_ids: input.token_type_ids.clone().inner(),
        attention_mask: input.attention_mask.clone().inner(),
    };
    let logit = |embeddings: Tensor<Cpu, 3>| -> f64 {
        let logits = inner.forward_from_word_embeddings(embeddings, &inner_input);
        logits.into_data().into_vec::<f32>().unwrap()[1] as f64
    };
    for token in [1, 4, seq - 2] {
        let g = &grad_rows[token * hidden..(token + 1) * hidden];
        let norm = g.iter().map(|x| (x * x) as f64).sum::<f64>().sqrt();
        // Move token `token` along its unit gradient direction: d logit / dh = ‖g‖.
        let step = 1e-2;
        let mut direction = vec![0f32; seq * hidden];
        for (d, x) in direction[token * hidden..(token + 1) * hidden]
            .iter_mut()
            .zip(g)
        {
            *d = (*x as f64 / norm * step) as f32;
        }
        let delta =
            Tensor::<Cpu, 3>::from_data(TensorData::new(direction, [1, seq, hidden]), &device);
        let numeric =
            (logit(words.clone() + delta.clone()) - logit(words.clone() - delta)) / (2.0 * step);
        let relative = (numeric - norm).abs() / norm;
        assert!(
            relative < 0.02,
            "token {token}: finite difference {numeric} vs gradient norm {norm}"
        );
    }
}

#[test]
fn a_trained_classifier_finds_the_word_that_carries_the_label() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("toy.csv");
    std::fs::write(&csv, common::toy_sentiment_csv()).unwrap();
    let train = read_file(&csv, &ReadOptions::default()).unwrap().dataset;
    let out = dir.path().join("model");
    let run = TrainRun {
        train: &train,
        encoder_dir: &common::asset("minilm"),
        out: &out,
        config: TrainConfig {
            epochs: 4,
            batch_size: 8,
            lr: 1e-4,
            max_len: 24,
            seed: 1,
            ..TrainConfig::default()
        },
        pause_after: None,
    };
    let compute = Compute::<Cpu> {
        device: Default::default(),
        batches: Batches::Parallel,
    };
    train_classifier(compute.clone(), &run).unwrap();

    for (text, label, word) in [
        (
            "the show we saw on day 9 was dreadful",
            "negative",
            "dreadful",
        ),
        (
            "the story we saw on day 7 was delightful",
            "positive",
            "delightful",
        ),
    ] {
        let explanation =
            flipside_backend::explain::explain::<Cpu>(compute.clone(), &out, text, None).unwrap();
        assert_eq!(explanation.label, label, "{text}");
        let top = explanation
            .words
            .iter()
            .max_by(|a, b| a.score.total_cmp(&b.score))
            .unwrap();
        assert_eq!(top.word, word, "{:?}", explanation.words);
        let total: f32 = explanation.words.iter().map(|w| w.score).sum();
        assert!(
            total > 0.5 && total <= 1.0 + 1e-5,
            "scores are normalised over tokens: {total}"
        );
    }
}
