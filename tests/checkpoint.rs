//! Classifier checkpoints: HF key names and layout, and an exact round trip.

use crate::common;

use flipside_backend::compute::Cpu;
use flipside_backend::models::{load_classifier, save_classifier};
use flipside_shared::data::Input;

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
