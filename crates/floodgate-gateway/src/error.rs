//! The gateway's errors.

use floodgate_policy::error::ConfigErrors;

/// Why the gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration does not load.
    #[error("configuration: {0}")]
    Config(ConfigErrors),
    /// The configuration has no `gateway:` section.
    #[error("the configuration has no `gateway:` section (listen address and upstream)")]
    NoSection,
    /// The store, metrics or the runtime failed.
    #[error(transparent)]
    Runtime(#[from] floodgate_runtime::RuntimeError),
    /// A TLS certificate, key or CA file could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Anything else at startup.
    #[error("{0}")]
    Startup(String),
}
