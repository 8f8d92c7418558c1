//! T5: parity with `transformers` on tiny random v1.0 and v1.1 checkpoints, and v1.1 ones as
//! `transformers` 5 saves them (tools/reference/t5_reference.py → tests/fixtures/hf-t5/): encoder outputs and decoder
//! log-probabilities to 1e-4 on a padded batch reaching the logarithmic position buckets, greedy
//! and beam search ids; cached decoding equal to full recomputation; saved directories reload
//! exactly under Hugging Face key names.

use std::path::{Path, PathBuf};

use burn::tensor::{Int, Tensor, TensorData};
use flipside_backend::compute::Cpu;
use flipside_shared::models::t5::decode::{DecodeSettings, Search, generate};
use flipside_shared::models::t5::{DecoderCache, T5Config, T5Model};
use serde_json::Value;

use crate::common::max_difference;

fn fixture(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/hf-t5")
        .join(version)
}

fn load(dir: &Path) -> (T5Model<Cpu>, T5Config) {
    let config =
        T5Config::from_json(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let model = config.load::<Cpu>(weights, &Default::default()).unwrap();
    (model, config)
}

struct Reference {
    input_ids: Tensor<Cpu, 2, Int>,
    attention_mask: Tensor<Cpu, 2>,
    labels: Tensor<Cpu, 2, Int>,
    json: Value,
}

fn reference(version: &str) -> Reference {
    let json: Value =
        serde_json::from_slice(&std::fs::read(fixture(version).join("reference.json")).unwrap())
            .unwrap();
    let ints = |key: &str| -> (Vec<i64>, [usize; 2]) {
        let rows = json[key].as_array().unwrap();
        let values: Vec<i64> = rows
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
            .collect();
        (values.clone(), [rows.len(), values.len() / rows.len()])
    };
    let device = Default::default();
    let (ids, shape) = ints("input_ids");
    let (mask, _) = ints("attention_mask");
    let (labels, label_shape) = ints("labels");
    Reference {
        input_ids: Tensor::from_data(TensorData::new(ids, shape), &device),
        attention_mask: Tensor::from_data(
            TensorData::new(mask.iter().map(|&m| m as f32).collect::<Vec<_>>(), shape),
            &device,
        ),
        labels: Tensor::from_data(TensorData::new(labels, label_shape), &device),
        json,
    }
}

fn flatten(value: &Value) -> Vec<f32> {
    match value {
        Value::Array(items) => items.iter().flat_map(flatten).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap() as f32],
        other => panic!("not a number: {other}"),
    }
}

fn values<const D: usize>(tensor: Tensor<Cpu, D>) -> Vec<f32> {
    tensor.into_data().to_vec::<f32>().unwrap()
}

/// v1.0, v1.1 with its own head, and v1.1 as `transformers` 5 saves it (`tie_word_embeddings:
/// true`, `scale_decoder_outputs: false`): the head tied, or its own where the weights hold one.
#[test]
fn t5_v1_0_and_v1_1_match_transformers() {
    let versions = ["v1_0", "v1_1", "v1_1_as_saved", "v1_1_own_head_as_saved"];
    for version in versions {
        let (model, config) = load(&fixture(version));
        assert_eq!(
            (config.tie_word_embeddings, config.scales_decoder_outputs()),
            match version {
                "v1_0" => (true, true),
                "v1_1" => (false, false),
                _ => (true, false),
            },
            "{version}"
        );
        let own_head = version.starts_with("v1_1") && version != "v1_1_as_saved";
        assert_eq!(model.lm_head.is_some(), own_head, "{version}");
        assert_eq!(model.output_scale == 1.0, version != "v1_0", "{version}");
        // A directory Flipside saves keeps what the config said.
        assert_eq!(T5Config::from_json(&config.to_json()).unwrap(), config);
        let reference = reference(version);
        let encoded = model.encode(
            reference.input_ids.clone(),
            reference.attention_mask.clone(),
        );
        let encoder_error = max_difference(
            &values(encoded.hidden.clone()),
            &flatten(&reference.json["encoder_hidden"]),
        );
        assert!(encoder_error < 1e-4, "{version} encoder: {encoder_error}");

        let logits = model.forward(
            reference.input_ids.clone(),
            reference.attention_mask.clone(),
            reference.labels.clone(),
        );
        let log_probs = burn::tensor::activation::log_softmax(logits, 2);
        let decoder_error =
            max_difference(&values(log_probs), &flatten(&reference.json["log_probs"]));
        assert!(decoder_error < 1e-4, "{version} decoder: {decoder_error}");

        for (search, key) in [
            (Search::Greedy, "greedy"),
            (
                Search::Beam {
                    beams: 4,
                    length_penalty: 1.0,
                },
                "beam4",
            ),
        ] {
            let settings = DecodeSettings {
                search,
                max_tokens: 12,
                banned: vec![0, 5, 7],
                logit_bias: Vec::new(),
                sentinels: None,
            };
            let ours: Vec<Vec<u32>> = generate(&model, &encoded, &settings)
                .into_iter()
                .map(|d| d.tokens)
                .collect();
            let theirs: Vec<Vec<u32>> =
                serde_json::from_value(reference.json[key].clone()).unwrap();
            assert_eq!(ours, theirs, "{version} {key}");
        }
    }
}

#[test]
fn cached_decoding_equals_full_recomputation() {
    for version in ["v1_0", "v1_1"] {
        let (model, _) = load(&fixture(version));
        let reference = reference(version);
        let encoded = model.encode(
            reference.input_ids.clone(),
            reference.attention_mask.clone(),
        );
        let decoder_input = model.shift_right(reference.labels.clone());
        let full = values(model.decode(&encoded, decoder_input.clone(), None));
        let [batch, steps] = decoder_input.dims();
        let mut cache = DecoderCache::new();
        let mut stepped = vec![Vec::new(); batch];
        for step in 0..steps {
            let column = decoder_input.clone().slice([0..batch, step..step + 1]);
            let logits = values(model.decode(&encoded, column, Some(&mut cache)));
            let vocab = logits.len() / batch;
            for (row, chunk) in logits.chunks(vocab).enumerate() {
                stepped[row].extend_from_slice(chunk);
            }
        }
        assert_eq!(cache.length, steps);
        let stepped: Vec<f32> = stepped.concat();
        let error = max_difference(&full, &stepped);
        assert!(error < 1e-5, "{version}: cached vs full {error}");
    }
}
