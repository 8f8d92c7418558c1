//! The flip check: a classifier judges whether an edit has the target label. The classifier is
//! held behind [`Classify`], so that loaded models on any burn backend can be shared by the
//! server's handlers, its jobs and `generate`'s worker threads.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Result, bail};
use burn::tensor::backend::Backend;
use flipside_shared::batching::Sequential;
use flipside_shared::data::Input;
use flipside_shared::metrics::argmax_rows;
use flipside_shared::models::classifier::TextClassifier;

use super::{Item, Judge, Verdict};

/// A loaded classifier, whatever backend it runs on.
pub trait Classify: Send + Sync {
    /// Its label names, in output order.
    fn labels(&self) -> Vec<String>;

    /// Label probabilities of `inputs`, one row per input, in input order.
    fn probabilities(&self, inputs: &[&Input]) -> Result<Vec<Vec<f32>>>;
}

/// Inputs per batch when [`Classify::probabilities`] is given many (the server's `/classify`).
pub const CLASSIFY_BATCH_SIZE: usize = 32;

impl<B: Backend> Classify for Mutex<TextClassifier<B>> {
    fn labels(&self) -> Vec<String> {
        self.lock().unwrap().config.labels.clone()
    }

    /// In batches of [`CLASSIFY_BATCH_SIZE`] sorted by token count, as `classifier eval` runs.
    fn probabilities(&self, inputs: &[&Input]) -> Result<Vec<Vec<f32>>> {
        let classifier = self.lock().unwrap();
        Ok(classifier.predict(inputs, CLASSIFY_BATCH_SIZE, &Sequential, &|_| {})?)
    }
}

/// Judges an edit flipped when the classifier's most probable label is the target.
pub struct FlipCheck {
    /// Where the classifier came from, for error messages.
    pub name: String,
    pub classifier: Arc<dyn Classify>,
}

impl Judge for FlipCheck {
    fn check(&self, item: &Item) -> Result<()> {
        let labels = self.classifier.labels();
        if !labels.contains(&item.target) {
            bail!(
                "the classifier {} knows the labels {labels:?}, not the target {:?}",
                self.name,
                item.target
            );
        }
        Ok(())
    }

    /// Scores the edit alone (a batch of one), so that its probabilities do not depend on what
    /// else is being judged.
    fn judge(&self, item: &Item, edited: &str) -> Result<Verdict> {
        let started = Instant::now();
        let labels = self.classifier.labels();
        let probabilities = self
            .classifier
            .probabilities(&[&item.input(edited)])?
            .remove(0);
        let best = argmax_rows(&probabilities, labels.len())[0];
        let target = labels.iter().position(|l| *l == item.target).unwrap_or(0);
        Ok(Verdict {
            passed: labels[best] == item.target,
            label: labels[best].clone(),
            target_probability: probabilities[target],
            probabilities,
            millis: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}
