//! Prometheus metrics: the recorder, per-API request counters and latency
//! histograms (handles resolved once at startup), and the store's own
//! counters exported at scrape time. Labels are bounded: an API name, a
//! result, an error class — never a request value.

use std::time::{Duration, Instant};

use floodgate_policy::{Backend, Code, ErrorCode};
use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::backend::AnyBackend;
use crate::error::ServerError;

/// Latency buckets, in seconds (50 µs to 1 s).
const BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Installs the global Prometheus recorder and returns its handle.
pub fn install() -> Result<PrometheusHandle, ServerError> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
        .map_err(|e| ServerError::Runtime(e.to_string()))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| ServerError::Runtime(format!("metrics recorder: {e}")))?;
    describe();
    Ok(handle)
}

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
    metrics::describe_gauge!(
        "floodgate_backend_ready",
        "1 when the store can decide (Redis reachable, breaker closed)."
    );
    metrics::describe_gauge!(
        "floodgate_redis_local_permits",
        "Concurrency permits the local fallback admitted during a Redis outage and that are not released yet."
    );
    metrics::describe_gauge!(
        "floodgate_redis_deferred_releases",
        "Releases of Redis-held concurrency permits that Redis could not take, queued to be sent again."
    );
}

/// The API a request came through.
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

impl Api {
    fn label(self) -> &'static str {
        match self {
            Api::Grpc => "grpc",
            Api::Json => "json",
            Api::Check => "check",
            Api::Release => "release",
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

impl ErrorClass {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::InvalidArgument => "invalid_argument",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::DeadlineExceeded => "deadline_exceeded",
            ErrorClass::Internal => "internal",
            ErrorClass::ResourceExhausted => "resource_exhausted",
        }
    }
}

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

impl ApiHandles {
    fn new(api: Api) -> Self {
        let l = api.label();
        ApiHandles {
            ok: metrics::counter!("floodgate_requests_total", "api" => l, "result" => "ok"),
            over: metrics::counter!("floodgate_requests_total", "api" => l, "result" => "over_limit"),
            error: metrics::counter!("floodgate_requests_total", "api" => l, "result" => "error"),
            latency: metrics::histogram!("floodgate_request_duration_seconds", "api" => l),
        }
    }
}

/// Every request-path metric handle.
#[derive(Clone)]
pub struct ServiceMetrics {
    apis: [ApiHandles; 4],
    errors: [Counter; 5],
    ready: Gauge,
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        let err = |class: ErrorClass| metrics::counter!("floodgate_request_errors_total", "class" => class.label());
        ServiceMetrics {
            apis: [
                ApiHandles::new(Api::Grpc),
                ApiHandles::new(Api::Json),
                ApiHandles::new(Api::Check),
                ApiHandles::new(Api::Release),
            ],
            errors: [
                err(ErrorClass::InvalidArgument),
                err(ErrorClass::Unavailable),
                err(ErrorClass::DeadlineExceeded),
                err(ErrorClass::Internal),
                err(ErrorClass::ResourceExhausted),
            ],
            ready: metrics::gauge!("floodgate_backend_ready"),
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
        let i = match class.into() {
            ErrorClass::InvalidArgument => 0,
            ErrorClass::Unavailable => 1,
            ErrorClass::DeadlineExceeded => 2,
            ErrorClass::Internal => 3,
            ErrorClass::ResourceExhausted => 4,
        };
        self.errors[i].increment(1);
    }

    /// Records the store's readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(if ready { 1.0 } else { 0.0 });
    }
}

/// Copies the store's own counters into the registry (called before each
/// scrape).
pub fn export_store(backend: &AnyBackend) {
    let AnyBackend::Redis(r) = backend else {
        return;
    };
    let s = r.stats();
    let c = |name: &'static str, v: u64| metrics::counter!(name).absolute(v);
    c("floodgate_redis_decisions_total", s.decisions.get());
    c(
        "floodgate_redis_backend_errors_total",
        s.backend_errors.get(),
    );
    c(
        "floodgate_redis_short_circuited_total",
        s.short_circuited.get(),
    );
    c("floodgate_redis_fail_open_total", s.fail_open.get());
    c("floodgate_redis_fail_closed_total", s.fail_closed.get());
    c(
        "floodgate_redis_local_fallbacks_total",
        s.local_fallbacks.get(),
    );
    c(
        "floodgate_redis_breaker_opened_total",
        s.breaker_opened.get(),
    );
    c(
        "floodgate_redis_breaker_closed_total",
        s.breaker_closed.get(),
    );
    c(
        "floodgate_redis_breaker_probes_total",
        s.breaker_probes.get(),
    );
    c(
        "floodgate_redis_releases_deferred_total",
        s.releases_deferred.get(),
    );
    c(
        "floodgate_redis_releases_redelivered_total",
        s.releases_redelivered.get(),
    );
    c(
        "floodgate_redis_releases_dropped_total",
        s.releases_dropped.get(),
    );
    let rs = r.redis().stats();
    c("floodgate_redis_calls_total", rs.calls.get());
    c("floodgate_redis_pipelines_total", rs.pipelines.get());
    c("floodgate_redis_errors_total", rs.errors.get());
    c("floodgate_redis_timeouts_total", rs.timeouts.get());
    c("floodgate_redis_script_loads_total", rs.script_loads.get());
    c("floodgate_redis_cross_slot_total", rs.cross_slot.get());
    c(
        "floodgate_redis_local_cache_hits_total",
        rs.cache_hits.get(),
    );
    c(
        "floodgate_redis_local_cache_inserts_total",
        rs.cache_inserts.get(),
    );
    c("floodgate_redis_state_resets_total", rs.state_resets.get());
    let state = match r.breaker_state() {
        floodgate_redis::BreakerState::Closed => 0.0,
        floodgate_redis::BreakerState::Open => 1.0,
        _ => 2.0,
    };
    metrics::gauge!("floodgate_redis_breaker_state").set(state);
    metrics::gauge!("floodgate_redis_local_permits").set(r.local_permits() as f64);
    metrics::gauge!("floodgate_redis_deferred_releases").set(r.deferred_releases() as f64);
}

/// Runs the recorder's upkeep (draining histogram buffers) every `every`.
pub fn spawn_upkeep(handle: PrometheusHandle, every: Duration) {
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        loop {
            t.tick().await;
            handle.run_upkeep();
        }
    });
}

/// Whether `backend` can decide now, recorded as a gauge.
pub fn ready(backend: &AnyBackend, m: &ServiceMetrics) -> bool {
    let r = backend.is_ready();
    m.set_ready(r);
    r
}
