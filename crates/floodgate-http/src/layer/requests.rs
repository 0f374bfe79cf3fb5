//! The per-request metric both binaries share: `floodgate_requests_total
//! {api, result}`, each request counted once, by the final outcome its
//! client saw — whatever each rule decided (the rules' own counters,
//! `floodgate_rule_decisions_total`, count their verdicts). Its handles
//! are registered once per API, when the frontend is built: counting a
//! request is one atomic increment, no lookup.

use floodgate_policy::Fallback;
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
    /// The limiter could not decide and the request was let through: a
    /// store's failure policy admitted it unevaluated (`fail_open`), or the
    /// gateway's limiter failed (`on_error: allow`).
    FailedOpen,
    /// The limiter could not decide and the request was rejected: a
    /// store's failure policy denied it unevaluated (`fail_closed`), or the
    /// gateway's limiter failed (`on_error: reject`).
    FailedClosed,
    /// Answered with an error (malformed, or the store could not decide).
    Error,
}

impl RequestResult {
    /// A request admitted at once: `failed_open` when a failure policy
    /// admitted it in the store's place ([`Response::fallback`](floodgate_policy::Response::fallback)),
    /// else `allowed` (the local fallback store's decisions count as what
    /// they decided).
    #[inline]
    pub fn allowed_by(fallback: Option<Fallback>) -> Self {
        match fallback {
            Some(Fallback::FailedOpen) => RequestResult::FailedOpen,
            _ => RequestResult::Allowed,
        }
    }

    /// A request refused by a limit: `failed_closed` when a failure policy
    /// denied it in the store's place, else `denied`.
    #[inline]
    pub fn denied_by(fallback: Option<Fallback>) -> Self {
        match fallback {
            Some(Fallback::FailedClosed) => RequestResult::FailedClosed,
            _ => RequestResult::Denied,
        }
    }

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
