//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary.

mod ageing;
mod allocations;
mod direct;
mod envoy_differential;
mod grpc_tls_python;
mod hpack_allocations;
mod rlqs;
mod settings;
mod support;
mod tls;
mod uds;
