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
//!   rate-limit status — and counted by what broke
//!   (`floodgate_gateway_upstream_errors_total{kind}`: refused, timed
//!   out, TLS, reset, closed, protocol, …).
//! * Requests are counted by route template, outcome and status class
//!   (`floodgate_gateway_requests_total{route,outcome,status}`), from
//!   handles registered when the `http:` section is loaded: one atomic
//!   increment per request.
//! * Behind an L4 load balancer, the PROXY protocol header (v1 or v2) its
//!   trusted sources send gives the client address
//!   (`gateway.proxy_protocol`; see
//!   [`proxy_protocol`](floodgate_runtime::listener::proxy_protocol)).
//! * Slow clients are disconnected after the header timeout, request heads
//!   are bounded, request smuggling is rejected by hyper's parser,
//!   connections are capped, and shutdown drains requests in flight.
//! * The configuration is the Floodgate file: `gateway:` (this crate),
//!   `http:`, `store:`, `server:` and the policies; policies and `http:`
//!   are reloaded while running.
//!
//! [`load`] reads the configuration as `floodgate gateway` does, [`start`]
//! serves it in the background:
//!
//! ```
//! use floodgate_runtime::settings::{Env, Flags};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The service to protect (here the built-in demo upstream).
//! let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}", upstream.local_addr()?);
//! tokio::spawn(floodgate_gateway::demo::serve_demo(upstream, "hello\n".into()));
//!
//! // Each client address may send 2 requests a minute.
//! let dir = tempfile::tempdir()?;
//! let config = dir.path().join("gateway.yaml");
//! std::fs::write(&config, format!("
//! gateway: {{listen: 127.0.0.1:0, upstream: {{url: {url}}}}}
//! http: {{domain: api, descriptors: [[client_ip]]}}
//! domains:
//!   - domain: api
//!     descriptors:
//!       - key: remote_address
//!         rate_limit: {{requests: 2, per: 1m}}
//! "))?;
//! let flags = Flags::new().with("config", config.display().to_string());
//! let loaded = floodgate_gateway::load(&flags, &Env::new(&|_| None))?;
//! let running = floodgate_gateway::start(loaded, None).await?;
//!
//! let url = format!("http://{}/", running.addr());
//! for expected in [200, 200, 429] {
//!     assert_eq!(reqwest::get(&url).await?.status(), expected);
//! }
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/gateway.md`.

pub mod access;
mod body;
mod config;
mod connect;
mod connection;
pub mod demo;
mod error;
mod forward;
mod frontend;
mod gateway;
// Public for the fuzz targets only (its response parsing), not the API.
#[doc(hidden)]
pub mod h1;
// Public for the fuzz targets only (the request authority checks), not
// the API.
#[doc(hidden)]
pub mod host;
mod keyed;
mod pool;
mod proxy;
mod reload;
mod responses;
mod route_metrics;
mod run;
pub mod settings;
mod tls;
mod trace;
mod upgrade;
mod upload;
mod upstream;
mod upstream_errors;

pub use body::{BodyError, ProxyBody};
pub use config::{
    EncodedSlashes, Forwarding, GatewayConfig, HostHeader, ListenerLimits, ListenerTls,
    UpstreamConfig, UpstreamProtocol, UpstreamTls, UpstreamUrl,
};
pub use error::GatewayError;
pub use floodgate_http::HttpSection;
pub use frontend::{Parts, Proxying};
pub use gateway::{Gateway, Limiter};
pub use proxy::{Proxy, ProxyStats};
pub use reload::read_sections;
pub use run::{Loaded, Running, load, load_beside, run, start};

/// The files `floodgate gateway` reads when given none, the first that
/// exists: the deployment's, else the gateway's quick start (never the
/// decision service's, which has no `gateway:` section).
pub const DEFAULT_CONFIG: &[&str] = &["floodgate.yaml", "examples/gateway.yaml"];
pub use tls::TlsError;
pub use upstream::Upstream;
