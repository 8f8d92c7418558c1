//! Dense retrieval over a sentence corpus (CORE §3.1): encoders, embedding storage, the HNSW
//! index and search.

pub mod ann;
pub mod embeddings;
pub mod encoders;
pub mod exact;
pub mod index;
