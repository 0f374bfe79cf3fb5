//! The adaptive limit on `/metrics`: set when the limit is published — at
//! start and when a control interval closes, never per request.

use std::time::Duration;

use metrics::Gauge;

/// The gauges of one adaptive limit (a reloaded layer's replace them).
pub(super) struct Gauges {
    limit: Gauge,
    in_flight: Gauge,
    baseline: Gauge,
    latency: Gauge,
    waiting: Gauge,
}

impl std::fmt::Debug for Gauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gauges")
    }
}

impl Gauges {
    /// Registers the gauges in the installed recorder.
    pub(super) fn new() -> Self {
        metrics::describe_gauge!(
            "floodgate_http_adaptive_limit",
            "The adaptive concurrency limit: requests let through at once (the critical class's; lower classes get their share)."
        );
        metrics::describe_gauge!(
            "floodgate_http_adaptive_in_flight",
            "Requests admitted under the adaptive limit, when the last control interval closed."
        );
        metrics::describe_gauge!(
            "floodgate_http_adaptive_baseline_seconds",
            "The learned no-load latency the adaptive limit aims at (times 1 + tolerance); 0 until measured."
        );
        metrics::describe_gauge!(
            "floodgate_http_adaptive_latency_seconds",
            "The mean latency of the successful requests of the last control interval."
        );
        metrics::describe_gauge!(
            "floodgate_http_adaptive_waiting",
            "Requests waiting in the adaptive limit's queue (shedding.adaptive.queue)."
        );
        Gauges {
            waiting: metrics::gauge!("floodgate_http_adaptive_waiting"),
            limit: metrics::gauge!("floodgate_http_adaptive_limit"),
            in_flight: metrics::gauge!("floodgate_http_adaptive_in_flight"),
            baseline: metrics::gauge!("floodgate_http_adaptive_baseline_seconds"),
            latency: metrics::gauge!("floodgate_http_adaptive_latency_seconds"),
        }
    }

    /// Sets the limit, the requests in flight and the learned baseline.
    pub(super) fn publish(&self, limit: usize, in_flight: usize, baseline: Option<Duration>) {
        self.limit.set(limit as f64);
        self.in_flight.set(in_flight as f64);
        self.baseline.set(baseline.map_or(0.0, |b| b.as_secs_f64()));
    }

    /// Sets the requests waiting in the queue (set whenever it changes,
    /// under its lock: only while something waits).
    pub(super) fn waiting(&self, n: usize) {
        self.waiting.set(n as f64);
    }

    /// Sets the last interval's mean latency (none: no success in it).
    pub(super) fn measured(&self, mean_nanos: Option<f64>) {
        if let Some(mean) = mean_nanos {
            self.latency.set(mean / 1e9);
        }
    }
}
