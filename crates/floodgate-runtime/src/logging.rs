//! Structured logs: text or JSON lines on standard error, filtered by a
//! `tracing` directive (`info`, `debug`, `floodgate_server=debug,warn`).

use tracing_subscriber::EnvFilter;

use crate::error::RuntimeError;
use crate::settings::{LogFormat, LogSettings};

/// Installs the global subscriber.
pub fn init(s: &LogSettings) -> Result<(), RuntimeError> {
    let filter = EnvFilter::try_new(&s.level)
        .map_err(|e| RuntimeError::Runtime(format!("invalid log level `{}`: {e}", s.level)))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match s.format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| RuntimeError::Runtime(format!("logging: {e}")))
}
