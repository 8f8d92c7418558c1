//! Explaining a classifier's prediction with word saliency.

use std::path::Path;

use anyhow::{Context, Result};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;
use flipside_shared::metrics::argmax_rows;
use flipside_shared::saliency::{WordSaliency, word_saliency};
use serde::Serialize;

use crate::compute::Compute;
use crate::model_dirs::load_classifier;

/// A prediction with the saliency of each word for the explained label.
#[derive(Debug, Serialize)]
pub struct Explanation {
    pub label: String,
    pub probability: f32,
    pub words: Vec<WordSaliency>,
}

/// Explains `text` for `label` (default: the predicted label) with gradient-norm saliency.
pub fn explain<B: Backend>(
    compute: Compute<B>,
    dir: &Path,
    text: &str,
    label: Option<&str>,
) -> Result<Explanation> {
    let device = compute.device;
    let classifier = load_classifier::<Autodiff<B>>(dir, &device)?;
    let input = Input::Text { text: text.into() };
    let probs = classifier.predict_batch(&[&input])?;
    let labels = &classifier.config.labels;
    let label = match label {
        Some(name) => labels
            .iter()
            .position(|l| l == name)
            .with_context(|| format!("unknown label {name:?}; the classifier has {labels:?}"))?,
        None => argmax_rows(&probs, labels.len())[0],
    };
    let model = classifier.model.without_dropout();
    let words =
        word_saliency(&model, &classifier.tokenizer, &[&input], &[label], &device)?.remove(0);
    Ok(Explanation {
        label: labels[label].clone(),
        probability: probs[label],
        words,
    })
}

/// Prints words with their saliency as a bar chart.
pub fn print_explanation(explanation: &Explanation) {
    println!(
        "label {} (p = {:.3}); saliency of each word for it:",
        explanation.label, explanation.probability
    );
    let max = explanation
        .words
        .iter()
        .map(|w| w.score)
        .fold(f32::MIN_POSITIVE, f32::max);
    for word in &explanation.words {
        let bar = "█".repeat((24.0 * word.score / max).round() as usize);
        println!("  {:<18} {:.3} {bar}", word.word, word.score);
    }
}
