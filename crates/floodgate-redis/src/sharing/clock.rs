//! The clock of the decisions made here: the caller's time with
//! client-supplied time, otherwise an estimate of Redis's clock (the source
//! of truth for every instance): this process's monotonic clock plus the
//! offset the last reply showed, Redis's time minus the instant its request
//! left. Redis read its clock after the request left, so the estimate runs
//! ahead of Redis's by at most that request's way there: a lease is never
//! used past its end on Redis's clock, whatever the instances' own clocks
//! say. A small margin covers the two clocks' drift over a lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use floodgate::Timestamp;

/// The least margin with Redis's clock (ns).
const SERVER_MARGIN: u64 = 1_000_000;

pub(crate) struct Clock {
    client: bool,
    epoch: Instant,
    /// Redis's clock minus this process's (ns, wrapping); 0 until a reply
    /// has shown it.
    offset: AtomicU64,
}

impl Clock {
    pub fn new(client: bool) -> Self {
        Clock {
            client,
            epoch: Instant::now(),
            offset: AtomicU64::new(0),
        }
    }

    /// This process's monotonic clock (ns since the backend was built).
    pub fn local(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time to decide at, `None` until Redis's clock is known.
    pub fn now(&self, caller: Timestamp) -> Option<Timestamp> {
        if self.client {
            return Some(caller);
        }
        match self.offset.load(Ordering::Relaxed) {
            0 => None,
            offset => Some(Timestamp::from_nanos(self.local().wrapping_add(offset))),
        }
    }

    /// A reply dated `redis_us` by Redis to a request sent at `sent`
    /// (this process's clock).
    pub fn observe(&self, sent: u64, redis_us: u64) {
        if self.client {
            return;
        }
        let offset = redis_us.saturating_mul(1000).wrapping_sub(sent);
        self.offset.store(offset.max(1), Ordering::Relaxed);
    }

    /// How much earlier than its end a lease of `duration` (ns) stops
    /// being used (ns): nothing with the caller's clock; with Redis's, the
    /// drift of two clocks over the lease at 100 ppm (what a free-running
    /// crystal may drift), at least 1 ms.
    pub fn margin(&self, duration: u64) -> u64 {
        if self.client {
            0
        } else {
            SERVER_MARGIN.max(duration / 10_000)
        }
    }
}
