//! # The Floodgate gateway
//!
//! `floodgate gateway`: a reverse proxy in front of any HTTP/1.1 or HTTP/2
//! upstream that enforces Floodgate policies before requests reach it.
//!
//! * Clients speak HTTP/1.1 or HTTP/2, in cleartext (prior knowledge) or
//!   over TLS terminated by the gateway (ALPN); the upstream is reached
//!   over HTTP/1.1 or HTTP/2, `http://` or `https://`, through a pool of
//!   keep-alive connections ([`Upstream`]): towards HTTP/1.1, a request
//!   is written and answered in its own task by the gateway's own client;
//!   towards HTTP/2, through hyper's.
//!   Bodies stream both ways untouched; hop-by-hop fields are removed and
//!   `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` are appended.
//! * Upgrades (WebSocket) are limited, then tunnelled.
//! * Every request goes through
//!   [`FloodgateLayer`](floodgate_http::FloodgateLayer) first: the same
//!   identity, contract (429 or the rule's status, `RateLimit` headers on
//!   every response), shaper delays (nginx `limit_req` semantics),
//!   concurrency queues and priority shedding as the tower layer.
//! * An unreachable upstream is answered 502, a slow one 504 — never a
//!   rate-limit status.
//! * Slow clients are disconnected after the header timeout, request heads
//!   are bounded, request smuggling is rejected by hyper's parser,
//!   connections are capped, and shutdown drains requests in flight.
//! * The configuration is the Floodgate file: `gateway:` (this crate),
//!   `http:`, `store:`, `server:` and the policies; policies and `http:`
//!   are reloaded while running.
//!
//! See `docs/gateway.md`.

#![warn(missing_docs)]

pub mod access;
mod body;
mod config;
mod connect;
mod connection;
pub mod demo;
mod error;
mod forward;
mod gateway;
// Public for the fuzz targets only (its response parsing), not the API.
#[doc(hidden)]
pub mod h1;
// Public for the fuzz targets only (the request authority checks), not
// the API.
#[doc(hidden)]
pub mod host;
mod pool;
mod proxy;
mod reload;
mod run;
pub mod settings;
mod tls;
mod upgrade;
mod upload;
mod upstream;

pub use config::{
    GatewayConfig, HostHeader, ListenerLimits, ListenerTls, UpstreamConfig, UpstreamProtocol,
    UpstreamTls, UpstreamUrl,
};
pub use error::GatewayError;
pub use floodgate_http::HttpSection;
pub use gateway::{Gateway, Limiter};
pub use proxy::{Proxy, ProxyStats};
pub use reload::{Reload, read_sections};
pub use run::{Loaded, Running, load, run, start};
pub use tls::TlsError;
pub use upstream::Upstream;
