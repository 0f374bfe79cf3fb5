//! The clock of the decisions made here: the caller's time with
//! client-supplied time, otherwise an estimate of Redis's clock (the source
//! of truth for every instance): this process's monotonic clock plus an
//! offset. Every reply brackets the offset: Redis read its clock after its
//! request left and before its answer arrived, so Redis's time minus the
//! instant the request left is an upper bound, and minus the instant the
//! answer arrived a lower bound. The estimate is the tightest upper bound
//! seen (an old one grown by the clocks' possible drift since), replaced
//! whenever a reply shows it below Redis's clock (Redis's clock jumped, or
//! a failover brought another one): it runs ahead of Redis's by at most the
//! fastest round trip's way there, so a lease is never used past its end on
//! Redis's clock, and one slow reply (a server paused, a loaded machine)
//! never moves an instance's windows ahead of the fleet's. A small margin
//! covers the two clocks' drift over a lease.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use floodgate::Timestamp;

/// The least margin with Redis's clock (ns).
const SERVER_MARGIN: u64 = 1_000_000;

/// How fast two clocks may drift apart: 1 ns every `DRIFT` ns (100 ppm,
/// what a free-running crystal may drift).
const DRIFT: u64 = 10_000;

pub(crate) struct Clock {
    client: bool,
    epoch: Instant,
    /// Redis's clock minus this process's (ns); 0 until a reply has shown
    /// it.
    offset: AtomicU64,
    /// The estimate's upper bound and when (this process's clock) it was
    /// seen.
    best: Mutex<Option<(u64, u64)>>,
    /// The latest caller's time decided at (ns; client-supplied time).
    latest: AtomicU64,
}

impl Clock {
    pub(super) fn new(client: bool) -> Self {
        Clock {
            client,
            epoch: Instant::now(),
            offset: AtomicU64::new(0),
            best: Mutex::new(None),
            latest: AtomicU64::new(0),
        }
    }

    /// This process's monotonic clock (ns since the backend was built).
    pub(super) fn local(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time to decide at, `None` until Redis's clock is known.
    pub(super) fn now(&self, caller: Timestamp) -> Option<Timestamp> {
        if self.client {
            self.latest.fetch_max(caller.as_nanos(), Ordering::Relaxed);
            return Some(caller);
        }
        match self.offset.load(Ordering::Relaxed) {
            0 => None,
            offset => Some(Timestamp::from_nanos(self.local().wrapping_add(offset))),
        }
    }

    /// The time a call to Redis made at `caller` is dated with: with
    /// client-supplied time, the latest caller's time decided at. Hits go
    /// to Redis tagged with the window they were admitted in, and Redis
    /// counts no hits of a window it has not reached: a caller's clock
    /// stepping back must not date a push before its hits. (With Redis's
    /// clock, Redis dates its calls itself.)
    pub(super) fn call_time(&self, caller: Timestamp) -> Timestamp {
        if !self.client {
            return caller;
        }
        let latest = self.latest.fetch_max(caller.as_nanos(), Ordering::Relaxed);
        Timestamp::from_nanos(latest.max(caller.as_nanos()))
    }

    /// A reply dated `redis_us` by Redis to a request sent at `sent` and
    /// answered at `got` (this process's clock).
    pub(super) fn observe(&self, sent: u64, got: u64, redis_us: u64) {
        if self.client {
            return;
        }
        let redis = redis_us.saturating_mul(1000);
        let high = redis.saturating_sub(sent);
        let low = redis.saturating_sub(got.max(sent));
        let mut best = self
            .best
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let offset = match *best {
            // The old bound, grown by the drift since, while it is still
            // the tighter one and not behind Redis's clock.
            Some((old, at)) => {
                let aged = old.saturating_add(got.saturating_sub(at) / DRIFT);
                if aged < low || aged >= high {
                    *best = Some((high, got));
                    high
                } else {
                    aged
                }
            }
            None => {
                *best = Some((high, got));
                high
            }
        };
        self.offset.store(offset.max(1), Ordering::Relaxed);
    }

    /// How much earlier than its end a lease of `duration` (ns) stops
    /// being used (ns): nothing with the caller's clock; with Redis's, the
    /// drift of two clocks over the lease, at least 1 ms.
    pub(super) fn margin(&self, duration: u64) -> u64 {
        if self.client {
            0
        } else {
            SERVER_MARGIN.max(duration / DRIFT)
        }
    }

    /// The offset in use (tests).
    #[cfg(test)]
    fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Redis's clock minus this process's, in these tests.
    const TRUE: u64 = 1_700_000_000_000 * MS;

    /// A reply whose request took `there` to reach Redis and `back` to
    /// come back, sent at `sent`: (sent, got, Redis's µs).
    fn reply(sent: u64, there: u64, back: u64) -> (u64, u64, u64) {
        (sent, sent + there + back, (TRUE + sent + there) / 1000)
    }

    fn seen(clock: &Clock, (sent, got, redis): (u64, u64, u64)) -> u64 {
        clock.observe(sent, got, redis);
        clock.offset() - TRUE
    }

    #[test]
    fn one_slow_reply_does_not_move_the_clock_ahead() {
        let clock = Clock::new(false);
        assert_eq!(seen(&clock, reply(10 * MS, MS, MS)), MS);
        // Redis paused for 300 ms before reading its clock: the estimate
        // stays where the fast reply put it (aged by the drift).
        let ahead = seen(&clock, reply(20 * MS, 300 * MS, MS));
        assert!(ahead < MS + MS / 20, "{ahead}");
        // A faster reply tightens it.
        assert_eq!(seen(&clock, reply(400 * MS, MS / 10, MS)), MS / 10);
    }

    #[test]
    fn the_estimate_never_falls_behind_redis() {
        let clock = Clock::new(false);
        seen(&clock, reply(0, MS, MS));
        // Redis's clock jumps 50 ms ahead: the next reply shows the
        // estimate behind it, which is replaced.
        let (sent, got, redis) = reply(100 * MS, 2 * MS, MS);
        clock.observe(sent, got, redis + 50_000);
        assert_eq!(clock.offset() - TRUE, 52 * MS);
        // And back: a bound below the estimate replaces it.
        assert_eq!(seen(&clock, reply(200 * MS, 3 * MS, MS)), 3 * MS);
    }

    #[test]
    fn an_old_bound_grows_with_the_drift() {
        let clock = Clock::new(false);
        seen(&clock, reply(0, MS / 10, 0));
        // 100 s later, a slower reply: the old bound grown by 100 ppm of
        // the time since (10 ms) is still the tighter one.
        let later = 100_000 * MS;
        let aged = MS / 10 + (later + 21 * MS - MS / 10) / DRIFT;
        assert_eq!(seen(&clock, reply(later, 20 * MS, MS)), aged);
    }
}
