//! # The Floodgate decision service
//!
//! `floodgate serve`: Envoy's rate limit service protocol (RLS v3) over
//! gRPC, envoyproxy/ratelimit's `/json` and Floodgate's own `/v1/check`
//! over HTTP, gRPC health and reflection, Prometheus metrics on a loopback
//! admin listener, structured logs, hot reload of the configuration, and a
//! graceful shutdown. Counters live in this process
//! ([`MemoryBackend`](floodgate_policy::MemoryBackend)) or in Redis
//! ([`floodgate_redis::ResilientBackend`]).
//!
//! See `docs/service.md` for the API reference and the settings.

#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod error;
pub mod grpc;
pub mod grpc_server;
pub mod headers;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod pool;
pub mod proto;
pub mod run;
pub mod service;
pub mod settings;

pub use backend::AnyBackend;
pub use error::ServerError;
pub use run::{ServeOptions, load, run, serve};
pub use service::Service;
pub use settings::Settings;
