//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod common;
mod support;

mod actions;
mod adaptive_sim;
mod admission;
mod client;
mod client_ip;
mod config;
mod contract_exact;
mod contract_grammar;
mod docs_policies;
mod engine;
mod layer_adaptive;
mod layer_axum;
mod layer_direct;
mod layer_flow;
mod layer_hyper;
mod layer_policy_headers;
mod layer_release;
mod layer_requests;
mod layer_response_cost;
mod layer_tonic;
mod props;
mod truthful_numbers;
