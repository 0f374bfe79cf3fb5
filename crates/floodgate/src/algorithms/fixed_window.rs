//! Fixed window counter: at most `limit` per window, windows aligned to the
//! clock's epoch (`window_start = now − now mod window`, as Envoy's rate
//! limit service computes it), the count resetting at each boundary.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::error::{ConfigError, check_count, check_period};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape, per_window};

/// At most `limit` per epoch-aligned window of fixed length.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::FixedWindow;
/// use std::time::Duration;
///
/// let per_minute = FixedWindow::new(2, Duration::from_secs(60)).unwrap();
/// let mut s = per_minute.fresh();
/// let t = Timestamp::from_secs(125); // 5 s into the window [120, 180)
/// assert!(per_minute.decide(&mut s, t, 2, Apply::Commit).is_allowed());
/// let d = per_minute.decide(&mut s, t, 1, Apply::Commit);
/// assert_eq!(d.retry_after, Some(Duration::from_secs(55)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: u64,
}

/// The current window's start (ns) and count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowState {
    start: u64,
    count: u64,
}

impl WindowState {
    /// The state of a window starting at `start` holding `count` (for a
    /// backend that keeps the state elsewhere and decides a copy here).
    pub fn new(start: Timestamp, count: u64) -> Self {
        WindowState {
            start: start.as_nanos(),
            count,
        }
    }

    /// The count in the window that starts at [`WindowState::start`].
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The start of the window the count belongs to.
    pub fn start(&self) -> Timestamp {
        Timestamp::from_nanos(self.start)
    }
}

impl FixedWindow {
    /// `limit` per `window`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        Ok(FixedWindow {
            limit: check_count("limit", limit)?,
            window: check_period("window", window)?,
        })
    }

    /// A window admitting nothing (a limit of 0, envoyproxy/ratelimit's
    /// `requests_per_unit: 0`): every request of cost 1 or more is
    /// [`Outcome::Never`], and a check (cost 0) is denied once a forced
    /// charge (penalty mode) has counted something in the window.
    ///
    /// ```
    /// use floodgate::{Algorithm, Apply, Timestamp};
    /// use floodgate::algorithms::FixedWindow;
    /// use std::time::Duration;
    ///
    /// let closed = FixedWindow::closed(Duration::from_secs(60)).unwrap();
    /// let mut s = closed.fresh();
    /// let t = Timestamp::from_secs(120);
    /// assert!(closed.decide(&mut s, t, 0, Apply::Commit).is_allowed());
    /// assert!(closed.decide(&mut s, t, 1, Apply::Force).is_denied());
    /// // Counted: a check now finds the window over its limit.
    /// assert!(closed.decide(&mut s, t, 0, Apply::Commit).is_denied());
    /// ```
    pub fn closed(window: Duration) -> Result<Self, ConfigError> {
        Ok(FixedWindow {
            limit: 0,
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
}

impl Shape for FixedWindow {
    fn name(&self) -> &'static str {
        "fixed_window"
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit,
            window: Some(self.window()),
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        Some(self.window())
    }

    /// The count starts afresh at every window's end.
    fn reset_window(&self) -> Option<Duration> {
        Some(self.window())
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        per_window(f, self.limit, self.window())
    }
}

impl Algorithm for FixedWindow {
    type State = WindowState;

    fn fresh(&self) -> WindowState {
        WindowState::default()
    }

    #[inline]
    fn decide(&self, s: &mut WindowState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let now = now.as_nanos();
        let current = now - now % self.window;
        // The window holding `now`, as seen from the state; only a charge
        // stores it. A clock behind the stored window counts as its start.
        let (start, mut count) = if current > s.start {
            (current, 0)
        } else {
            (s.start, s.count)
        };
        let window_end = Duration::from_nanos(self.window - (now.max(start) - start));
        let (outcome, retry_after) = if apply == Apply::Refund {
            // Only the current window holds units to give back.
            if cost > 0 && count > 0 {
                count = count.saturating_sub(cost);
                *s = WindowState { start, count };
            }
            (Outcome::Allowed, None)
        } else if cost > self.limit {
            // No window can admit it; a forced charge (penalty mode) still
            // counts it, as envoyproxy/ratelimit's INCRBY does, so the
            // window stays over its limit until it ends.
            if cost > 0 && apply.charge_if_denied() {
                count = count.saturating_add(cost);
                *s = WindowState { start, count };
            }
            (Outcome::Never, None)
        } else if cost == 0 && count > self.limit {
            // A check on a window that forced charges took past its limit:
            // over until the window ends.
            (Outcome::Denied, Some(window_end))
        } else if cost == 0 || count.saturating_add(cost) <= self.limit {
            if cost > 0 && apply.charge_if_allowed() {
                count += cost;
                *s = WindowState { start, count };
            }
            (Outcome::Allowed, None)
        } else {
            if apply.charge_if_denied() {
                count = count.saturating_add(cost);
                *s = WindowState { start, count };
            }
            (Outcome::Denied, Some(window_end))
        };
        Decision {
            outcome,
            limit: self.limit,
            remaining: self.limit.saturating_sub(count),
            // Nothing counted: the quota is already full.
            reset_after: if count == 0 {
                Duration::ZERO
            } else {
                window_end
            },
            retry_after,
        }
    }

    fn idle_at(&self, s: &WindowState, now: Timestamp) -> Timestamp {
        if s.count == 0 {
            now
        } else {
            Timestamp::from_nanos(s.start.saturating_add(self.window))
        }
    }
}
