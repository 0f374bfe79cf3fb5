//! A reference model of envoyproxy/ratelimit (the service with its Redis
//! backend, as of its `main` branch), written from its Go source, to compare
//! Floodgate's answers with field by field: the configuration it loads and
//! how it matches descriptors ([`config`]), and how it decides
//! ([`service`]): replaces, unlimited rules, shadow and quota modes, limit
//! overrides, hits addends, the counters it increments (by default every
//! matched one; with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, the ones
//! going over when any does), near-limit statistics, and every field of
//! the response, headers included. [`generate`] makes random
//! configurations and requests for it.
//!
//! Not modelled: the local over-limit cache (off by default there), the
//! per-second Redis, Memcached, dynamic metadata (off by default), and
//! expiry jitter (keys name their window, so expiry never changes an
//! answer).

pub mod config;
pub mod generate;
pub mod service;

pub use config::{Config, ConfigError, File, Node, RateLimit};
pub use generate::{Requests, Rng, Shape};
pub use service::{
    Code, Descriptor, Failure, RateLimitMsg, Request, Response, Service, Settings, Stats, Status,
};
