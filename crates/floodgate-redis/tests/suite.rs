//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod common;

mod algorithms;
mod concurrency;
mod differential;
mod faults;
mod keys_and_input;
mod lease_exactness;
mod lease_server_clock;
mod leases;
mod memory_full;
mod multi_region;
mod permit_routing;
mod pipelining;
mod release_attacks;
mod rls_leases;
mod rule_policies;
mod sentinel;
mod sync_bound;
mod tls;
