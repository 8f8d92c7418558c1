//! The embedded engine's perplexity: texts scored together (sharing their openings, in one
//! batch) or in turn by a scorer (reusing the openings it evaluated) must score as they do
//! alone; a Q4_1 model's Q8_0 scoring copy scores as the model does.

use flipside_backend::llm::local::{EngineOptions, LocalEngine};
use flipside_backend::llm::{Fluency, LlmClient, Prompt, Request, Sampling, scoring_copy};

use crate::common::{MODEL, asset};

/// The options of the tests' engines: a 512-token context, `threads` shared by `contexts`.
fn options(threads: usize, contexts: usize) -> EngineOptions {
    EngineOptions {
        context: 512,
        batch: 512,
        threads: Some(threads),
        contexts,
    }
}

fn engine() -> LocalEngine {
    LocalEngine::load(MODEL, &asset(MODEL).join("model.gguf"), options(1, 1)).unwrap()
}

/// Each text's token log-probabilities from an engine of its own.
fn scored_alone(texts: &[&str]) -> Vec<Vec<f32>> {
    texts
        .iter()
        .map(|text| engine().token_log_probs(text).unwrap())
        .collect()
}

/// `scored` equals `expected` within 1e-3 a token.
fn assert_scores_as(scored: &[f32], expected: &[f32], what: &str) {
    assert_eq!(scored.len(), expected.len(), "{what}");
    for (a, b) in scored.iter().zip(expected) {
        assert!(
            (a - b).abs() < 1e-3,
            "{what}: {scored:?} against {expected:?}"
        );
    }
}

#[test]
fn texts_scored_together_score_as_they_do_alone() {
    let texts = [
        "The acting was wooden and the plot made no sense.",
        "The acting was superb and the plot made perfect sense.",
        // Another ending of the same opening, then the first with more after it.
        "The acting was wooden.",
        "The acting was wooden and the plot made no sense at all, sadly.",
        "A moving, wonderful story that I would watch again tomorrow.",
        "The acting was superb and the plot made perfect sense.",
        "A moving, dreadful story that I would never watch again.",
        "Terrible.",
        "The acting was wooden and the plot made no sense at all.",
        // More than one pass.
        "The soundtrack alone is worth the price of the ticket.",
    ];
    let alone = scored_alone(&texts);
    let shared = engine();
    // All at once, then in two calls, then one by one.
    let together = shared.token_log_probs_all(&texts).unwrap();
    let mut in_two = shared.token_log_probs_all(&texts[..2]).unwrap();
    in_two.extend(shared.token_log_probs_all(&texts[2..]).unwrap());
    let one_by_one = texts
        .iter()
        .map(|text| shared.token_log_probs(text))
        .collect();
    for (way, scored) in [
        ("together", together),
        ("in two calls", in_two),
        ("one by one", one_by_one),
    ] {
        for ((text, expected), scored) in texts.iter().zip(&alone).zip(scored) {
            assert_scores_as(&scored.unwrap(), expected, &format!("{way}: {text}"));
        }
    }
    // A text too short to score fails alone.
    let scored = shared.token_log_probs_all(&["Hi", texts[0]]).unwrap();
    assert!(scored[0].is_err());
    assert_eq!(scored[1].as_ref().unwrap().len(), alone[0].len());
}

#[test]
fn texts_a_scorer_takes_in_turn_score_as_they_do_alone() {
    let texts = [
        "The acting was wooden and the plot made no sense.",
        "The acting was superb and the plot made no sense.",
        "The acting was wooden and the plot made perfect sense.",
        // The opening of the first, then the first again: read off the cache.
        "The acting was wooden and the plot",
        "The acting was wooden and the plot made no sense.",
        "A moving, wonderful story that I would watch again tomorrow.",
        "The acting was superb and the plot made perfect sense.",
        "A moving, dreadful story that I would never watch again.",
        "The acting was wooden.",
        // More than the cache's sequences: scored afresh, then reused again.
        "The acting was wooden and the plot made no sense at all.",
        "The acting was superb, and the plot made no sense.",
    ];
    let alone = engine();
    let shared = engine();
    let mut scorer = shared.scorer();
    // One by one, then a call of two.
    let mut scored: Vec<f64> = texts[..9]
        .iter()
        .map(|text| scorer.perplexities(&[text]).remove(0).unwrap())
        .collect();
    scored.extend(
        scorer
            .perplexities(&texts[9..])
            .into_iter()
            .map(|p| p.unwrap()),
    );
    for (text, scored) in texts.iter().zip(scored) {
        let expected = alone.perplexity(text).unwrap();
        assert!(
            (scored / expected - 1.0).abs() < 1e-3,
            "{text}: {scored} against {expected}"
        );
    }
    assert!(scorer.perplexities(&["Hi"])[0].is_err());
    // Its context goes back emptied: texts score there as they do alone, and a completion
    // whose prompt an earlier one had cached reads the same as it did.
    drop(scorer);
    assert_scores_as(
        &shared.token_log_probs(texts[0]).unwrap(),
        &alone.token_log_probs(texts[0]).unwrap(),
        "after the scorer",
    );
    let request = Request {
        prompt: Prompt::Text("The acting was wooden and".into()),
        sampling: Sampling {
            temperature: 0.0,
            max_tokens: 8,
            ..Sampling::default()
        },
        stop: Vec::new(),
        cancel: Default::default(),
    };
    let before = shared.complete(&request).unwrap().text;
    drop(shared.scorer());
    assert_eq!(shared.complete(&request).unwrap().text, before);
}

/// A completion after texts were scored together has the whole context: the pass's other
/// sequences leave the cache with the first.
#[test]
fn a_completion_after_texts_scored_together_has_the_whole_context() {
    let rest = " the film was long and slow but the music was fine".repeat(4);
    let texts: Vec<String> = [
        "Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf",
    ]
    .iter()
    .map(|word| format!("{word}{rest}."))
    .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let request = Request {
        prompt: Prompt::Text(format!("Summary:{}", rest.repeat(6))),
        sampling: Sampling {
            temperature: 0.0,
            max_tokens: 100,
            ..Sampling::default()
        },
        stop: Vec::new(),
        cancel: Default::default(),
    };
    let shared = engine();
    // The texts take more cells than the prompt and its reply leave free.
    let prompt = shared.prompt_tokens(&request.prompt).unwrap().len();
    let cells: usize = texts.iter().map(|t| shared.tokenize(t, false).len()).sum();
    assert!(prompt + 100 <= 512 && cells + prompt > 512 + cells / texts.len());
    for scored in shared.token_log_probs_all(&texts).unwrap() {
        scored.unwrap();
    }
    let reply = shared.complete(&request).unwrap().text;
    assert_eq!(reply, engine().complete(&request).unwrap().text);
}

#[test]
fn a_q4_1_model_scores_from_its_q8_0_copy_as_it_does_itself() {
    let model = asset(MODEL).join("model.gguf");
    let copy = scoring_copy(&model).unwrap();
    assert_eq!(copy, model.with_extension("q8_0.gguf"));
    // Made once: a second call finds it.
    let written = copy.metadata().unwrap().modified().unwrap();
    assert_eq!(scoring_copy(&model).unwrap(), copy);
    assert_eq!(copy.metadata().unwrap().modified().unwrap(), written);
    // A Q8_0 model is scored as it is.
    assert_eq!(scoring_copy(&copy).unwrap(), copy);
    let options = options(1, 1);
    let (q4_1, q8_0) = (
        LocalEngine::load(MODEL, &model, options).unwrap(),
        LocalEngine::load(MODEL, &copy, options).unwrap(),
    );
    for text in [
        "The acting was wooden and the plot made no sense.",
        "A moving, wonderful story that I would watch again tomorrow.",
        "Omar Epps is an bad actor.",
    ] {
        // Both round activations to 8 bits: against the Q4_1 weights in f32, each was within
        // 9 % on five sentences, and within 5 % of each other.
        let (a, b) = (
            q4_1.perplexity(text).unwrap(),
            q8_0.perplexity(text).unwrap(),
        );
        assert!((a / b - 1.0).abs() < 0.08, "{text}: {a} against {b}");
    }
}

#[test]
fn callers_at_once_score_on_contexts_of_their_own_as_they_do_alone() {
    let texts = [
        "The acting was wooden and the plot made no sense.",
        "A moving, wonderful story that I would watch again tomorrow.",
        "The acting was superb and the plot made perfect sense.",
    ];
    let alone = scored_alone(&texts);
    let pooled = LocalEngine::load(MODEL, &asset(MODEL).join("model.gguf"), options(2, 2)).unwrap();
    assert_eq!(pooled.contexts(), 2);
    std::thread::scope(|scope| {
        for caller in 0..4 {
            let (pooled, alone) = (&pooled, &alone);
            scope.spawn(move || {
                for round in 0..3 {
                    let i = (caller + round) % texts.len();
                    let scored = pooled.token_log_probs_all(&[texts[i]]).unwrap().remove(0);
                    let what = format!("caller {caller}: {}", texts[i]);
                    assert_scores_as(&scored.unwrap(), &alone[i], &what);
                }
            });
        }
    });
}
