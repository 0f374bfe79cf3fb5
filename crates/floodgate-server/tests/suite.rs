//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary.

mod envoy_differential;
mod settings;
mod tls;
