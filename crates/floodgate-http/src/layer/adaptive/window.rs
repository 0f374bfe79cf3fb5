//! The open control interval: atomic sums that completing requests add to
//! without a lock, taken whole when the interval closes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use floodgate::Timestamp;

use super::controller::Window;

/// The sums of the open interval.
#[derive(Debug, Default)]
pub(super) struct OpenWindow {
    /// When the interval began (nanoseconds of the caller's clock).
    pub(super) start: AtomicU64,
    successes: AtomicU64,
    latency_sum: AtomicU64,
    errors: AtomicU64,
    completed: AtomicU64,
    peak_in_flight: AtomicUsize,
}

impl OpenWindow {
    /// Counts one completed request, sample or not, `in_flight` counting
    /// it.
    pub(super) fn complete(&self, in_flight: usize) {
        self.completed.fetch_add(1, Relaxed);
        self.peak_in_flight.fetch_max(in_flight, Relaxed);
    }

    /// Adds one completed request's sample.
    pub(super) fn add(&self, latency: u64, ok: bool) {
        if ok {
            self.successes.fetch_add(1, Relaxed);
            self.latency_sum.fetch_add(latency, Relaxed);
        } else {
            self.errors.fetch_add(1, Relaxed);
        }
    }

    /// Whether the interval may close at `now`: it lasted `interval`
    /// nanoseconds and counts `min_samples` completions.
    pub(super) fn ready(&self, now: Timestamp, interval: u64, min_samples: u64) -> bool {
        let start = self.start.load(Relaxed);
        now.as_nanos().saturating_sub(start) >= interval
            && self.successes.load(Relaxed) + self.errors.load(Relaxed) >= min_samples
    }

    /// Takes the sums and opens the next interval at `now`. A request
    /// completing meanwhile may land in either interval: one sample.
    pub(super) fn take(&self, now: Timestamp) -> Window {
        let start = self.start.swap(now.as_nanos(), Relaxed);
        Window {
            elapsed: now.as_nanos().saturating_sub(start),
            successes: self.successes.swap(0, Relaxed),
            latency_sum: self.latency_sum.swap(0, Relaxed),
            errors: self.errors.swap(0, Relaxed),
            completed: self.completed.swap(0, Relaxed),
            peak_in_flight: self.peak_in_flight.swap(0, Relaxed),
        }
    }
}
