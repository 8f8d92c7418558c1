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
