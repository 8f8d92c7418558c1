//! Dense retrieval over a sentence corpus (CORE §3.1): the corpus, encoders, embedding storage,
//! the HNSW index and search.

pub mod ann;
pub mod cfdpr;
pub mod corpus;
pub mod embeddings;
pub mod encoders;
pub mod evaluate;
pub mod exact;
pub mod flat;
pub mod index;
pub mod negatives;
pub mod reranker;
pub mod shards;
