//! Sliding window log: the exact count of requests in the last `window`.
//!
//! Each admitted unit of cost is remembered with its arrival time; a unit
//! that arrived at `a` counts while `now < a + window`. A request arriving
//! at a time earlier than the newest entry (a clock gone backwards) is
//! stamped with the newest entry's time: no time has passed. The log never
//! holds more than `limit` entries (in penalty mode it keeps the newest
//! `limit`, which decides exactly as the full log would), so memory per key
//! is bounded by `8 · limit` bytes.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::error::{ConfigError, check_count, check_period};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape, per_window};

/// At most `limit` in any interval of length `window`, exactly.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::SlidingLog;
/// use std::time::Duration;
///
/// // The login brute-force limit: 5 attempts per 15 minutes.
/// let log = SlidingLog::new(5, Duration::from_secs(900)).unwrap();
/// let mut s = log.fresh();
/// for i in 0..5 {
///     assert!(log.decide(&mut s, Timestamp::from_secs(i * 60), 1, Apply::Commit).is_allowed());
/// }
/// let d = log.decide(&mut s, Timestamp::from_secs(300), 1, Apply::Commit);
/// // The first attempt (t = 0) leaves the window at t = 900.
/// assert_eq!(d.retry_after, Some(Duration::from_secs(600)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window: u64,
}

/// Arrival times (ns) of the counted units, oldest first.
pub type LogState = VecDeque<u64>;

impl SlidingLog {
    /// `limit` per sliding `window`. The limit is also the log's capacity per
    /// key, so it is capped at 1 000 000.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        let limit = check_count("limit", limit)?;
        if limit > 1_000_000 {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "a sliding log stores one timestamp per request, so its limit must be at most 1000000 (got {limit}); use a sliding window counter"
                ),
            ));
        }
        Ok(SlidingLog {
            limit,
            window: check_period("window", window)?,
        })
    }

    /// The count per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// How long a unit that arrived at `a` still counts (it counts at `now`).
    fn until_gone(&self, a: u64, now: u64) -> Duration {
        Duration::from_nanos(match a.checked_sub(now) {
            Some(ahead) => ahead.saturating_add(self.window),
            None => self.window.saturating_sub(now - a),
        })
    }

    fn push(&self, log: &mut LogState, at: u64, cost: u64) {
        let keep = self.limit as usize;
        // Only the newest `limit` entries can matter.
        let cost = (cost as usize).min(keep);
        let overflow = (log.len() + cost).saturating_sub(keep);
        log.drain(..overflow);
        log.extend(std::iter::repeat_n(at, cost));
    }
}

impl Shape for SlidingLog {
    fn name(&self) -> &'static str {
        "sliding_log"
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit,
            window: Some(self.window()),
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        None
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        per_window(f, self.limit, self.window())
    }
}

impl Algorithm for SlidingLog {
    type State = LogState;

    fn fresh(&self) -> LogState {
        VecDeque::new()
    }

    fn decide(&self, log: &mut LogState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let now = now.as_nanos();
        // The log is sorted: the units that have left the window come first.
        // Only a charge drops them.
        let expired = |a: &u64| now.saturating_sub(*a) >= self.window;
        // Usually none or a few have expired since the last charge: look at
        // the front first, and search the rest only after a long pause.
        let mut gone = log.iter().take(8).take_while(|a| expired(a)).count();
        if gone == 8 {
            gone = log.partition_point(expired);
        }
        let held = (log.len() - gone) as u64;
        let (outcome, charge) = if cost > self.limit {
            (Outcome::Never, false)
        } else if held + cost <= self.limit {
            (Outcome::Allowed, apply.charge_if_allowed())
        } else {
            (Outcome::Denied, apply.charge_if_denied())
        };
        if charge && cost > 0 {
            log.drain(..gone);
            gone = 0;
            // A clock behind the newest entry counts as no time passed, which
            // also keeps the log sorted.
            let at = log.back().map_or(now, |&newest| newest.max(now));
            self.push(log, at, cost);
        }
        let held = log.range(gone..);
        let retry_after = (outcome == Outcome::Denied).then(|| {
            // The k-th oldest unit must leave the window first.
            let k = (held.len() as u64 + cost - self.limit) as usize;
            self.until_gone(log[gone + k - 1], now)
        });
        let reset_after = held
            .last()
            .map_or(Duration::ZERO, |&a| self.until_gone(a, now));
        Decision {
            outcome,
            limit: self.limit,
            // (A log kept from a larger limit may hold more than `limit`.)
            remaining: self.limit.saturating_sub((log.len() - gone) as u64),
            reset_after,
            retry_after,
        }
    }

    fn idle_at(&self, log: &LogState, now: Timestamp) -> Timestamp {
        match log.back() {
            Some(&a) => Timestamp::from_nanos(a.saturating_add(self.window)),
            None => now,
        }
    }
}
