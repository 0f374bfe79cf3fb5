//! The budget of log lines from libraries: at most [`BURST`] in any
//! [`INTERVAL`], the rest counted and reported in one summary line.
//!
//! Libraries (hyper, h2, rustls, ...) log what one connection did wrong,
//! once per connection (h2's `recv_reset; remotely-reset pending-accept
//! streams reached limit`, at WARN, under an HTTP/2 rapid-reset flood):
//! left alone, a flood of hostile connections is a flood of log lines.

use std::sync::Mutex;
use std::time::Duration;

use floodgate::Timestamp;

/// Lines from libraries let through in one interval.
pub(super) const BURST: u32 = 5;

/// The interval of the budget, and the longest a summary waits.
pub(super) const INTERVAL: Duration = Duration::from_secs(10);

/// What becomes of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Logged.
    Pass,
    /// Dropped and counted; `first`: the first one since the count was
    /// last taken (a summary is due an interval later).
    Suppress {
        /// The first one since the last summary.
        first: bool,
    },
}

/// The budget; time is given by the caller.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval_nanos: u64,
    burst: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    window_start: u64,
    passed: u32,
    suppressed: u64,
}

impl Throttle {
    /// At most `burst` lines in an interval starting at the first line after the
    /// previous interval ended.
    pub(crate) fn new(interval: Duration, burst: u32) -> Throttle {
        Throttle {
            interval_nanos: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            burst,
            state: Mutex::new(State::default()),
        }
    }

    /// The verdict on a line logged at `now`. A clock gone backwards is
    /// the same interval, never a new budget.
    pub(crate) fn admit(&self, now: Timestamp) -> Verdict {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = now.as_nanos();
        if s.passed == 0 || now.saturating_sub(s.window_start) >= self.interval_nanos {
            s.window_start = now;
            s.passed = 0;
        }
        if s.passed < self.burst {
            s.passed += 1;
            return Verdict::Pass;
        }
        s.suppressed += 1;
        Verdict::Suppress {
            first: s.suppressed == 1,
        }
    }

    /// Lines suppressed since the last call.
    pub(crate) fn take_suppressed(&self) -> u64 {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut s.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn a_burst_passes_then_lines_are_counted_until_the_interval_ends() {
        let t = Throttle::new(Duration::from_secs(10), 3);
        for ms in [1000, 1001, 1002] {
            assert_eq!(t.admit(at(ms)), Verdict::Pass);
        }
        assert_eq!(t.admit(at(1003)), Verdict::Suppress { first: true });
        for ms in 1004..2000 {
            assert_eq!(t.admit(at(ms)), Verdict::Suppress { first: false });
        }
        assert_eq!(t.take_suppressed(), 997);
        assert_eq!(t.take_suppressed(), 0);
        // Counted again from one, still within the interval.
        assert_eq!(t.admit(at(10_999)), Verdict::Suppress { first: true });
        // A new interval, a new budget.
        assert_eq!(t.admit(at(11_000)), Verdict::Pass);
        assert_eq!(t.take_suppressed(), 1);
    }

    #[test]
    fn a_clock_gone_backwards_grants_no_new_budget() {
        let t = Throttle::new(Duration::from_secs(10), 1);
        assert_eq!(t.admit(at(50_000)), Verdict::Pass);
        assert_eq!(t.admit(at(1_000)), Verdict::Suppress { first: true });
        assert_eq!(t.admit(at(59_999)), Verdict::Suppress { first: false });
        assert_eq!(t.admit(at(60_000)), Verdict::Pass);
    }
}
