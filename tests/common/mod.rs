//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

use burn::tensor::backend::Backend;
use flipside_backend::home::Home;
use flipside_backend::models::BertFiles;
use flipside_shared::classifier::{ClassifierConfig, SequenceClassifier};

/// The Flipside home the test command fetched assets into (`FLIPSIDE_HOME` or `~/.flipside`).
pub fn home() -> Home {
    Home::resolve(std::env::var_os("FLIPSIDE_HOME").map(PathBuf::from)).unwrap()
}

/// The directory of a fetched asset; fails with the fetch command when it is missing.
pub fn asset(name: &str) -> PathBuf {
    home().asset(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The `flipside` binary under test, using the shared home for assets.
pub fn flipside() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flipside"));
    command
        .env("FLIPSIDE_HOME", home().root())
        .env("NO_COLOR", "1");
    command
}

/// Runs a command and returns its stdout, failing with its stderr when it fails.
pub fn success(command: &mut Command) -> String {
    let output = command.output().expect("flipside runs");
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs a command that must fail and returns its stderr.
pub fn failure(command: &mut Command) -> String {
    let output: Output = command.output().expect("flipside runs");
    assert!(
        !output.status.success(),
        "{command:?} should have failed; stdout:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).unwrap()
}

/// A small sentiment dataset whose label is carried by one adjective among neutral words.
pub fn toy_sentiment_csv() -> String {
    let positive = [
        "wonderful",
        "superb",
        "delightful",
        "brilliant",
        "excellent",
        "moving",
    ];
    let negative = ["dreadful", "awful", "boring", "terrible", "dull", "painful"];
    let subjects = ["film", "movie", "show", "story"];
    let mut csv = String::from("text,label\n");
    for (i, subject) in subjects.iter().enumerate() {
        for (good, bad) in positive.iter().zip(negative) {
            csv.push_str(&format!(
                "the {subject} we saw on day {i} was {good},positive\n"
            ));
            csv.push_str(&format!(
                "the {subject} we saw on day {i} was {bad},negative\n"
            ));
        }
    }
    csv
}

/// A classifier with the pretrained MiniLM encoder and a head initialised from `seed`.
pub fn minilm_classifier<B: Backend>(
    labels: &[&str],
    max_len: usize,
    seed: u64,
) -> (SequenceClassifier<B>, ClassifierConfig, BertFiles) {
    let device = Default::default();
    B::seed(&device, seed);
    let files = BertFiles::read(&asset("minilm")).unwrap();
    let config = ClassifierConfig {
        bert: files.config.clone(),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        max_len,
        head_dropout: 0.1,
    };
    let mut model = config.init::<B>(&device);
    model.bert = files.load_model(&device).unwrap();
    (model, config, files)
}
