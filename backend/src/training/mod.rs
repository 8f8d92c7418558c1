//! Training: the classifier's fine-tuning loop ([`classifier`]) with its optimiser
//! ([`adamw`]) and a batch's gradients in parts on the CPU's threads ([`parts`]), the bag-of-words baseline ([`baseline`]), and the two compared in and out of
//! domain ([`compare`]). The T5 infiller and the Dis-AE have their own trainers
//! (`infiller/`, `lass/`).

pub mod adamw;
pub mod baseline;
pub mod classifier;
pub mod compare;
pub mod parts;
