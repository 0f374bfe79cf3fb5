//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod nginx;
mod support;

mod bad_input;
mod client_body;
mod client_helper;
mod example;
mod host;
mod hostile;
mod hostile_forwarding;
mod hostile_identity;
mod hostile_send;
mod lifecycle;
mod nginx_host;
mod nginx_parity;
mod nginx_replay;
mod pool;
mod proxy;
mod proxy_protocol;
mod reload;
mod response_cost;
mod response_framing;
mod settings;
mod tls;
mod upgrade;
mod upstream_faults;
