//! Training: the loop every model trains with and the classifier's fine-tuning on it
//! ([`classifier`]), its optimiser ([`adamw`]), a batch's gradients in parts on the CPU's
//! threads ([`parts`]), the bag-of-words baseline ([`baseline`]), and the two compared in and
//! out of domain ([`compare`]). The T5 infiller's and the Dis-AE's objectives live with them
//! (`infiller/`, `lass/`).

pub mod adamw;
pub mod baseline;
pub mod classifier;
pub mod compare;
pub mod parts;

/// Holds off every other test that trains until dropped. Tests that build autodiff graphs or
/// draw from the backend's random generator take it: burn-autodiff 0.21's backward pass may
/// free the steps of a graph another thread is still building (tracel-ai/burn#5573), and the
/// generator is the process's.
#[cfg(test)]
pub(crate) fn train_alone() -> std::sync::MutexGuard<'static, ()> {
    static TRAINING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TRAINING.lock().unwrap_or_else(|e| e.into_inner())
}
