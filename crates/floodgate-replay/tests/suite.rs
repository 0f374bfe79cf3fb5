//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary.

mod common;

mod algorithms;
mod browser;
mod formats;
mod legends;
mod ordering;
mod outputs;
mod semantics;
