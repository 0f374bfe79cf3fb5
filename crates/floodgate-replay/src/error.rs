//! What can stop a replay.

use thiserror::Error;

/// A replay that could not run.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// A candidate's configuration is invalid.
    #[error("{candidate}: {message}")]
    Config {
        /// The candidate.
        candidate: String,
        /// Every problem, with file, line and column.
        message: String,
    },
    /// No candidate has an `http:` section: nothing says how requests
    /// become descriptors.
    #[error(
        "no http: section in any configuration: a replay builds descriptors with the gateway's identity (http.domain, http.descriptors)"
    )]
    NoHttpSection,
    /// The log format cannot be used.
    #[error("log format: {0}")]
    Format(String),
    /// Nothing to replay with.
    #[error("{0}")]
    Usage(String),
    /// Reading a log or writing an output failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
