//! A circuit breaker: after `failure_threshold` consecutive failures it
//! opens and keeps requests away from Redis for `cool_down`; then it lets a
//! single probe through (half-open). A probe that succeeds closes it; one
//! that fails (or is abandoned) opens it for another cool-down. Each change
//! of state is told to its [watchers](Breaker::watch) as it happens.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::watch;

use crate::BreakerConfig;
use crate::stats::ResilienceStats;

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests go to Redis.
    Closed,
    /// Requests get the failure policy until the cool-down ends.
    Open,
    /// One probe is in flight; other requests get the failure policy.
    HalfOpen,
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

pub(crate) struct Breaker {
    state: AtomicU8,
    failures: AtomicU32,
    /// Nanoseconds since `epoch` at which an open breaker may probe.
    retry_at: AtomicU64,
    epoch: Instant,
    config: BreakerConfig,
    /// Told of every change of state (readiness follows it).
    changes: watch::Sender<()>,
}

/// Permission to call Redis.
pub(crate) enum Pass<'a> {
    /// The breaker is closed.
    Call,
    /// This call is the half-open probe; it must report its result.
    Probe(ProbeGuard<'a>),
}

/// Re-opens the breaker if the probe is dropped without a result (its
/// caller gave up).
pub(crate) struct ProbeGuard<'a> {
    breaker: &'a Breaker,
    stats: &'a ResilienceStats,
    done: bool,
}

impl ProbeGuard<'_> {
    pub(crate) fn finish(mut self, ok: bool) {
        self.done = true;
        if ok {
            self.breaker.close(self.stats);
        } else {
            self.breaker.reopen();
        }
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.breaker.reopen();
        }
    }
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Breaker {
            state: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            retry_at: AtomicU64::new(0),
            epoch: Instant::now(),
            config,
            changes: watch::Sender::new(()),
        }
    }

    /// A receiver marked changed each time the state changes (read
    /// [`state`](Self::state) then: it is never older than the mark).
    pub(crate) fn watch(&self) -> watch::Receiver<()> {
        self.changes.subscribe()
    }

    /// Tells the watchers, after a change of state (rare: never on a
    /// decision that leaves the state as it is).
    fn changed(&self) {
        self.changes.send_replace(());
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// When a cool-down starting now ends (nanoseconds since `epoch`): a
    /// cool-down beyond what the clock can count (about 584 years) never
    /// ends.
    fn cool_down_end(&self) -> u64 {
        let cool_down = u64::try_from(self.config.cool_down.as_nanos()).unwrap_or(u64::MAX);
        self.now().saturating_add(cool_down)
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Whether this call may go to Redis, and as what.
    pub(crate) fn pass<'a>(&'a self, stats: &'a ResilienceStats) -> Option<Pass<'a>> {
        match self.state.load(Ordering::Acquire) {
            CLOSED => Some(Pass::Call),
            OPEN if self.now() >= self.retry_at.load(Ordering::Acquire) => self
                .state
                .compare_exchange(OPEN, HALF_OPEN, Ordering::AcqRel, Ordering::Acquire)
                .ok()
                .map(|_| {
                    self.changed();
                    stats.breaker_probes.inc();
                    Pass::Probe(ProbeGuard {
                        breaker: self,
                        stats,
                        done: false,
                    })
                }),
            _ => None,
        }
    }

    /// A call made while closed succeeded.
    pub(crate) fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A call made while closed failed.
    pub(crate) fn failure(&self, stats: &ResilienceStats) {
        let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= self.config.failure_threshold {
            self.retry_at.store(self.cool_down_end(), Ordering::Release);
            if self
                .state
                .compare_exchange(CLOSED, OPEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.changed();
                stats.breaker_opened.inc();
            }
        }
    }

    fn close(&self, stats: &ResilienceStats) {
        self.failures.store(0, Ordering::Release);
        if self
            .state
            .compare_exchange(HALF_OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.changed();
            stats.breaker_closed.inc();
        }
    }

    /// Opens the breaker now, with a probe allowed at once (Redis is known
    /// to be unreachable, as at start-up).
    pub(crate) fn open_now(&self, stats: &ResilienceStats) {
        self.retry_at.store(self.now(), Ordering::Release);
        let was = self.state.swap(OPEN, Ordering::AcqRel);
        if was != OPEN {
            self.changed();
        }
        if was == CLOSED {
            stats.breaker_opened.inc();
        }
    }

    fn reopen(&self) {
        self.retry_at.store(self.cool_down_end(), Ordering::Release);
        if self.state.swap(OPEN, Ordering::AcqRel) != OPEN {
            self.changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn opens_probes_and_closes() {
        let stats = ResilienceStats::default();
        let b = Breaker::new(BreakerConfig {
            failure_threshold: 2,
            cool_down: Duration::from_millis(20),
        });
        assert!(matches!(b.pass(&stats), Some(Pass::Call)));
        b.failure(&stats);
        b.success();
        b.failure(&stats);
        assert_eq!(b.state(), BreakerState::Closed);
        b.failure(&stats);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.pass(&stats).is_none());
        std::thread::sleep(Duration::from_millis(25));
        let Some(Pass::Probe(p)) = b.pass(&stats) else {
            panic!("expected a probe")
        };
        // Only one probe at a time.
        assert!(b.pass(&stats).is_none());
        drop(p); // abandoned: open again
        assert_eq!(b.state(), BreakerState::Open);
        std::thread::sleep(Duration::from_millis(25));
        let Some(Pass::Probe(p)) = b.pass(&stats) else {
            panic!("expected a probe")
        };
        p.finish(true);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(stats.breaker_opened.get(), 1);
        assert_eq!(stats.breaker_closed.get(), 1);
    }

    /// Watchers are told of each change of state, and only of those.
    #[test]
    fn watchers_are_told_of_each_change() {
        let stats = ResilienceStats::default();
        let b = Breaker::new(BreakerConfig {
            failure_threshold: 1,
            cool_down: Duration::ZERO,
        });
        let mut w = b.watch();
        let mut told = || {
            w.has_changed().unwrap() && {
                w.mark_unchanged();
                true
            }
        };
        b.success();
        assert!(!told(), "no change, nothing told");
        b.failure(&stats);
        assert!(told(), "opened");
        b.failure(&stats);
        assert!(!told(), "open already");
        let Some(Pass::Probe(p)) = b.pass(&stats) else {
            panic!("expected a probe")
        };
        assert!(told(), "half-open");
        p.finish(false);
        assert!(told(), "open again");
        let Some(Pass::Probe(p)) = b.pass(&stats) else {
            panic!("expected a probe")
        };
        assert!(told());
        p.finish(true);
        assert!(told(), "closed");
        b.open_now(&stats);
        assert!(told(), "opened at once");
    }

    /// A cool-down too long to count in nanoseconds keeps the breaker open,
    /// never truncated to a short one (2^64 ns + 0.29 s used to wrap to
    /// 0.29 s).
    #[test]
    fn huge_cool_downs_saturate() {
        let stats = ResilienceStats::default();
        for cool_down in [
            Duration::from_nanos(u64::MAX) + Duration::from_millis(1),
            Duration::from_secs(18_446_744_074),
            Duration::MAX,
        ] {
            let b = Breaker::new(BreakerConfig {
                failure_threshold: 1,
                cool_down,
            });
            assert_eq!(b.cool_down_end(), u64::MAX, "{cool_down:?}");
            b.failure(&stats);
            assert_eq!(b.state(), BreakerState::Open);
            assert_eq!(b.retry_at.load(Ordering::Acquire), u64::MAX);
            std::thread::sleep(Duration::from_millis(1));
            assert!(b.pass(&stats).is_none(), "{cool_down:?}");
            // The probe path (re-opening) saturates the same way.
            b.retry_at.store(0, Ordering::Release);
            let Some(Pass::Probe(p)) = b.pass(&stats) else {
                panic!("expected a probe")
            };
            p.finish(false);
            assert_eq!(b.state(), BreakerState::Open);
            assert_eq!(b.retry_at.load(Ordering::Acquire), u64::MAX);
            assert!(b.pass(&stats).is_none());
        }
    }
}
