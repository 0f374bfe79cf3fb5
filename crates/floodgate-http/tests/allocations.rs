//! Allocation tests: a counting global allocator (per thread) wraps every
//! allocation of this binary, so they live apart from the other tests.

mod common;
mod counting;
mod support;

mod alloc;
mod layer_alloc;
