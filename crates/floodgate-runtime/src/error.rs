//! Why a binary could not start or run.

use std::net::SocketAddr;

use floodgate_policy::ConfigErrors;

/// A startup or runtime failure.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration files do not load.
    #[error("invalid configuration:\n{0}")]
    Config(ConfigErrors),
    /// The store could not be created or reached.
    #[error("store: {0}")]
    Store(String),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A listener's TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Metrics, logging or a server failed.
    #[error("{0}")]
    Runtime(String),
}
