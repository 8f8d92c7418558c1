//! LASS (COLING 2025): LLM-made minimal pairs teach a small disentangled autoencoder (the
//! Dis-AE, in `flipside_shared::models::dis_ae`) to separate content from sentiment, which then
//! mass-produces counterfactuals cheaply. This module trains its vocabulary and the model, and
//! evaluates it on held-out pairs.

pub mod evaluate;
pub mod model;
pub mod shipped;
pub mod train;
pub mod vocabulary;
