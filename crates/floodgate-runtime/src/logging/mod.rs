//! Structured logs: text or JSON lines on standard error, filtered by a
//! `tracing` directive (`info`, `debug`, `floodgate_server=debug,warn`).
//! Lines from libraries the directive does not name are held to a budget
//! (`logging::library`), so that what a hostile client makes a library log once
//! per connection cannot flood the log. The spans of OpenTelemetry tracing
//! ([`crate::host::otel`]) go to their exporter, never to the log.

mod library;
mod throttle;

use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::error::RuntimeError;
use crate::settings::{LogFormat, LogSettings, TracingSettings};

/// Installs the global subscriber: the log as `s` says and, when
/// `tracing` is on, the export of spans (started now).
pub fn init(s: &LogSettings, tracing: &TracingSettings) -> Result<(), RuntimeError> {
    subscriber(s, tracing)?
        .try_init()
        .map_err(|e| RuntimeError::Runtime(format!("logging: {e}")))
}

/// The subscriber [`init`] installs.
fn subscriber(
    s: &LogSettings,
    tracing: &TracingSettings,
) -> Result<impl tracing::Subscriber + Send + Sync, RuntimeError> {
    // The spans exported are never logged: their call sites stay off
    // unless tracing is on.
    let directives = format!("{},{}=off", s.level, crate::otel::TARGET);
    let filter = EnvFilter::try_new(&directives)
        .map_err(|e| RuntimeError::Runtime(format!("invalid log level `{}`: {e}", s.level)))?;
    let libraries = library::LibraryThrottle::start(&s.level)
        .map_err(|e| RuntimeError::Runtime(format!("logging: {e}")))?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match s.format {
        LogFormat::Text => fmt.with_ansi(false).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    Ok(tracing_subscriber::registry()
        .with(crate::otel::layer(tracing)?)
        .with(fmt.with_filter(filter.and(libraries))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With tracing off, a span of the exported target is never made,
    /// whatever the log level: its call site is disabled.
    #[test]
    fn tracing_off_makes_no_span_at_any_log_level() {
        for level in ["info", "trace", "floodgate=trace"] {
            let log = LogSettings {
                level: level.into(),
                format: LogFormat::Text,
            };
            let off = subscriber(&log, &TracingSettings::default()).unwrap();
            tracing::subscriber::with_default(off, || {
                let span = tracing::info_span!(target: crate::otel::TARGET, "decision");
                assert!(span.is_disabled(), "{level}");
                let logged = tracing::info_span!("logged");
                assert!(
                    !logged.is_disabled(),
                    "{level}: the log's own spans are made"
                );
            });
        }
    }
}
