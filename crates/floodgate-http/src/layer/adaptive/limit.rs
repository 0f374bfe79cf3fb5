//! Admission under the adaptive limit: an atomic in-flight count compared
//! with an atomic limit per priority class; the controller runs when a
//! completion closes a control interval, under a lock nobody waits for.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::Timestamp;

use super::super::config::Adaptive;
use super::admit::Slots;
use super::controller::Controller;
use super::gauges::Gauges;
use super::window::OpenWindow;

/// A request's class: lower classes are shed first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Admitted up to the whole limit.
    Critical = 0,
    /// Admitted while fewer than `default_share` of the limit are in flight.
    #[default]
    Default = 1,
    /// Admitted while fewer than `sheddable_share` of the limit are in
    /// flight.
    Sheddable = 2,
}

impl Priority {
    /// Its `class` label on `/metrics`.
    pub const fn label(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Default => "default",
            Priority::Sheddable => "sheddable",
        }
    }
}

/// How an admitted request ended, as the controller reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// It succeeded: its latency is a sample.
    Ok,
    /// It failed as an overloaded upstream fails (a 502, 503 or 504, a
    /// timeout, an error of the service): an overload signal.
    Overloaded,
    /// It ended without telling anything (the client went away).
    Cancelled,
}

/// An admitted request's place under the limit, given back by
/// [`AdaptiveLimit::release`] exactly once.
#[derive(Debug)]
#[must_use = "a ticket holds its place until released"]
pub struct Ticket {
    pub(super) start: Timestamp,
}

/// The limit of a class admitted below `share` of `limit` (at least 1).
pub(super) fn class_limit(limit: usize, share: f64) -> usize {
    ((limit as f64 * share).round() as usize).max(1)
}

/// An adaptive concurrency limit (see the [module docs](super)).
#[derive(Debug)]
pub struct AdaptiveLimit {
    pub(super) in_flight: AtomicUsize,
    /// The limit of each [`Priority`], by its index.
    limits: [AtomicUsize; 3],
    /// The queue for requests over their class's limit, if configured.
    pub(super) slots: Slots,
    draining: AtomicBool,
    /// When the current drain began (nanoseconds).
    drain_from: AtomicU64,
    updates: AtomicU64,
    window: OpenWindow,
    controller: Mutex<Controller>,
    /// The current interval's least length, nanoseconds...
    interval: AtomicU64,
    /// ...and least number of completions.
    min_samples: AtomicU64,
    pub(super) gauges: Gauges,
}

impl AdaptiveLimit {
    /// A limit at `cfg.initial`, its first interval opening at `now`.
    pub fn new(cfg: Adaptive, now: Timestamp) -> Self {
        let controller = Controller::new(cfg);
        let limit = AdaptiveLimit {
            in_flight: AtomicUsize::new(0),
            limits: Default::default(),
            slots: Slots::new(cfg.queue),
            draining: AtomicBool::new(false),
            drain_from: AtomicU64::new(0),
            updates: AtomicU64::new(0),
            window: OpenWindow::default(),
            interval: AtomicU64::new(0),
            min_samples: AtomicU64::new(0),
            controller: Mutex::new(controller.clone()),
            gauges: Gauges::new(),
        };
        limit.window.start.store(now.as_nanos(), Ordering::Relaxed);
        limit.publish(&controller, now);
        limit
    }

    /// Admits a request of class `p` arriving at `now` if fewer than its
    /// class's limit are in flight (whatever waits in the queue: see
    /// [`admit`](Self::admit)).
    #[inline]
    pub fn try_acquire(&self, p: Priority, now: Timestamp) -> Option<Ticket> {
        let max = self.limits[p as usize].load(Ordering::Relaxed);
        let add = |n: usize| (n < max).then_some(n + 1);
        // Sequentially consistent with the queue's count of waiters (see
        // `Slots`): a slot freed is seen by a waiter or its releaser.
        let admitted = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, add);
        admitted.ok().map(|_| Ticket { start: now })
    }

    /// Gives back an admitted request's place at `now`, counting how it
    /// ended; closes the control interval when it is over.
    #[inline]
    pub fn release(&self, ticket: Ticket, now: Timestamp, how: Completion) {
        let in_flight = self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.slots.waiting() > 0 {
            self.dispatch(now);
        }
        // A drain measures only what it admitted itself.
        let before_drain = self.draining.load(Ordering::Relaxed)
            && ticket.start.as_nanos() < self.drain_from.load(Ordering::Relaxed);
        if how != Completion::Cancelled {
            self.window.complete(in_flight);
            if !before_drain {
                let latency = now.as_nanos().saturating_sub(ticket.start.as_nanos());
                self.window.add(latency, how == Completion::Ok);
            }
        }
        if self.ready(now) {
            self.close_interval(now);
        }
    }

    fn ready(&self, now: Timestamp) -> bool {
        let interval = self.interval.load(Ordering::Relaxed);
        let min_samples = self.min_samples.load(Ordering::Relaxed);
        self.window.ready(now, interval, min_samples)
    }

    /// Runs the controller on the closed interval, unless another
    /// completion is doing it (never waits for the lock).
    #[cold]
    fn close_interval(&self, now: Timestamp) {
        let Ok(mut c) = self.controller.try_lock() else {
            return;
        };
        if !self.ready(now) {
            return;
        }
        let window = self.window.take(now);
        c.update(&window);
        self.gauges.measured(window.mean());
        self.publish(&c, now);
        self.updates.fetch_add(1, Ordering::Relaxed);
    }

    /// Stores the limit of each class for admission. A drain lowers the
    /// limit of the default and sheddable classes; the critical class
    /// keeps the estimate (a drain costs it nothing).
    fn publish(&self, c: &Controller, now: Timestamp) {
        let (limit, cfg) = (c.limit(), c.settings());
        let by_class = [
            c.estimate(),
            class_limit(limit, cfg.default_share),
            class_limit(limit, cfg.sheddable_share),
        ];
        for (slot, v) in self.limits.iter().zip(by_class) {
            slot.store(v, Ordering::Relaxed);
        }
        if c.draining() && !self.draining.load(Ordering::Relaxed) {
            self.drain_from.store(now.as_nanos(), Ordering::Relaxed);
        }
        self.draining.store(c.draining(), Ordering::Relaxed);
        let interval = u64::try_from(c.interval().as_nanos()).unwrap_or(u64::MAX);
        self.interval.store(interval, Ordering::Relaxed);
        self.min_samples.store(c.min_samples(), Ordering::Relaxed);
        self.gauges
            .publish(c.limit(), self.in_flight(), c.baseline());
        self.slots.measured(c.rate());
        if self.slots.waiting() > 0 {
            self.dispatch(now);
        }
    }

    /// The current limit (of the critical class: the whole limit).
    pub fn limit(&self) -> usize {
        self.limits[Priority::Critical as usize].load(Ordering::Relaxed)
    }

    /// Requests admitted and not released.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Control intervals closed so far.
    pub fn updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }

    /// The learned no-load latency (none until measured).
    pub fn baseline(&self) -> Option<Duration> {
        self.controller.lock().ok().and_then(|c| c.baseline())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(initial: usize) -> AdaptiveLimit {
        let cfg = Adaptive {
            min: 1,
            initial,
            ..Adaptive::default()
        };
        AdaptiveLimit::new(cfg, Timestamp::ZERO)
    }

    #[test]
    fn admits_exactly_up_to_each_class_limit() {
        let l = limit(10);
        let now = Timestamp::ZERO;
        let sheddable: Vec<_> = (0..10)
            .map_while(|_| l.try_acquire(Priority::Sheddable, now))
            .collect();
        assert_eq!(sheddable.len(), 5);
        let default: Vec<_> = (0..10)
            .map_while(|_| l.try_acquire(Priority::Default, now))
            .collect();
        assert_eq!(default.len(), 3);
        let critical: Vec<_> = (0..10)
            .map_while(|_| l.try_acquire(Priority::Critical, now))
            .collect();
        assert_eq!((critical.len(), l.in_flight()), (2, 10));
        for t in sheddable.into_iter().chain(default).chain(critical) {
            l.release(t, now, Completion::Cancelled);
        }
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn never_more_in_flight_than_the_limit_under_contention() {
        use std::sync::atomic::AtomicUsize;
        // Four threads, a limit of two.
        let l = limit(2);
        let (holders, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for i in 0..4u64 {
                let (l, holders, most) = (&l, &holders, &most);
                s.spawn(move || {
                    for n in 0..20_000u64 {
                        let now = Timestamp::from_nanos(i * 1_000_000_000 + n);
                        let Some(t) = l.try_acquire(Priority::Critical, now) else {
                            continue;
                        };
                        let held = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(held, Ordering::SeqCst);
                        for _ in 0..50 {
                            std::hint::spin_loop();
                        }
                        holders.fetch_sub(1, Ordering::SeqCst);
                        l.release(t, now, Completion::Cancelled);
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 2);
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn the_smallest_limit_admits_one_of_each_class() {
        let l = limit(1);
        let t = l.try_acquire(Priority::Sheddable, Timestamp::ZERO).unwrap();
        assert!(l.try_acquire(Priority::Critical, Timestamp::ZERO).is_none());
        l.release(t, Timestamp::ZERO, Completion::Ok);
        assert!(l.try_acquire(Priority::Default, Timestamp::ZERO).is_some());
    }
}
