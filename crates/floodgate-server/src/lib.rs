//! # The Floodgate decision service
//!
//! `floodgate serve`: Envoy's rate limit service protocol (RLS v3) over
//! gRPC, envoyproxy/ratelimit's `/json` and Floodgate's own `/v1/check`
//! over HTTP, gRPC health and reflection. The process plumbing (settings,
//! store, metrics, logs, reload, admin listener, shutdown) is
//! [`floodgate_runtime`]'s.
//!
//! See `docs/service.md` for the API reference and the settings.

#![warn(missing_docs)]

pub mod admin;
pub mod grpc;
pub mod grpc_server;
pub mod headers;
pub mod http;
pub mod metrics;
pub mod pool;
pub mod proto;
pub mod run;
pub mod service;

pub use run::serve;
pub use service::Service;
