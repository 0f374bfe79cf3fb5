//! The service's request metrics: per-API request counters (the
//! `floodgate_requests_total` the gateway counts too, by final outcome) and
//! latency histograms, handles resolved once at startup. Labels are
//! bounded: an API name, a result, an error class — never a request value.

use std::time::Instant;

use floodgate::Outcome as Verdict;
use floodgate_http::layer::{RequestCounters, RequestResult};
use floodgate_policy::{Code, ErrorCode, Released, Response};
use metrics::{Counter, Histogram};

use crate::envoy_metrics::EnvoyServiceMetrics;

/// Describes the request-path metrics (once the recorder is installed).
fn describe() {
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

/// What a release did to a concurrency limit (its
/// `floodgate_releases_total` result), or to a descriptor's, the least
/// favourable of its limits'.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Outcome {
    /// No concurrency limit to give back (none matched, or `hits: 0`).
    None,
    /// Given back.
    Released,
    /// Redis cannot take it now; this instance sends it when Redis answers.
    Queued,
    /// The permit held nothing of the limit: nothing changed.
    NotHeld,
    /// The store could neither take it nor keep it for later.
    Failed,
}

impl Outcome {
    /// A limit's release result.
    pub(crate) fn of(r: Result<Released, ErrorCode>) -> Self {
        match r {
            Ok(Released::Given(_)) => Outcome::Released,
            Ok(Released::Queued(_)) => Outcome::Queued,
            Ok(Released::NotHeld) => Outcome::NotHeld,
            Err(_) => Outcome::Failed,
        }
    }

    /// Its name, as the metric and `/v1/release` write it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::None => "none",
            Outcome::Released => "released",
            Outcome::Queued => "queued",
            Outcome::NotHeld => "not_held",
            Outcome::Failed => "failed",
        }
    }
}

/// Counts what a `/v1/release` did to each concurrency limit of `response`.
pub(crate) fn released(response: &floodgate_policy::Response) {
    for r in response.limits().filter_map(|l| l.release) {
        let result = Outcome::of(r).label();
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
    /// HTTP `POST /v1/release` (counted as `allowed` or `error`).
    Release,
}

const API_LABELS: [&str; 4] = ["grpc", "json", "check", "release"];

impl Api {
    /// The HTTP API served at `path`, if any.
    pub(crate) fn of_path(path: &str) -> Option<Api> {
        match path {
            "/json" => Some(Api::Json),
            "/v1/check" => Some(Api::Check),
            "/v1/release" => Some(Api::Release),
            _ => None,
        }
    }
}

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
    requests: RequestCounters,
    latency: Histogram,
}

/// Every request-path metric handle.
#[derive(Clone)]
pub struct ServiceMetrics {
    apis: [ApiHandles; 4],
    errors: [Counter; 5],
    /// The same under envoyproxy/ratelimit's names, when on.
    envoy: Option<EnvoyServiceMetrics>,
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        Self::new(false)
    }
}

impl ServiceMetrics {
    /// Every handle, under envoyproxy/ratelimit's names too with `envoy`.
    pub fn new(envoy: bool) -> Self {
        describe();
        ServiceMetrics {
            apis: API_LABELS.map(|l| ApiHandles {
                requests: RequestCounters::new(l),
                latency: metrics::histogram!("floodgate_request_duration_seconds", "api" => l),
            }),
            errors: ERROR_LABELS
                .map(|class| metrics::counter!("floodgate_request_errors_total", "class" => class)),
            envoy: envoy.then(EnvoyServiceMetrics::new),
        }
    }

    /// Records a decided request, by the answer `response` gives; its
    /// outcome.
    #[inline]
    pub fn decided(&self, api: Api, response: &Response, started: Instant) -> RequestResult {
        let result = result_of(response);
        self.counted(api, result, started);
        result
    }

    /// Records a request of outcome `result`.
    #[inline]
    pub(crate) fn counted(&self, api: Api, result: RequestResult, started: Instant) {
        let h = &self.apis[api as usize];
        h.requests.count(result);
        let seconds = started.elapsed().as_secs_f64();
        h.latency.record(seconds);
        if let Some(e) = &self.envoy {
            e.counted(api, seconds);
        }
    }

    /// Records a request refused for want of a place among the calls in
    /// flight (`server.limits.max_requests`): shed, answered
    /// `RESOURCE_EXHAUSTED`.
    pub(crate) fn shed(&self, api: Api, started: Instant) {
        self.counted(api, RequestResult::Shed, started);
        self.errors[ErrorClass::ResourceExhausted as usize].increment(1);
        // envoyproxy/ratelimit counts no error for a call it sheds.
    }

    /// [`shed`](Self::shed), for an HTTP request to `api` (none: a path
    /// serving no API, not counted).
    pub(crate) fn shed_at(&self, api: Option<Api>, started: Instant) {
        if let Some(api) = api {
            self.shed(api, started);
        }
    }

    /// [`failed`](Self::failed), for an HTTP request to `api` (none: a
    /// path serving no API, not counted).
    pub(crate) fn failed_at(&self, api: Option<Api>, class: ErrorClass, started: Instant) {
        if let Some(api) = api {
            self.failed(api, class, started);
        }
    }

    /// Records a failed request (`class`: an [`ErrorClass`] or the
    /// engine's [`ErrorCode`]).
    pub fn failed(&self, api: Api, class: impl Into<ErrorClass>, started: Instant) {
        self.counted(api, RequestResult::Error, started);
        let class = class.into();
        self.errors[class as usize].increment(1);
        if let Some(e) = &self.envoy {
            e.failed(api, class);
        }
    }
}

/// A decided request's final outcome: denied when over the limit, delayed
/// when an enforced rule asks it to wait (a shaper), else allowed — failed
/// closed or failed open instead of denied or allowed when a store's
/// failure policy answered in its place.
fn result_of(response: &Response) -> RequestResult {
    if response.overall == Code::OverLimit {
        return RequestResult::denied_by(response.fallback());
    }
    let delayed = response
        .statuses
        .iter()
        .filter(|s| !s.shadow)
        .filter_map(|s| s.decision)
        .any(|d| matches!(d.outcome, Verdict::Delayed(_)));
    if delayed {
        RequestResult::Delayed
    } else {
        RequestResult::allowed_by(response.fallback())
    }
}
