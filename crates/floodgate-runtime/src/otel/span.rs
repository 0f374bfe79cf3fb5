//! What the frontends do with their request spans: continue the caller's
//! trace, record the decision on it.

use floodgate_policy::Response;

use crate::backend::AnyBackend;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Most rule names a span lists (`rules`): a request matching more names
/// the first ones.
const RULES: usize = 8;

/// The headers that name a caller's trace: W3C trace context's, then
/// Zipkin's B3 (single `b3`, or `x-b3-*`).
const TRACE_HEADERS: [&str; 3] = ["traceparent", "b3", "x-b3-traceid"];

/// Makes `span` a child of the caller's span that `headers` — an HTTP
/// request's headers or a gRPC call's metadata — name, when they name
/// one: W3C `traceparent` (and `tracestate`), or B3 as Envoy's Zipkin
/// tracer sends it, single header or several. B3 wins when both are
/// given, as in envoyproxy/ratelimit (`src/trace/trace.go`: trace
/// context, then B3). A span made while tracing is off is left alone.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if span.is_disabled() || !TRACE_HEADERS.iter().any(|h| headers.contains_key(*h)) {
        return;
    }
    let headers = Headers(headers);
    let w3c = TraceContextPropagator::new().extract(&headers);
    let parent =
        opentelemetry_propagator_b3::Propagator::new().extract_with_context(&w3c, &headers);
    // Refused only for a span already started, which these are not.
    let _ = span.set_parent(parent);
}

/// Records on the current span — a request's, entered while it is decided
/// — its `domain`, its `outcome` (a `floodgate_requests_total` result), the
/// store and its synchronisation mode and, when decided, the names of the
/// rules that matched (`rules`, at most a few). While tracing is off: one
/// branch, nothing recorded.
pub fn record_decision(
    backend: &AnyBackend,
    domain: &str,
    outcome: &'static str,
    response: Option<&Response>,
) {
    if !super::enabled() {
        return;
    }
    let span = tracing::Span::current();
    span.record("domain", domain);
    span.record("outcome", outcome);
    match backend {
        AnyBackend::Memory(_) => span.record("store", "memory"),
        AnyBackend::Redis(r) => span
            .record("store", "redis")
            .record("sync_mode", r.default_sync_mode().name()),
    };
    if let Some(rules) = response.and_then(rule_names) {
        span.record("rules", rules.as_str());
    }
}

/// The names of the first [`RULES`] rules of `response` that have one.
fn rule_names(response: &Response) -> Option<String> {
    let names = response.statuses.iter().filter_map(|s| {
        let limit = s.current_limit.as_ref()?;
        limit.name.as_deref()
    });
    let mut rules = String::new();
    for name in names.take(RULES) {
        if !rules.is_empty() {
            rules.push(',');
        }
        rules.push_str(name);
    }
    (!rules.is_empty()).then_some(rules)
}

/// An HTTP header map read by the propagator.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
