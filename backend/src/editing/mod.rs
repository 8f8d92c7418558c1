//! CORE's editing parts: prompt templates, keyword and sentence selection, retrieval of helpers,
//! reading LLM replies, which items a run edits, the metrics of counterfactuals, and the negation
//! scope that edits are checked for. The pipeline that composes them is [`crate::pipeline`]; the
//! methods are [`crate::methods`].

pub mod evaluate;
pub mod items;
pub mod keywords;
pub mod negation;
pub mod prompt_optimisation;
pub mod prompts;
pub mod reply;
pub mod retrieve;
