//! # The Floodgate gateway
//!
//! `floodgate gateway`: a reverse proxy in front of any HTTP/1.1 or HTTP/2
//! upstream that enforces Floodgate policies before requests reach it.
//!
//! * Clients speak HTTP/1.1 or HTTP/2, in cleartext (prior knowledge) or
//!   over TLS terminated by the gateway (ALPN; [`tls`]); the upstream is
//!   reached over HTTP/1.1 or HTTP/2, `http://` or `https://`, through a
//!   pooled keep-alive client ([`Upstream`]): the gateway's own HTTP/1.1
//!   client ([`h1`]) for requests without a body, hyper's for the rest. Bodies stream both ways
//!   untouched; hop-by-hop fields are removed and `X-Forwarded-For`,
//!   `X-Forwarded-Proto` and `Forwarded` are appended ([`forward`]).
//! * Upgrades (WebSocket) are limited, then tunnelled ([`upgrade`]).
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
pub mod body;
pub mod config;
pub mod connect;
pub mod demo;
pub mod error;
pub mod forward;
pub mod gateway;
pub mod h1;
pub mod host;
pub mod http_section;
pub mod listener;
pub mod pool;
pub mod proxy;
pub mod reload;
pub mod run;
pub mod settings;
pub mod tls;
pub mod upgrade;
pub mod upload;
pub mod upstream;

pub use config::{
    GatewayConfig, HostHeader, ListenerLimits, ListenerTls, UpstreamConfig, UpstreamProtocol,
    UpstreamTls, UpstreamUrl,
};
pub use error::GatewayError;
pub use gateway::{Gateway, GatewayBody, Limiter};
pub use http_section::HttpSection;
pub use proxy::Proxy;
pub use reload::{Reload, ReloadError};
pub use run::{Loaded, Running, load, run, start};
pub use upstream::Upstream;
