//! The embedded engine's perplexity: texts scored one after another reuse the log
//! probabilities of the opening they share, and must score as they do from an empty cache.

use flipside_backend::llm::local::{EngineOptions, LocalEngine};

use crate::common::{MODEL, asset};

fn engine() -> LocalEngine {
    let options = EngineOptions {
        context: 512,
        batch: 512,
        threads: Some(1),
    };
    LocalEngine::load(MODEL, &asset(MODEL).join("model.gguf"), options).unwrap()
}

#[test]
fn texts_sharing_an_opening_score_as_they_do_alone() {
    let texts = [
        "The acting was wooden and the plot made no sense.",
        "The acting was superb and the plot made perfect sense.",
        // Another ending of the same opening, then the first with more after it.
        "The acting was wooden.",
        "The acting was wooden and the plot made no sense at all, sadly.",
        "A moving, wonderful story that I would watch again tomorrow.",
        "The acting was superb and the plot made perfect sense.",
    ];
    let alone: Vec<Vec<f32>> = texts
        .iter()
        .map(|text| engine().token_log_probs(text).unwrap())
        .collect();
    let shared = engine();
    for (text, expected) in texts.iter().zip(&alone) {
        let scored = shared.token_log_probs(text).unwrap();
        assert_eq!(scored.len(), expected.len(), "{text}");
        for (a, b) in scored.iter().zip(expected) {
            assert!(
                (a - b).abs() < 1e-3,
                "{text}: {scored:?} against {expected:?}"
            );
        }
    }
}
