//! Flipside's end-to-end tests: the real `flipside` binary, the registries' models and data, a
//! real server on loopback (SQLite and Postgres) and a real browser. They are one test binary:
//! each further one would link the whole backend, llama.cpp included, once more.

mod accounts;
mod common;

mod browser;
mod checkpoint;
mod cli;
mod cpus;
mod datasets;
mod encoder_parity;
mod experiment;
mod faults;
mod fluency;
mod generate;
mod hostile;
mod infiller;
mod lass;
mod portal;
mod retrieval;
mod review_tools;
mod saliency;
mod server;
mod t5;
