//! End-to-end browser tests: `flipside serve` with the browser app (Trunk's `dist/`, which
//! `scripts/test` builds first), driven in headless Chromium by tests/e2e/app.test.mjs
//! (playwright-core under `node --test`). Screenshots are saved under the target directory.
//! The page downloads compact int8 weights, so its numbers are checked against the native
//! models loaded from compact copies (`compact_model_dir`).

use std::path::{Path, PathBuf};
use std::process::Command;

use flipside_backend::compute::Cpu;
use flipside_backend::lass::model::load_reproducer;
use flipside_backend::model_dirs::{compact_model_dir, load_classifier};
use flipside_backend::server::downloads::{CLASSIFIER_BITS, DIS_AE_BITS};
use flipside_shared::data::Input;
use flipside_shared::models::dis_ae::reproduce::{TargetSentiment, lass_decoding};
use flipside_shared::ops::int8::{Kernel, page_parity_digest};

use serde_json::json;

use crate::accounts::{ADMIN_PASSWORD, add_user, sign_in, team_of};
use crate::common::{ITEMS, editing_setup, max_difference, serve, tiny_dis_ae};
use crate::portal::{add_items, finished_job, new_queue};
use crate::server::{Server, json_of};

/// Texts the browser's Dis-AE reproduces with negative sentiment, to match the native outputs.
const REPRODUCED: [&str; 3] = [
    "the film we saw on day 0 was wonderful",
    "the story we saw on day 3 was moving",
    "the show we saw on day 2 was superb",
];

/// The text the browser's classifier scores, to match the native probabilities.
const SCORED: &str = "The film was wonderful and the cast superb.";

/// The native classifier's probabilities for [`SCORED`], as JSON for the browser test: in f32
/// (WebGPU's) and with the encoder in int8 as the page's CPU backend computes it with each of its
/// kernels (relaxed SIMD's and SIMD128's integer sums, here one at a time), by kernel name, with
/// the digest of each kernel's products that the page must reproduce exactly.
fn native_score(classifier: &Path) -> String {
    let classifier = load_classifier::<Cpu>(classifier, &Default::default()).unwrap();
    let input = Input::Text {
        text: SCORED.into(),
    };
    let probabilities = classifier.predict_batch(&[&input]).unwrap();
    let mut int8 = serde_json::Map::new();
    for kernel in [Kernel::RelaxedSimd, Kernel::Simd128] {
        let int8_probabilities = classifier
            .clone()
            .with_int8_copies(kernel)
            .predict_batch(&[&input])
            .unwrap();
        let int8_vs_f32 = max_difference(&int8_probabilities, &probabilities);
        assert!(int8_vs_f32 > 0.0, "the int8 copies are used");
        int8.insert(
            serde_json::to_value(kernel)
                .unwrap()
                .as_str()
                .unwrap()
                .into(),
            json!({
                "probabilities": int8_probabilities,
                "vs_f32": int8_vs_f32,
                "parity": page_parity_digest(kernel).expect("the page's kernels run natively"),
            }),
        );
    }
    json!({
        "text": SCORED,
        "probabilities": probabilities,
        "int8": int8,
    })
    .to_string()
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

/// The browser app (Trunk's `dist/`) and the folder of the browser tests, with their packages.
fn app_and_tests() -> (PathBuf, PathBuf) {
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
    (dist, e2e)
}

/// Where screenshots go: under the target directory.
fn screenshot_dir() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or(workspace().join("target"), PathBuf::from);
    target.join("screenshots")
}

/// Runs one file of browser tests with `env`; fails with their report.
fn run_browser_tests(e2e: &Path, file: &str, env: &[(&str, String)]) {
    let screenshots = screenshot_dir();
    let output = Command::new("node")
        .args(["--test", "--test-reporter=spec", file])
        .current_dir(e2e)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("SCREENSHOT_DIR", &screenshots)
        .output()
        .expect("node runs");
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}\nscreenshots: {}", screenshots.display());
    assert!(
        output.status.success(),
        "browser tests failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_app_edits_scores_in_the_browser_and_runs_a_job() {
    let (dist, e2e) = app_and_tests();
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
    let data = setup.dir.path().join("server");
    add_user(&data, &[], "ada@lab.org", "lab", "admin");
    let (mut server, url) = serve(
        &setup,
        &data,
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
    // The page is `/`; any other path that is not one of the app's files is 404, never the page.
    let page = reqwest::blocking::get(&url).unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        policy.contains("'sha256-") && policy.contains("'wasm-unsafe-eval'"),
        "the inline bootstrap is allowed by its hash: {policy}"
    );
    for path in [".git/config", "jobs", "../../etc/passwd"] {
        let response = reqwest::blocking::get(format!("{url}{path}")).unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let env = [
        ("FLIPSIDE_URL", url),
        ("ITEMS_CSV", items.display().to_string()),
        (
            "NATIVE_REPRODUCTIONS",
            native_reproductions(&compacted.join("dis-ae")),
        ),
        ("NATIVE_SCORE", native_score(&compacted.join("classifier"))),
        ("ADMIN_EMAIL", "ada@lab.org".into()),
        ("ADMIN_PASSWORD", ADMIN_PASSWORD.into()),
    ];
    let result = std::panic::catch_unwind(|| run_browser_tests(&e2e, "app.test.mjs", &env));
    server.kill().unwrap();
    server.wait().unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The team portal by keyboard: the admin made by the CLI invites a teammate, both review a
/// job's counterfactuals side by side, and the admin writes one with retrieved excerpts
/// (tests/e2e/portal.test.mjs); the written one keeps the excerpts as its provenance.
#[test]
fn the_portal_reviews_a_job_by_keyboard_and_authors_with_excerpts() {
    let (dist, e2e) = app_and_tests();
    let setup = editing_setup();
    let data = setup.dir.path().join("server");
    add_user(&data, &[], "ada@lab.org", "lab", "admin");
    let static_dir = dist.display().to_string();
    let server = Server::start(&setup, &data, &["--static-dir", &static_dir]);
    let ada = sign_in(&server, "ada@lab.org", ADMIN_PASSWORD);
    let team = team_of(&ada);
    let (job_id, _) = finished_job(&ada, &team);
    let originals = new_queue(&ada, &team, json!({"name": "originals to write for"}));
    let original = json!([{
        "original": "The plot was dull and the jokes painful.",
        "label": "negative",
        "target": "positive",
    }]);
    add_items(&ada, &team, &originals, &original);
    run_browser_tests(
        &e2e,
        "portal.test.mjs",
        &[
            ("FLIPSIDE_URL", server.url.clone()),
            ("ADMIN_EMAIL", "ada@lab.org".into()),
            ("ADMIN_PASSWORD", ADMIN_PASSWORD.into()),
            ("JOB_ID", job_id),
            ("AUTHOR_QUEUE", format!("{team}/{originals}")),
        ],
    );
    let stats = json_of(
        ada.get(&format!("/teams/{team}/queues/{originals}/stats")),
        200,
    );
    assert_eq!(stats["kept"], 1, "{stats}");
    let exported = ada
        .get(&format!(
            "/teams/{team}/queues/{originals}/export?format=records"
        ))
        .text()
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(exported.trim()).unwrap();
    assert_eq!(record["method"], "human");
    assert!(
        !record["provenance"]["retrieved"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the excerpts the author saw are its provenance: {record}"
    );
}
