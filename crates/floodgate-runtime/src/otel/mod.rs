//! OpenTelemetry tracing (`server.tracing`): the frontends' request spans
//! and the Redis store's calls, exported over OTLP (gRPC or protobuf over
//! HTTP) in batches from threads of their own, never on a request's path.
//!
//! Spans are `tracing` spans of the target [`TARGET`], bridged to
//! OpenTelemetry by `tracing-opentelemetry`. With tracing off no layer
//! wants that target (the log filter turns it off too), so each place that
//! would make a span finds its call site disabled — one cached check — and
//! makes none. On, a span continues its caller's W3C `traceparent`
//! ([`continue_trace`]) and is kept as the caller's sampling decision says,
//! else at `server.tracing.sampling_ratio`. No attribute carries a
//! rate-limited key's value.

mod export;
mod http_client;
mod queue;
mod span;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::registry::LookupSpan;

use crate::error::RuntimeError;
use crate::settings::TracingSettings;

pub use queue::DROPPED_TOTAL;
pub use span::{continue_trace, record_decision};

/// The `tracing` target of every span exported (the Redis store, which
/// knows nothing of OpenTelemetry, spells it out).
pub const TARGET: &str = "floodgate::trace";

/// Whether spans are exported (set once, when the layer is made).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether tracing is on: the frontends record a decision on their span
/// only then.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The exporting provider, kept to be flushed at shutdown ([`shut_down`]).
static PROVIDER: Mutex<Option<Exporting>> = Mutex::new(None);

/// The provider and the runtime its gRPC client lives on.
struct Exporting {
    provider: SdkTracerProvider,
    runtime: tokio::runtime::Runtime,
}

/// The layer that exports [`TARGET`]'s spans as `settings` say, one that
/// wants nothing when tracing is off (an absent layer would want
/// everything); the exporter starts now, on its own threads.
pub(crate) fn layer<S>(
    settings: &TracingSettings,
) -> Result<Box<dyn Layer<S> + Send + Sync>, RuntimeError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if !settings.enabled {
        let nothing = tracing_subscriber::layer::Identity::new();
        return Ok(Box::new(nothing.with_filter(LevelFilter::OFF)));
    }
    let runtime = export::runtime()?;
    let provider = export::provider(settings, &runtime)?;
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "floodgate");
    *PROVIDER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Exporting { provider, runtime });
    ENABLED.store(true, Ordering::Relaxed);
    let only_ours = tracing_subscriber::filter::filter_fn(|m| m.target() == TARGET);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(only_ours);
    Ok(Box::new(layer))
}

/// Exports the spans still waiting within `within` and stops the exporter
/// (nothing when tracing is off); called once the requests have drained.
pub fn shut_down(within: Duration) {
    let taken = PROVIDER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some(exporting) = taken else { return };
    if let Err(e) = exporting.provider.shutdown_with_timeout(within) {
        tracing::warn!(error = %e, "tracing: spans not all exported at shutdown");
    }
    // The runtime is dropped here, off any other runtime's threads.
    std::thread::spawn(move || drop(exporting.runtime));
}
