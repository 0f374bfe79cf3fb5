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
    /// A Unix socket listener could not be created.
    #[error("cannot listen on the Unix socket {}: {}", path.display(), unix_bind_reason(source))]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
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

/// Why a Unix socket could not be bound, a file already at its path told
/// apart.
fn unix_bind_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AlreadyExists => {
            format!("the path exists ({e}): a file, or a socket another process listens on")
        }
        _ => e.to_string(),
    }
}
