//! Flipside's native side: the `flipside` command line, asset fetching, dataset readers,
//! training, retrieval, the counterfactual pipeline and its methods, the web server, baselines
//! and benchmarks. Models and data types live in `flipside-shared`.
//!
//! The library does not know the command line: `cli/` parses arguments and calls it, as the
//! server does.
//!
//! How the parts fit together, and what they measure: the book in `docs/` (`mdbook build docs`;
//! start at `docs/src/introduction.md`, the architecture at `docs/src/architecture.md`).

pub mod allocator;
pub mod assets;
pub mod cli;
pub mod compute;
pub mod data;
pub mod editing;
pub mod experiment;
pub mod explain;
pub mod home;
pub mod infiller;
pub mod lass;
pub mod llm;
pub mod methods;
pub mod model_dirs;
pub mod pipeline;
pub mod prepare;
pub mod progress;
pub mod retrieval;
pub mod review;
pub mod server;
pub mod shipped;
pub mod training;

/// The property tests' settings: `cases` generated inputs, or `PROPTEST_CASES` when set
/// (`scripts/fuzz` runs them for minutes); failures are printed, not saved beside the sources.
#[cfg(test)]
pub(crate) fn property_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..Default::default()
    }
}
