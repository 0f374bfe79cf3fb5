//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod common;

mod config_files;
mod debt;
mod direct_plan;
mod docs_examples;
mod envoy_fidelity;
mod envoy_penalty;
mod envoy_semantics;
mod fallback;
mod floodgate_features;
mod hot_reload;
mod leases;
mod memory;
mod near_limit;
mod negative_hits;
mod nginx_zones;
mod on_failure;
mod permits;
mod reload_refusals;
mod sync_modes;
mod top_keys;
