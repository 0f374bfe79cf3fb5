//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod common;

mod bad_input;
mod blocking;
mod governor_diff;
mod packed_state;
mod prop_concurrency;
mod prop_decide_idle;
mod prop_fixed_window;
mod prop_gcra;
mod prop_sets;
mod prop_shaper;
mod prop_sliding_log;
mod prop_sliding_window;
mod prop_zone;
mod store_clock_backwards;
mod store_full;
mod store_memory;
mod store_stress;
