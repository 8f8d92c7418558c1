//! End-to-end browser tests: `flipside serve` with the browser app (Trunk's `dist/`, which
//! `scripts/test` builds first), driven in headless Chromium by tests/e2e/app.test.mjs
//! (playwright-core under `node --test`). Screenshots are saved under the target directory.
//! The page downloads compact int8 weights, so its numbers are checked against the native
//! models loaded from compact copies (`compact_model_dir`).

use std::path::{Path, PathBuf};
use std::process::Command;

use flipside_backend::compute::Cpu;
use flipside_backend::lass::model::load_reproducer;
use flipside_backend::models::{compact_model_dir, load_classifier};
use flipside_backend::server::demo::{CLASSIFIER_BITS, DIS_AE_BITS};
use flipside_shared::data::Input;
use flipside_shared::models::dis_ae::reproduce::{TargetSentiment, lass_decoding};

use crate::common::{ITEMS, editing_setup, serve, tiny_dis_ae};

/// Texts the browser's Dis-AE reproduces with negative sentiment, to match the native outputs.
const REPRODUCED: [&str; 3] = [
    "the film we saw on day 0 was wonderful",
    "the story we saw on day 3 was moving",
    "the show we saw on day 2 was superb",
];

/// The text the browser's classifier scores, to match the native probabilities.
const SCORED: &str = "The film was wonderful and the cast superb.";

/// The native classifier's probabilities for [`SCORED`], as JSON for the browser test.
fn native_score(classifier: &Path) -> String {
    let classifier = load_classifier::<Cpu>(classifier, &Default::default()).unwrap();
    let input = Input::Text {
        text: SCORED.into(),
    };
    let probabilities = classifier.predict_batch(&[&input]).unwrap();
    serde_json::json!({"text": SCORED, "probabilities": probabilities}).to_string()
}

/// The native Dis-AE's beam-search outputs for [`REPRODUCED`], as JSON for the browser test.
fn native_reproductions(dis_ae: &Path) -> String {
    let reproducer = load_reproducer::<Cpu>(dis_ae, &Default::default()).unwrap();
    let outputs = reproducer
        .reproduce(
            &REPRODUCED,
            TargetSentiment::Label("negative"),
            &lass_decoding(),
        )
        .unwrap();
    serde_json::json!({
        "texts": REPRODUCED,
        "label": "negative",
        "outputs": outputs.iter().map(|o| serde_json::json!({
            "text": o.text, "log_prob": o.log_prob,
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn the_app_edits_scores_in_the_browser_and_runs_a_job() {
    let root = workspace();
    let dist = std::env::var_os("FLIPSIDE_DIST").map_or(root.join("dist"), PathBuf::from);
    assert!(
        dist.join("index.html").is_file(),
        "no browser app in {}: build it first with `trunk build` (scripts/test does)",
        dist.display()
    );
    let e2e = root.join("tests/e2e");
    if !e2e.join("node_modules/playwright-core").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&e2e)
            .status()
            .expect("npm runs");
        assert!(status.success(), "npm ci failed in {}", e2e.display());
    }
    let setup = editing_setup();
    let items = setup.dir.path().join("items.csv");
    std::fs::write(&items, ITEMS).unwrap();
    tiny_dis_ae(setup.dir.path(), "dis-ae", &[]);
    let dis_ae = setup.dir.path().join("dis-ae");
    let compacted = setup.dir.path().join("compact");
    compact_model_dir(&dis_ae, &compacted.join("dis-ae"), DIS_AE_BITS).unwrap();
    compact_model_dir(
        &setup.classifier,
        &compacted.join("classifier"),
        CLASSIFIER_BITS,
    )
    .unwrap();
    let static_dir = dist.display().to_string();
    let (mut server, url) = serve(
        &setup,
        &setup.dir.path().join("server"),
        &[
            "--static-dir",
            &static_dir,
            "--dis-ae",
            dis_ae.to_str().unwrap(),
            // Jobs and the demo need no fluency model here: the page generates in the browser.
            "--max-perplexity",
            "0",
        ],
    );
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let screenshots = target.join("screenshots");
    let output = Command::new("node")
        .args(["--test", "--test-reporter=spec", "app.test.mjs"])
        .current_dir(&e2e)
        .env("FLIPSIDE_URL", &url)
        .env("ITEMS_CSV", &items)
        .env(
            "NATIVE_REPRODUCTIONS",
            native_reproductions(&compacted.join("dis-ae")),
        )
        .env("NATIVE_SCORE", native_score(&compacted.join("classifier")))
        .env("SCREENSHOT_DIR", &screenshots)
        .output()
        .expect("node runs");
    server.kill().unwrap();
    server.wait().unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}\nscreenshots: {}", screenshots.display());
    assert!(
        output.status.success(),
        "browser tests failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
