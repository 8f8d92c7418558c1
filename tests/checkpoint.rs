//! Classifier checkpoints: Hugging Face key names, configs and layout; an exact round trip;
//! parity with `transformers` on tiny random BERT, RoBERTa and DistilBERT checkpoints
//! (tools/reference/classifier_reference.py → tests/fixtures/hf-classifiers/); Flipside 0.1's
//! directories still load; compact (int8) copies load and compute nearly the same.

use std::path::{Path, PathBuf};

use crate::common;

use burn::tensor::Tensor;
use flipside_backend::compute::Cpu;
use flipside_backend::model_dirs::{
    compact_model_dir, load_classifier, load_encoder, save_classifier,
};
use flipside_shared::data::Input;
use flipside_shared::models::bert::BertConfig;
use flipside_shared::models::classifier::Architecture;
use flipside_shared::models::pooling::mean_pool;
use serde_json::Value;

#[test]
fn saved_classifiers_use_hf_keys_and_reload_exactly() {
    let device = Default::default();
    let (model, config, files) = common::minilm_classifier::<Cpu>(&["neg", "neu", "pos"], 64, 7);
    let dir = tempfile::tempdir().unwrap();
    save_classifier(dir.path(), &model, &config, &files.tokenizer_json).unwrap();

    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let query = tensors
        .tensor("bert.encoder.layer.0.attention.self.query.weight")
        .unwrap();
    assert_eq!(query.shape(), [384, 384]);
    assert_eq!(
        tensors.tensor("classifier.weight").unwrap().shape(),
        [3, 384]
    );
    assert!(tensors.tensor("bert.embeddings.LayerNorm.weight").is_ok());
    // BertForSequenceClassification's head: the pooler, then the classifier.
    assert_eq!(
        tensors.tensor("bert.pooler.dense.weight").unwrap().shape(),
        [384, 384]
    );
    let saved: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(saved["model_type"], "bert");
    assert_eq!(
        saved["architectures"],
        serde_json::json!(["BertForSequenceClassification"])
    );
    assert_eq!(
        saved["label2id"],
        serde_json::json!({"neg": 0, "neu": 1, "pos": 2})
    );
    assert_eq!(saved["num_hidden_layers"], 6);

    let loaded = load_classifier::<Cpu>(dir.path(), &device).unwrap();
    assert_eq!(loaded.config, config);
    let input = Input::Text {
        text: "A checkpoint must reload exactly.".into(),
    };
    let original = flipside_shared::models::classifier::TextClassifier {
        model,
        tokenizer: files.tokenizer(64).unwrap(),
        config,
        device,
    };
    assert_eq!(
        original.predict_batch(&[&input]).unwrap(),
        loaded.predict_batch(&[&input]).unwrap()
    );
}

#[test]
fn a_compact_copy_has_a_quarter_of_the_bytes_and_embeds_as_the_original_does() {
    let minilm = common::asset("minilm");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("minilm-int8");
    let done = compact_model_dir(&minilm, &copy, 8).unwrap();
    let (full, small) = done.weights_bytes;
    assert!(small * 100 < full * 27, "{small} of {full} bytes");
    let texts = [
        "The acting was superb and the story gripping.",
        "A dull, lifeless film that wastes its cast.",
        "It rained all week in the city.",
    ];
    let embed = |dir: &Path| {
        let encoder = load_encoder::<Cpu>(dir, &Default::default()).unwrap();
        let rows = encoder.embed_batch(&texts).unwrap();
        rows.into_data().into_vec::<f32>().unwrap()
    };
    let (original, compact) = (embed(&minilm), embed(&copy));
    for (a, b) in original.chunks(384).zip(compact.chunks(384)) {
        let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cosine > 0.995, "cosine {cosine} between the embeddings");
    }
    let error = compact_model_dir(&copy, &copy, 8).unwrap_err().to_string();
    assert!(error.contains("another directory"), "{error}");
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf-classifiers")
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - y).abs())
        .fold(0.0, f64::max)
}

fn expected(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|p| p.as_f64().unwrap()))
        .collect()
}

#[test]
fn hugging_face_classifiers_of_three_families_match_transformers() {
    let device = Default::default();
    let reference: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("probabilities.json")).unwrap())
            .unwrap();
    for (family, architecture) in [
        ("bert", Architecture::Bert),
        ("roberta", Architecture::Roberta),
        ("distilbert", Architecture::DistilBert),
    ] {
        let dir = fixtures().join(family);
        let classifier = load_classifier::<Cpu>(&dir, &device).unwrap();
        assert_eq!(classifier.config.architecture, architecture);
        assert_eq!(classifier.config.labels, ["negative", "positive"]);
        let case = &reference[family];
        // One padded batch: texts of different lengths.
        let inputs: Vec<Input> = case["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| Input::Text {
                text: t.as_str().unwrap().into(),
            })
            .collect();
        let got = classifier
            .predict_batch(&inputs.iter().collect::<Vec<_>>())
            .unwrap();
        let want = expected(&case["probabilities"]);
        let diff = max_abs_diff(&got, &want);
        assert!(
            diff < 1e-4,
            "{family}: max |Δp| {diff}: {got:?} vs {want:?}"
        );

        if let Some(pairs) = case["pairs"].as_array() {
            let inputs: Vec<Input> = pairs
                .iter()
                .map(|p| Input::Pair {
                    premise: p[0].as_str().unwrap().into(),
                    hypothesis: p[1].as_str().unwrap().into(),
                })
                .collect();
            let got = classifier
                .predict_batch(&inputs.iter().collect::<Vec<_>>())
                .unwrap();
            let diff = max_abs_diff(&got, &expected(&case["pair_probabilities"]));
            assert!(diff < 1e-4, "{family} pairs: max |Δp| {diff}");
        }

        // Re-saving writes what transformers wrote: the same tensors under the same keys.
        if architecture == Architecture::DistilBert {
            continue;
        }
        let out = tempfile::tempdir().unwrap();
        let tokenizer = std::fs::read(dir.join("tokenizer.json")).unwrap();
        save_classifier(
            out.path(),
            &classifier.model,
            &classifier.config,
            &tokenizer,
        )
        .unwrap();
        let original = std::fs::read(dir.join("model.safetensors")).unwrap();
        let resaved = std::fs::read(out.path().join("model.safetensors")).unwrap();
        let (original, resaved) = (
            safetensors::SafeTensors::deserialize(&original).unwrap(),
            safetensors::SafeTensors::deserialize(&resaved).unwrap(),
        );
        let mut keys: Vec<String> = resaved.names().into_iter().map(str::to_string).collect();
        keys.sort();
        let mut original_keys: Vec<String> = original
            .names()
            .into_iter()
            .filter(|k| !k.ends_with("position_ids"))
            .map(str::to_string)
            .collect();
        original_keys.sort();
        assert_eq!(keys, original_keys, "{family}");
        for key in &keys {
            assert_eq!(
                original.tensor(key).unwrap().data(),
                resaved.tensor(key).unwrap().data(),
                "{family}: {key}"
            );
        }
        let config: Value =
            serde_json::from_slice(&std::fs::read(out.path().join("config.json")).unwrap())
                .unwrap();
        let hf: Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        for field in [
            "model_type",
            "architectures",
            "id2label",
            "label2id",
            "hidden_size",
        ] {
            assert_eq!(config[field], hf[field], "{family}: {field}");
        }
    }
}

#[test]
fn flipside_0_1_classifier_directories_still_load() {
    // Flipside 0.1 saved a nested `bert` config and a head over mean-pooled states, with the
    // encoder under `bert.*` and the head under `classifier.*`: the BERT fixture's weights.
    let device = Default::default();
    let hf = fixtures().join("bert");
    let hf_config: Value =
        serde_json::from_slice(&std::fs::read(hf.join("config.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(hf.join(file), dir.path().join(file)).unwrap();
    }
    let legacy = serde_json::json!({
        "bert": BertConfig::from_json(&hf_config.to_string()).unwrap(),
        "labels": ["negative", "positive"],
        "max_len": 32,
        "head_dropout": 0.1,
    });
    std::fs::write(dir.path().join("config.json"), legacy.to_string()).unwrap();
    let classifier = load_classifier::<Cpu>(dir.path(), &device).unwrap();
    assert_eq!(classifier.config.architecture, Architecture::MeanPooled);
    assert_eq!(classifier.config.max_len, 32);

    // Its probabilities: softmax(W · mean over real tokens of the encoder's states + b).
    let input = Input::Text {
        text: "the acting was superb".into(),
    };
    let got = classifier.predict_batch(&[&input]).unwrap();
    let tokens = classifier
        .tokenizer
        .encode_inputs(&[&input])
        .unwrap()
        .to_input::<Cpu>(&device);
    let encoder = BertConfig::from_json(&hf_config.to_string())
        .unwrap()
        .load::<Cpu>(
            std::fs::read(hf.join("model.safetensors")).unwrap(),
            &device,
        )
        .unwrap();
    let pooled = mean_pool(encoder.forward(&tokens), &tokens.attention_mask);
    let weights = std::fs::read(hf.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&weights).unwrap();
    let floats = |name: &str| -> Vec<f32> {
        tensors
            .tensor(name)
            .unwrap()
            .data()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let w = Tensor::<Cpu, 1>::from_floats(floats("classifier.weight").as_slice(), &device)
        .reshape([2, 32]);
    let b = Tensor::<Cpu, 1>::from_floats(floats("classifier.bias").as_slice(), &device);
    let logits = pooled.matmul(w.transpose()) + b.unsqueeze();
    let logits: Vec<f32> = logits.into_data().into_vec().unwrap();
    let norm: f32 = logits.iter().map(|l| l.exp()).sum();
    for (g, l) in got.iter().zip(&logits) {
        assert!((g - l.exp() / norm).abs() < 1e-5, "{got:?} vs {logits:?}");
    }
}

#[test]
fn a_roberta_checkpoint_is_a_starting_point_for_training() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("toy.csv");
    std::fs::write(&csv, common::toy_sentiment_csv()).unwrap();
    let train = |encoder: &str, out: &Path| {
        let mut command = common::flipside();
        command
            .args(["classifier", "train", "--data"])
            .arg(&csv)
            .args(["--encoder"])
            .arg(fixtures().join(encoder))
            .arg("--out")
            .arg(out)
            .args(["--epochs", "1", "--batch-size", "8", "--max-len", "32"]);
        command
    };
    let out = dir.path().join("roberta");
    common::success(&mut train("roberta", &out));
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "roberta");
    assert_eq!(
        config["architectures"],
        serde_json::json!(["RobertaForSequenceClassification"])
    );
    let weights = std::fs::read(out.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&weights).unwrap();
    assert!(tensors.tensor("classifier.out_proj.weight").is_ok());
    assert!(
        tensors
            .tensor("roberta.embeddings.word_embeddings.weight")
            .is_ok()
    );
    let stdout = common::success(
        common::flipside()
            .args(["classifier", "predict", "--model"])
            .arg(&out)
            .arg("the show was superb"),
    );
    assert!(
        stdout.starts_with("positive") || stdout.starts_with("negative"),
        "{stdout}"
    );

    let stderr = common::failure(&mut train("distilbert", &dir.path().join("distil")));
    assert!(
        stderr.contains("fine-tuning DistilBERT is not supported"),
        "{stderr}"
    );
}
