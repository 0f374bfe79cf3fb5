//! # Floodgate on Redis
//!
//! A [`Backend`](floodgate_policy::Backend) keeping rate limiting state in
//! Redis (a single server, a primary managed by Redis Sentinel, or Redis
//! Cluster), so that every instance of a service shares one set of
//! counters.
//!
//! * **Every algorithm**, with the in-memory algorithms' exact semantics:
//!   GCRA / token bucket / leaky meter, fixed window, sliding window (two
//!   windows or N sub-windows), sliding log, the nginx shaper and
//!   concurrency limits, weighted costs, penalty modes and block
//!   durations. Each decision is
//!   one atomic Lua script call; the scripts compute in whole microseconds
//!   with exact integer arithmetic, so on microsecond-aligned times a
//!   decision equals the in-memory one, durations rounded up to whole µs.
//!   [`validate`] rejects the few limits that cannot be represented exactly.
//! * **Several limits atomically**: a batch is all-or-nothing on a single
//!   server, and per hash slot on a cluster (a group's keys share a slot).
//! * **One clock**: the Redis server's by default ([`TimeSource`]).
//! * **Keys expire by themselves** when their state becomes equal to a
//!   fresh key's, never earlier.
//! * **Resilience**: a timeout on every call, a circuit breaker and a
//!   [`FailurePolicy`] ([`ResilientBackend`]), globally or per rule
//!   (`Item::on_failure`), plus an optional local over-limit cache; with
//!   Sentinel, failovers followed by themselves.
//!
//! ```no_run
//! use floodgate::{Apply, Decision, Outcome, Timestamp};
//! use floodgate::algorithms::{AnyLimit, Gcra};
//! use floodgate_policy::{Backend, Item};
//! use floodgate_redis::{Mode, RedisBackend, RedisConfig, ResilientBackend};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = RedisConfig::new("10.0.0.5:6379", Mode::Single)?;
//! let backend = ResilientBackend::new(RedisBackend::connect(&config).await?, &config)?;
//! let limit = AnyLimit::from(Gcra::per_second(10)?);
//! let items = [Item { group: b"api", key: b"api:user-42", limit: &limit, cost: 1, on_failure: None, sync: None, permit: floodgate_policy::Permit::NONE, zone: None }];
//! let mut out = [Decision { outcome: Outcome::Never, limit: 0, remaining: 0,
//!     reset_after: Default::default(), retry_after: None }];
//! let decision = backend.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out).await?;
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/redis.md` for deployment, key layout, atomicity and failure
//! handling.

mod backend;
mod batch;
mod breaker;
mod cache;
mod config;
mod deferred;
mod encode;
mod error;
mod fallback;
mod issued;
mod keys;
mod memory_policy;
mod policy;
mod pool;
mod primary;
mod reply;
mod resilient;
mod rlqs_streams;
mod script;
mod sentinel;
mod sharing;
mod stats;
mod timer;
mod window;

pub use backend::{ConnectError, RedisBackend};
pub use breaker::BreakerState;
pub use config::{
    BreakerConfig, DEFAULT_CONCURRENCY_LEASE, FailurePolicy, Mode, RedisConfig, TimeSource,
    TlsFiles, parse_redis_urls, parse_sentinel_url,
};
pub use encode::validate;
pub use error::{ConfigError, UnsupportedLimit, UnsupportedMode};
pub use fallback::scale;
pub use keys::MAX_RAW_KEY;
pub use memory_policy::MemoryPolicy;
pub use resilient::ResilientBackend;
pub use sharing::{OverAdmission, over_admission, supports as supports_mode};
pub use stats::{Counter, RedisStats, ResilienceStats, SharingStats};
