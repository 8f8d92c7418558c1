//! Flipside's native side: the `flipside` command line, asset fetching, dataset readers,
//! training, baselines and benchmarks. Models and data types live in `flipside-shared`.

pub mod allocator;
pub mod assets;
pub mod baseline;
pub mod cli;
pub mod compare;
pub mod compute;
pub mod corpus;
pub mod data;
pub mod editing;
pub mod explain;
pub mod home;
pub mod llm;
pub mod models;
pub mod progress;
pub mod retrieval;
pub mod server;
pub mod train;
