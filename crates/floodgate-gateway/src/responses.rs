//! The gateway's responses by status class
//! (`floodgate_gateway_responses_total{status="2xx"}`, …) and the time
//! from a request's head to its response's head
//! (`floodgate_gateway_request_duration_seconds`), whoever answered: the
//! upstream, the limiter or the gateway itself. Handles registered once,
//! when the gateway is built: a response costs two atomic updates.

use std::time::Instant;

use http::StatusCode;
use metrics::{Counter, Histogram};

/// The status classes, in the order of their counters.
pub(crate) const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The handles.
pub(crate) struct ResponseMetrics {
    classes: [Counter; 5],
    duration: Histogram,
}

impl ResponseMetrics {
    /// Handles from the installed recorder.
    pub(crate) fn new() -> Self {
        metrics::describe_counter!(
            "floodgate_gateway_responses_total",
            "Responses sent to clients, by status class (1xx … 5xx), whoever answered."
        );
        metrics::describe_histogram!(
            "floodgate_gateway_request_duration_seconds",
            metrics::Unit::Seconds,
            "Time from a request's head to its response's head."
        );
        ResponseMetrics {
            classes: CLASSES
                .map(|c| metrics::counter!("floodgate_gateway_responses_total", "status" => c)),
            duration: metrics::histogram!("floodgate_gateway_request_duration_seconds"),
        }
    }

    /// Counts a response of `status` to a request whose head arrived at
    /// `started`.
    #[inline]
    pub(crate) fn finished(&self, status: StatusCode, started: Instant) {
        self.classes[class_of(status)].increment(1);
        self.duration.record(started.elapsed().as_secs_f64());
    }
}

/// The position of `status`'s class in [`CLASSES`].
#[inline]
pub(crate) fn class_of(status: StatusCode) -> usize {
    // A status is 100 to 999; the classes past 5xx count as 5xx.
    usize::from(status.as_u16() / 100).clamp(1, 5) - 1
}
