//! End-to-end browser tests: `flipside serve` with the browser app (Trunk's `dist/`, which
//! `scripts/test` builds first), driven in headless Chromium by tests/e2e/app.test.mjs
//! (playwright-core under `node --test`). Screenshots are saved under the target directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{ITEMS, editing_setup, serve};

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
    let static_dir = dist.display().to_string();
    let (mut server, url) = serve(
        &setup,
        &setup.dir.path().join("server"),
        &["--static-dir", &static_dir],
    );
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let screenshots = target.join("screenshots");
    let output = Command::new("node")
        .args(["--test", "--test-reporter=spec", "app.test.mjs"])
        .current_dir(&e2e)
        .env("FLIPSIDE_URL", &url)
        .env("ITEMS_CSV", &items)
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
