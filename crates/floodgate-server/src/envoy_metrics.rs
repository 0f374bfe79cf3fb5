//! The service's counters under envoyproxy/ratelimit's Prometheus names
//! (its statsd exporter's default mapper), with `USE_PROMETHEUS`
//! (`settings.envoy_stats`): `ShouldRateLimit` calls and their time by
//! `grpc_method`, and failed decisions by `err_type`. Handles resolved
//! once at startup; nothing is recorded when off.

use metrics::{Counter, Histogram};

use crate::metrics::{Api, ErrorClass};

/// The handles, when the names are on.
#[derive(Clone)]
pub(crate) struct EnvoyServiceMetrics {
    total_requests: Counter,
    response_time: Histogram,
    redis_error: Counter,
    service_error: Counter,
}

impl EnvoyServiceMetrics {
    /// Handles from the installed recorder.
    pub(crate) fn new() -> Self {
        describe();
        let method = ("grpc_method", "ShouldRateLimit");
        let error = |t: &'static str| metrics::counter!("ratelimit_service_should_rate_limit_error", "err_type" => t);
        EnvoyServiceMetrics {
            total_requests: metrics::counter!("ratelimit_service_total_requests", &[method]),
            response_time: metrics::histogram!(
                "ratelimit_service_response_time_seconds",
                &[method]
            ),
            redis_error: error("redis_error"),
            service_error: error("service_error"),
        }
    }

    /// Counts a request of `api` answered after `seconds`: gRPC calls
    /// only (its server's own middleware counts them there).
    #[inline]
    pub(crate) fn counted(&self, api: Api, seconds: f64) {
        if api == Api::Grpc {
            self.total_requests.increment(1);
            self.response_time.record(seconds);
        }
    }

    /// Counts a `ShouldRateLimit` (gRPC or `/json`) that failed with
    /// `class`: the store's failures as `redis_error`, a refused request
    /// as `service_error`; a call shed or over the size limit is neither.
    pub(crate) fn failed(&self, api: Api, class: ErrorClass) {
        if !matches!(api, Api::Grpc | Api::Json) {
            return;
        }
        match class {
            ErrorClass::InvalidArgument => self.service_error.increment(1),
            ErrorClass::Unavailable | ErrorClass::DeadlineExceeded | ErrorClass::Internal => {
                self.redis_error.increment(1);
            }
            ErrorClass::ResourceExhausted => {}
        }
    }
}

/// Says what each counts.
fn describe() {
    metrics::describe_counter!(
        "ratelimit_service_total_requests",
        "envoyproxy/ratelimit's name: ShouldRateLimit calls over gRPC, by grpc_method."
    );
    metrics::describe_histogram!(
        "ratelimit_service_response_time_seconds",
        metrics::Unit::Seconds,
        "envoyproxy/ratelimit's name: the time to answer ShouldRateLimit over gRPC, by grpc_method."
    );
    metrics::describe_counter!(
        "ratelimit_service_should_rate_limit_error",
        "envoyproxy/ratelimit's name: ShouldRateLimit calls (gRPC and /json) that failed, by err_type (redis_error: the store could not decide; service_error: a refused request)."
    );
}
