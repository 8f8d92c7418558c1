//! Training: the classifier's fine-tuning loop ([`classifier`]) with its optimiser
//! ([`adamw`]), the bag-of-words baseline ([`baseline`]), and the two compared in and out of
//! domain ([`compare`]). The T5 infiller and the Dis-AE have their own trainers
//! (`infiller/`, `lass/`).

pub mod adamw;
pub mod baseline;
pub mod classifier;
pub mod compare;
