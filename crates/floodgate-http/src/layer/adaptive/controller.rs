//! The controller: from what one control interval measured, the next
//! concurrency limit. Pure: no clock, no atomics; [`AdaptiveLimit`]
//! (super::AdaptiveLimit) feeds it each closed [`Window`].

use std::time::Duration;

use super::super::config::Adaptive;

/// The gradient never cuts the limit by more than half in one interval, so
/// one outlier window cannot collapse it.
const MIN_GRADIENT: f64 = 0.5;

/// What the requests that completed in one control interval measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Requests that succeeded.
    pub successes: u64,
    /// Their latencies added up, in nanoseconds.
    pub latency_sum: u64,
    /// Requests that failed as an overloaded upstream fails (a 502, 503 or
    /// 504, a timeout, an error of the service).
    pub errors: u64,
    /// The most requests in flight seen when one completed.
    pub peak_in_flight: usize,
    /// Requests that completed, samples or not (a drain's samples are
    /// only the requests it admitted).
    pub completed: u64,
    /// How long the interval lasted, in nanoseconds.
    pub elapsed: u64,
}

impl Window {
    /// The successes' mean latency, in nanoseconds (none without successes).
    pub(super) fn mean(&self) -> Option<f64> {
        (self.successes > 0).then(|| self.latency_sum as f64 / self.successes as f64)
    }

    fn total(&self) -> u64 {
        self.successes + self.errors
    }

    /// The share of the requests that failed (0 without requests).
    fn failed_share(&self) -> f64 {
        self.errors as f64 / self.total().max(1) as f64
    }

    /// Completions a second.
    fn rate(&self) -> f64 {
        self.completed as f64 * 1e9 / self.elapsed.max(1) as f64
    }
}

/// The gradient controller with a drained no-load baseline (see the
/// [module docs](super)).
#[derive(Clone, Debug)]
pub struct Controller {
    cfg: Adaptive,
    /// The estimated limit, before a drain lowers what is applied.
    limit: f64,
    /// The no-load mean latency, in nanoseconds (none until measured).
    baseline: Option<f64>,
    /// Intervals since the last drain.
    since_drain: u32,
    /// The current interval is a drain: 1 (shallow: the estimate over
    /// `1 + tolerance`) or 2 (deep: over `(1 + tolerance)^1.5`); 0: not a
    /// drain.
    draining: u8,
    /// Drains so far (every fourth one is deep).
    drains: u32,
    /// Deep drains in a row that lowered the baseline: each goes deeper
    /// by `√(1 + tolerance)`, the next one after one interval.
    descent: u8,
    /// The current interval is the first of a drain, or the first of all:
    /// it lets the queue go, and is not measured (requests admitted before
    /// would bias it; and of those admitted since, only the fast ones
    /// completed yet).
    flushing: bool,
    /// The last interval's mean latency, in nanoseconds.
    last_mean: f64,
    /// Completions a second, a moving average of the intervals that are
    /// not drains (one window's count is noisy).
    rate: f64,
    /// The mean latency of the last interval that was not a drain.
    before_drain: f64,
    /// The share of requests that fail without overload (measured when
    /// the baseline is: at the first measured interval, then a moving
    /// average over drains): a broken replica behind the upstream fails
    /// its share at any load, and only failures above it are overload's.
    background: f64,
}

impl Controller {
    /// A controller at `cfg.initial`, nothing measured.
    pub fn new(cfg: Adaptive) -> Self {
        Controller {
            limit: cfg.initial.clamp(cfg.min, cfg.max) as f64,
            cfg,
            baseline: None,
            since_drain: 0,
            draining: 0,
            drains: 0,
            descent: 0,
            flushing: true,
            last_mean: 0.0,
            rate: 0.0,
            before_drain: 0.0,
            background: 0.0,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Adaptive {
        &self.cfg
    }

    /// The limit to apply now: the estimate, or during a drain the estimate
    /// without its tolerated queue (at least `min`).
    pub fn limit(&self) -> usize {
        let depth = match self.draining {
            0 => 0.0,
            1 => 1.0,
            _ => 1.5 + 0.5 * f64::from(self.descent),
        };
        let limit = self.limit / (1.0 + self.cfg.tolerance).powf(depth);
        (limit.round() as usize).clamp(self.cfg.min, self.cfg.max)
    }

    /// The estimated limit, without a drain's cut: what the critical class
    /// keeps during a drain.
    pub fn estimate(&self) -> usize {
        (self.limit.round() as usize).clamp(self.cfg.min, self.cfg.max)
    }

    /// How long the next interval lasts at least: `interval`, and twice the
    /// last mean latency (an interval shorter than the latency would judge
    /// a change of the limit before the requests it admitted completed).
    pub fn interval(&self) -> Duration {
        let twice = Duration::from_nanos((self.last_mean * 2.0) as u64);
        self.cfg.interval.max(twice)
    }

    /// How many completions the next interval needs at least: a
    /// measurement of the baseline (the measuring half of a drain, the first
    /// interval measured) takes twice `min_samples` (one window is
    /// noisy, the baseline is kept for a while).
    pub fn min_samples(&self) -> u64 {
        let measures = (self.draining() || self.baseline.is_none()) && !self.flushing;
        let n = self.cfg.min_samples.max(1);
        if measures { n.saturating_mul(2) } else { n }
    }

    /// The learned no-load latency.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline.map(|b| Duration::from_nanos(b as u64))
    }

    /// Completions a second, a moving average over the intervals that are
    /// not drains (0: not measured yet).
    pub(super) fn rate(&self) -> f64 {
        self.rate
    }

    /// Whether the current interval is a drain (its samples must come from
    /// requests admitted since the drain began).
    pub fn draining(&self) -> bool {
        self.draining > 0
    }

    /// Takes in one closed interval; returns the limit to apply next.
    pub fn update(&mut self, w: &Window) -> usize {
        if w.total() == 0 {
            return self.limit();
        }
        self.last_mean = w.mean().unwrap_or(self.last_mean);
        if std::mem::take(&mut self.flushing) {
            return self.limit();
        }
        if self.draining() {
            self.end_drain(w);
            return self.limit();
        }
        self.before_drain = w.mean().unwrap_or(self.before_drain);
        self.rate = match self.rate {
            0.0 => w.rate(),
            r => r * 0.8 + w.rate() * 0.2,
        };
        let gradient = match (self.baseline, w.mean()) {
            (None, Some(mean)) => {
                self.baseline = Some(mean);
                self.background = w.failed_share();
                return self.limit();
            }
            (None, None) => self.adjust(f64::MAX, None, w),
            (Some(baseline), mean) => self.adjust(baseline, mean, w),
        };
        self.limit = self.limit.clamp(self.cfg.min as f64, self.cfg.max as f64);
        self.schedule_drain(gradient);
        self.limit()
    }

    /// Makes the next interval a drain every `probe_every` intervals, once
    /// the limit is settled (a gradient of at least `1 / (1 + tolerance)`:
    /// while the capacity falls, a drain would measure a queue it did not
    /// cause).
    fn schedule_drain(&mut self, gradient: f64) {
        let tol = self.cfg.tolerance;
        self.since_drain = self.since_drain.saturating_add(1);
        let settled = gradient >= 1.0 / (1.0 + tol);
        // Postponed three times at most: a baseline too low keeps the
        // gradient low, and only a drain corrects it.
        let due = match settled {
            true => self.cfg.probe_every,
            false => self.cfg.probe_every.saturating_mul(3),
        };
        if self.descent > 0 {
            self.since_drain = 0;
            (self.flushing, self.draining) = (true, 2);
        } else if self.cfg.probe_every > 0 && self.since_drain >= due {
            self.since_drain = 0;
            self.drains = self.drains.wrapping_add(1);
            self.flushing = true;
            self.draining = if self.drains % 4 == 0 { 2 } else { 1 };
        }
    }

    /// A drain's mean is the new baseline if the drain left the upstream
    /// idle at times (its throughput fell by `tolerance / 4` or more, its
    /// latency did not rise by as much: fewer requests in flight than
    /// workers, so no queue); else it only lowers it (a drain still queued
    /// would confirm a baseline too high: the limit then holds its latency
    /// at the target). A deep drain that lowered it by more than 5 % is
    /// followed by a deeper one, until one finds nothing lower.
    fn end_drain(&mut self, w: &Window) {
        let deep = self.draining == 2;
        self.draining = 0;
        // Slowly: a burst of failures met by a drain stays a signal.
        self.background = self.background * 0.75 + w.failed_share() * 0.25;
        let (Some(mean), Some(b)) = (w.mean(), self.baseline) else {
            self.descent = 0;
            return;
        };
        // Slower, and no slower to answer: workers idle. (Slower and
        // clearly slower to answer: the capacity fell meanwhile.)
        let tol = self.cfg.tolerance;
        let slower = w.rate() < self.rate * (1.0 - tol / 4.0);
        let idle = slower && mean <= self.before_drain * (1.0 + tol / 4.0);
        let lower = deep && !idle && mean < b * 0.95 && self.descent < 5;
        self.descent = if lower { self.descent + 1 } else { 0 };
        self.baseline = Some(if idle { mean } else { mean.min(b) });
    }

    /// The share of `w`'s requests that failed beyond the background
    /// share, less two standard errors of that share (a window of a
    /// hundred requests failing one in ten at random varies by ±3 %):
    /// what overload made fail.
    fn excess_failures(&self, w: &Window) -> f64 {
        if w.errors == 0 {
            return 0.0;
        }
        let p = self.background;
        let noise = 2.0 * (p * (1.0 - p) / w.total() as f64).sqrt();
        w.failed_share() - p - noise
    }

    /// Whether the limit was used: at some completion, at least half of the
    /// sheddable class's limit (the least any class can reach) in flight.
    fn used(&self, w: &Window) -> bool {
        (w.peak_in_flight as f64) >= self.limit * self.cfg.sheddable_share / 2.0
    }

    /// `limit · gradient + √limit` (no `√limit` while the gradient shrinks
    /// the limit: the floor is `min`), smoothed: the gradient is the target
    /// latency over the measured one, clamped to `[0.5, 1 + tolerance]`,
    /// at most 1 when the limit was not used (no growth while the demand
    /// is below it) or when requests failed (by their share). Returns the
    /// gradient.
    fn adjust(&mut self, baseline: f64, mean: Option<f64>, w: &Window) -> f64 {
        let tol = self.cfg.tolerance;
        // Faster than the baseline: the upstream got faster (half way: one
        // window is noisy).
        if let Some(mean) = mean.filter(|m| *m < baseline) {
            self.baseline = Some((baseline + mean) / 2.0);
        }
        let target = baseline * (1.0 + tol);
        let mut gradient = mean.map_or(MIN_GRADIENT, |m| target / m.max(1.0));
        gradient = gradient.clamp(MIN_GRADIENT, 1.0 + tol);
        let mut grow = self.used(w);
        let excess = self.excess_failures(w);
        if excess > 0.0 {
            gradient = gradient.min(1.0 - excess).max(MIN_GRADIENT);
            grow = false;
        }
        if !grow {
            gradient = gradient.min(1.0);
        }
        // Headroom to probe upwards only where there is no queue to shrink.
        let headroom = if grow && gradient >= 1.0 {
            self.limit.sqrt()
        } else {
            0.0
        };
        let estimate = self.limit * gradient + headroom;
        let a = self.cfg.smoothing;
        self.limit = self.limit * (1.0 - a) + estimate * a;
        gradient
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(successes: u64, mean_ms: u64, errors: u64, peak: usize) -> Window {
        Window {
            successes,
            latency_sum: successes * mean_ms * 1_000_000,
            errors,
            peak_in_flight: peak,
            completed: successes + errors,
            elapsed: 100_000_000,
        }
    }

    fn cfg() -> Adaptive {
        Adaptive {
            min: 2,
            max: 500,
            initial: 100,
            smoothing: 0.5,
            probe_every: 0,
            ..Adaptive::default()
        }
    }

    /// A controller past its first (flushed) interval, its baseline 10 ms.
    fn warmed(cfg: Adaptive) -> Controller {
        let mut c = Controller::new(cfg);
        c.update(&window(100, 99, 0, 100));
        c.update(&window(100, 10, 0, 100));
        assert_eq!(c.baseline(), Some(Duration::from_millis(10)));
        c
    }

    #[test]
    fn the_first_interval_is_not_measured() {
        let mut c = Controller::new(cfg());
        c.update(&window(100, 99, 0, 100));
        assert_eq!((c.baseline(), c.limit()), (None, 100));
    }

    #[test]
    fn grows_while_latency_is_at_its_baseline_and_the_limit_is_used() {
        let mut c = warmed(cfg());
        assert!(c.update(&window(100, 10, 0, 100)) > 100);
    }

    #[test]
    fn does_not_grow_when_demand_is_below_the_limit() {
        let mut c = warmed(cfg());
        assert_eq!(c.update(&window(100, 10, 0, 10)), 100);
    }

    #[test]
    fn halves_at_most_per_interval_and_never_below_min() {
        let mut c = warmed(cfg());
        let after = c.update(&window(100, 1000, 0, 100));
        assert_eq!(after, 75);
        for _ in 0..100 {
            c.update(&window(100, 1000, 0, 100));
        }
        assert_eq!(c.limit(), 2);
    }

    #[test]
    fn settles_where_latency_is_the_target() {
        let mut c = warmed(cfg());
        // 15 ms is the target (10 ms × 1.5): no change but the headroom.
        let limit = c.update(&window(100, 15, 0, 100));
        assert_eq!(limit, 105);
    }

    #[test]
    fn errors_shrink_the_limit_and_recovery_follows() {
        let mut c = warmed(cfg());
        for _ in 0..50 {
            c.update(&window(0, 0, 100, 100));
        }
        assert_eq!(c.limit(), 2);
        for _ in 0..30 {
            c.update(&window(100, 10, 0, 100));
        }
        assert!(c.limit() > 50, "{}", c.limit());
    }

    #[test]
    fn a_drain_lowers_the_limit_then_relearns_the_baseline() {
        let mut c = warmed(Adaptive {
            probe_every: 1,
            ..cfg()
        });
        c.update(&window(100, 15, 0, 100));
        assert!(c.draining());
        // Without its queue: 105 / 1.5.
        assert_eq!((c.limit(), c.estimate()), (70, 105));
        c.update(&window(100, 12, 0, 70)); // flushed
        // The drain's throughput fell (idle workers): its mean is taken.
        let mut drained = window(200, 12, 0, 70);
        drained.elapsed = 400_000_000;
        c.update(&drained);
        assert!(!c.draining());
        assert_eq!(c.baseline(), Some(Duration::from_millis(12)));
    }

    #[test]
    fn a_drain_that_kept_the_workers_busy_only_lowers_the_baseline() {
        let mut c = warmed(Adaptive {
            probe_every: 1,
            ..cfg()
        });
        c.update(&window(100, 15, 0, 100));
        c.update(&window(100, 12, 0, 70));
        c.update(&window(100, 12, 0, 70));
        assert_eq!(c.baseline(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn no_drain_while_the_limit_falls() {
        let mut c = warmed(Adaptive {
            probe_every: 1,
            ..cfg()
        });
        c.update(&window(100, 40, 0, 100));
        assert!(!c.draining());
        c.update(&window(100, 15, 0, 100));
        assert!(c.draining());
    }
}
