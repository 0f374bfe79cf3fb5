//! The service's request metrics: per-API request counters and latency
//! histograms, handles resolved once at startup. Labels are bounded: an API name, a
//! result, an error class — never a request value.

use std::time::Instant;

use floodgate_policy::{Code, ErrorCode};
use metrics::{Counter, Histogram};

/// Describes the request-path metrics (once the recorder is installed).
fn describe() {
    metrics::describe_counter!(
        "floodgate_requests_total",
        "Decision requests by API and result (ok, over_limit, error)."
    );
    metrics::describe_histogram!(
        "floodgate_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time to decide a request, by API."
    );
    metrics::describe_counter!(
        "floodgate_request_errors_total",
        "Requests answered with an error, by class (invalid_argument, resource_exhausted, unavailable, deadline_exceeded, internal)."
    );
    metrics::describe_counter!(
        "floodgate_releases_total",
        "Concurrency limits released through /v1/release, by result (released, queued, not_held: the permit held nothing there, failed)."
    );
}

/// Counts what a `/v1/release` did to each concurrency limit of `response`.
pub fn released(response: &floodgate_policy::Response) {
    use floodgate_policy::Released;
    for l in response.limits() {
        let result = match l.release {
            Some(Ok(Released::Given(_))) => "released",
            Some(Ok(Released::Queued(_))) => "queued",
            Some(Ok(Released::NotHeld)) => "not_held",
            Some(Err(_)) => "failed",
            None => continue,
        };
        metrics::counter!("floodgate_releases_total", "result" => result).increment(1);
    }
}

/// The API a request came through (its `api` label, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// gRPC `ShouldRateLimit`.
    Grpc,
    /// HTTP `POST /json`.
    Json,
    /// HTTP `POST /v1/check`.
    Check,
    /// HTTP `POST /v1/release` (counted as `ok` or `error`).
    Release,
}

const API_LABELS: [&str; 4] = ["grpc", "json", "check", "release"];

/// The class of a failed request, as its `floodgate_request_errors_total`
/// label names it: the gRPC status code it was answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// `INVALID_ARGUMENT`: a malformed or out-of-bounds request.
    InvalidArgument,
    /// `UNAVAILABLE`: the store cannot decide.
    Unavailable,
    /// `DEADLINE_EXCEEDED`: no decision in time.
    DeadlineExceeded,
    /// `INTERNAL`: an unexpected store reply.
    Internal,
    /// `RESOURCE_EXHAUSTED`: a message (or body) over the size limit.
    ResourceExhausted,
}

/// The labels of [`ErrorClass`], in its order.
const ERROR_LABELS: [&str; 5] = [
    "invalid_argument",
    "unavailable",
    "deadline_exceeded",
    "internal",
    "resource_exhausted",
];

impl From<ErrorCode> for ErrorClass {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::InvalidArgument => ErrorClass::InvalidArgument,
            ErrorCode::Unavailable => ErrorClass::Unavailable,
            ErrorCode::DeadlineExceeded => ErrorClass::DeadlineExceeded,
            ErrorCode::Internal => ErrorClass::Internal,
        }
    }
}

/// Handles of one API.
#[derive(Clone)]
struct ApiHandles {
    ok: Counter,
    over: Counter,
    error: Counter,
    latency: Histogram,
}

/// Every request-path metric handle.
#[derive(Clone)]
pub struct ServiceMetrics {
    apis: [ApiHandles; 4],
    errors: [Counter; 5],
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        describe();
        let total = |l: &'static str, result: &'static str| metrics::counter!("floodgate_requests_total", "api" => l, "result" => result);
        ServiceMetrics {
            apis: API_LABELS.map(|l| ApiHandles {
                ok: total(l, "ok"),
                over: total(l, "over_limit"),
                error: total(l, "error"),
                latency: metrics::histogram!("floodgate_request_duration_seconds", "api" => l),
            }),
            errors: ERROR_LABELS
                .map(|class| metrics::counter!("floodgate_request_errors_total", "class" => class)),
        }
    }
}

impl ServiceMetrics {
    /// Records a decided request.
    #[inline]
    pub fn decided(&self, api: Api, code: Code, started: Instant) {
        let h = &self.apis[api as usize];
        match code {
            Code::Ok => h.ok.increment(1),
            Code::OverLimit => h.over.increment(1),
        }
        h.latency.record(started.elapsed().as_secs_f64());
    }

    /// Records a failed request (`class`: an [`ErrorClass`] or the
    /// engine's [`ErrorCode`]).
    pub fn failed(&self, api: Api, class: impl Into<ErrorClass>, started: Instant) {
        let h = &self.apis[api as usize];
        h.error.increment(1);
        h.latency.record(started.elapsed().as_secs_f64());
        self.errors[class.into() as usize].increment(1);
    }
}
