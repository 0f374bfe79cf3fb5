//! The per-request metric both binaries share: `floodgate_requests_total
//! {api, result}`, each request counted once, by the final outcome its
//! client saw — whatever each rule decided (the rules' own counters,
//! `floodgate_rule_decisions_total`, count their verdicts). Its handles
//! are registered once per API, when the frontend is built: counting a
//! request is one atomic increment, no lookup.

use metrics::Counter;

/// The name of the metric.
pub const REQUESTS_TOTAL: &str = "floodgate_requests_total";

/// A request's final outcome (its `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestResult {
    /// Admitted at once (a release that ran, for `/v1/release`).
    Allowed,
    /// Admitted after a shaper's delay (counted once the delay is over).
    Delayed,
    /// Rejected by a limit (a rule, a concurrency queue, or no delay slot).
    Denied,
    /// Rejected by load shedding: the layer's `shedding`, or `serve`'s
    /// calls in flight at `server.limits.max_requests`.
    Shed,
    /// The limiter failed and the request was let through (`on_error: allow`).
    FailedOpen,
    /// The limiter failed and the request was rejected (`on_error: reject`).
    FailedClosed,
    /// Answered with an error (malformed, or the store could not decide).
    Error,
}

impl RequestResult {
    /// Every result, in the order of [`RequestResult::label`]'s values.
    pub const ALL: [RequestResult; 7] = [
        RequestResult::Allowed,
        RequestResult::Delayed,
        RequestResult::Denied,
        RequestResult::Shed,
        RequestResult::FailedOpen,
        RequestResult::FailedClosed,
        RequestResult::Error,
    ];

    /// Its `result` label.
    pub const fn label(self) -> &'static str {
        match self {
            RequestResult::Allowed => "allowed",
            RequestResult::Delayed => "delayed",
            RequestResult::Denied => "denied",
            RequestResult::Shed => "shed",
            RequestResult::FailedOpen => "failed_open",
            RequestResult::FailedClosed => "failed_closed",
            RequestResult::Error => "error",
        }
    }
}

/// The request counters of one API, one handle per result.
#[derive(Clone)]
pub struct RequestCounters {
    counters: [Counter; 7],
}

impl RequestCounters {
    /// Registers the counters of `api` (a fixed name: `grpc`, `json`,
    /// `check`, `release`, `http`) in the installed recorder.
    pub fn new(api: &'static str) -> Self {
        metrics::describe_counter!(
            REQUESTS_TOTAL,
            "Requests by API and final outcome: allowed, delayed, denied, shed, failed_open, failed_closed, error. Each request is counted once, whatever each of its rules decided."
        );
        RequestCounters {
            counters: RequestResult::ALL
                .map(|r| metrics::counter!(REQUESTS_TOTAL, "api" => api, "result" => r.label())),
        }
    }

    /// Counts one request of outcome `result`.
    #[inline]
    pub fn count(&self, result: RequestResult) {
        self.counters[result as usize].increment(1);
    }
}

impl std::fmt::Debug for RequestCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestCounters").finish_non_exhaustive()
    }
}
