//! Structured logs: text or JSON lines on standard error, filtered by a
//! `tracing` directive (`info`, `debug`, `floodgate_server=debug,warn`).
//! Lines from libraries the directive does not name are held to a budget
//! (`logging::library`), so that what a hostile client makes a library log once
//! per connection cannot flood the log.

mod library;
mod throttle;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::error::RuntimeError;
use crate::settings::{LogFormat, LogSettings};

/// Installs the global subscriber.
pub fn init(s: &LogSettings) -> Result<(), RuntimeError> {
    let filter = EnvFilter::try_new(&s.level)
        .map_err(|e| RuntimeError::Runtime(format!("invalid log level `{}`: {e}", s.level)))?;
    let libraries = library::LibraryThrottle::start(&s.level)
        .map_err(|e| RuntimeError::Runtime(format!("logging: {e}")))?;
    let registry = tracing_subscriber::registry().with(filter).with(libraries);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match s.format {
        LogFormat::Text => registry.with(fmt.with_ansi(false)).try_init(),
        LogFormat::Json => registry.with(fmt.json().flatten_event(true)).try_init(),
    };
    result.map_err(|e| RuntimeError::Runtime(format!("logging: {e}")))
}
