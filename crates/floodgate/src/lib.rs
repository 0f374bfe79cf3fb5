//! # Floodgate
//!
//! The core of Floodgate: for a key, a limit and a cost, *may this proceed,
//! and what should the client be told?*
//!
//! * Every algorithm: [GCRA / token bucket / leaky-bucket meter](algorithms::Gcra),
//!   the [nginx-compatible leaky-bucket shaper](algorithms::Shaper) (pass,
//!   delay or reject), the [fixed window](algorithms::FixedWindow), the exact
//!   [sliding log](algorithms::SlidingLog), the [sliding window
//!   counter](algorithms::SlidingWindow) (and its [N-sub-window
//!   variant](algorithms::SubWindowCounter)), and [in-flight
//!   limits](algorithms::Concurrency).
//! * Weighted costs (0 peeks; a cost that can never fit is
//!   [`Outcome::Never`]), exact `retry_after`, [penalty mode](Penalize), and
//!   several limits checked atomically ([tuples](algorithms::Limits) for one
//!   key, [`Store::decide_many`] across keys).
//! * A bounded, sharded, concurrent in-memory [`Store`], exact under
//!   contention, that forgets idle keys by itself and, when full, never
//!   evicts a key's restriction by default ([`store::WhenFull`]).
//! * Time from an injected [`Clock`]; no IO, no async runtime.
//!
//! ```
//! use floodgate::{RateLimiter, Outcome};
//! use floodgate::algorithms::{FixedWindow, Gcra};
//! use std::time::Duration;
//!
//! // 10 per second with bursts of 20, *and* 1000 per hour, per user.
//! let limiter: RateLimiter<String, _> = RateLimiter::new((
//!     Gcra::new(10, Duration::from_secs(1), 20).unwrap(),
//!     FixedWindow::new(1000, Duration::from_secs(3600)).unwrap(),
//! ));
//! let decision = limiter.check_n("user-42", 1);
//! match decision.outcome {
//!     Outcome::Allowed => { /* proceed */ }
//!     Outcome::Delayed(wait) => { /* proceed after `wait` */ }
//!     Outcome::Denied => { let _retry = decision.retry_after; /* 429 */ }
//!     Outcome::Never => { /* the cost exceeds the limit itself */ }
//! }
//! ```

mod algorithm;
pub mod algorithms;
mod arith;
mod decision;
mod error;
mod key;
mod limiter;
pub mod store;
mod time;

pub use algorithm::{Algorithm, Apply, Penalize};
pub use decision::{Decision, Outcome};
pub use error::{ConfigError, MAX_COUNT, MAX_PERIOD_NANOS};
pub use key::ToKey;
pub use limiter::{OwnedPermit, Permit, RateLimiter};
pub use store::{Store, StoreConfig, StoreStats};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};

/// The workspace README's examples, compiled and run as doc tests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
