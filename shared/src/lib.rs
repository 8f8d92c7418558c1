//! Flipside's core, shared by the native backend and the browser frontend.
//!
//! Everything here compiles for native targets and for `wasm32-unknown-unknown`: data types,
//! tokenisation, burn models generic over the backend (so the same code runs on CPU, WebGPU and
//! CUDA), checkpoint (de)serialisation from bytes, and metrics. No file or network I/O.
//!
//! How the parts fit together, and what they measure: the book in `docs/` (`mdbook build docs`;
//! start at `docs/src/introduction.md`, the architecture at `docs/src/architecture.md`).

pub mod api;
pub mod batching;
pub mod data;
pub mod diff;
pub mod highlight;
pub mod infill;
pub mod metrics;
pub mod models;
pub mod ops;
pub mod portal;
pub mod pos;
pub mod random;
pub mod records;
pub mod saliency;
pub mod sentences;
pub mod surface;
pub mod svg;
pub mod tokenize;
pub mod words;
