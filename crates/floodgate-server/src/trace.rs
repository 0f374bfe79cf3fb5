//! The service's request spans (see [`floodgate_runtime::host::otel`]): one
//! per `ShouldRateLimit`, `/json` and `/v1/check` call, continuing the
//! caller's `traceparent`; the decision fills in their attributes
//! ([`floodgate_runtime::host::otel::record_decision`]). With tracing off, making
//! one is a disabled call site: no span.

use tracing::Span;

use crate::metrics::Api;

/// A server span named `$name`, its attributes empty until the decision.
macro_rules! request_span {
    ($name:literal) => {
        tracing::info_span!(
            target: floodgate_runtime::host::otel::TARGET,
            $name,
            otel.kind = "server",
            domain = tracing::field::Empty,
            rules = tracing::field::Empty,
            outcome = tracing::field::Empty,
            store = tracing::field::Empty,
            sync_mode = tracing::field::Empty,
        )
    };
}

/// The span of a `ShouldRateLimit` call of `headers` (its metadata).
pub(crate) fn rls(headers: &http::HeaderMap) -> Span {
    let span = request_span!("ShouldRateLimit");
    floodgate_runtime::host::otel::continue_trace(&span, headers);
    span
}

/// The span of an HTTP call to `api` with `headers` (none for a path
/// that decides nothing).
pub(crate) fn http_call(api: Option<Api>, headers: &http::HeaderMap) -> Span {
    let span = match api {
        Some(Api::Json) => request_span!("POST /json"),
        Some(Api::Check) => request_span!("POST /v1/check"),
        _ => return Span::none(),
    };
    floodgate_runtime::host::otel::continue_trace(&span, headers);
    span
}
