//! # The Floodgate decision service
//!
//! `floodgate serve` as a library: [`run`] (or [`serve`], on a runtime of
//! your own, until a future of yours resolves) answers
//!
//! * Envoy's rate limit service protocol (RLS v3,
//!   `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) over
//!   gRPC, with gRPC health checking and server reflection;
//! * Envoy's rate limit quota service (RLQS v3,
//!   `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`) on the
//!   same listener;
//! * envoyproxy/ratelimit's `/json`, and Floodgate's own `/v1/check` and
//!   `/v1/release`, over HTTP;
//!
//! with the rate limit headers of `floodgate-http`'s contract. The gRPC
//! listener is served by hyper's HTTP/2 server, or, with
//! `server.grpc_http2: direct`, by the service's own for unary calls (no
//! allocation per `ShouldRateLimit` call in memory, half the CPU; no
//! streaming method). It is a
//! frontend ([`Rls`]) of [`floodgate_runtime`]'s host, which runs the
//! process (settings, store, metrics, logs, reload, admin listener,
//! shutdown); [`proto`] holds the protocol's generated types, for clients.
//!
//! ```no_run
//! use floodgate_runtime::host::Frontend;
//! use floodgate_runtime::settings::{Env, Flags};
//!
//! # fn main() -> Result<(), floodgate_runtime::RuntimeError> {
//! // What `floodgate serve --config floodgate.yaml` does: flags over the
//! // environment over the file.
//! let prometheus = floodgate_runtime::host::metrics::install()?;
//! let flags = Flags::new().with("config", "floodgate.yaml");
//! let environment = |name: &str| std::env::var(name).ok();
//! let sections = floodgate_server::Rls::sections();
//! let loaded = floodgate_server::load(
//!     &flags,
//!     &Env::new(&environment),
//!     &sections,
//!     floodgate_server::DEFAULT_CONFIG,
//! )?;
//! floodgate_runtime::host::logging::init(&loaded.runtime.settings.server.log, &loaded.runtime.settings.server.tracing)?;
//! // Serves until SIGTERM or SIGINT, then drains.
//! floodgate_server::run(loaded, Some(prometheus))?;
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/service.md` for the API reference and the settings.

// What `internals` re-exports is public for its tests and fuzz targets,
// where the lint is checked.
#![cfg_attr(not(feature = "internals"), allow(unreachable_pub))]

mod admin;
mod call;
mod decision;
mod envoy_metrics;
mod grpc;
mod headers;
mod http;
mod metrics;
mod pool;
pub mod proto;
mod rlqs;
mod run;
pub mod settings;
mod trace;

pub use rlqs::RlqsSettings;
pub use run::{Loaded, Rls, load, run, serve};
pub use settings::RlsSettings;

/// The files `floodgate serve` reads when given none, the first that
/// exists: the deployment's, else the quick start's.
pub const DEFAULT_CONFIG: &[&str] = &["floodgate.yaml", "examples/floodgate.yaml"];

/// What the crate's tests and fuzz targets drive directly: the gRPC
/// message codec, the HPACK decoder, the header renderer, the HTTP router
/// and the service behind them. Not a stable API (feature `internals`).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::decision::DecisionService;
    pub use crate::grpc::direct::hpack::{Decoder as HpackDecoder, HpackError};
    pub use crate::grpc::wire::{WireRequest, encode_response, generated};
    pub use crate::headers::envoy_headers;
    pub use crate::http::router;
}
