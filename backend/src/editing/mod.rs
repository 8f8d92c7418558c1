//! Counterfactual editing: prompt templates, keyword and sentence selection, retrieval for a
//! batch of items, reading LLM replies, and the resumable `generate` pipeline.

pub mod evaluate;
pub mod generate;
pub mod items;
pub mod keywords;
pub mod prompts;
pub mod records;
pub mod reply;
pub mod retrieve;
