//! TLS on both sides of the gateway, with rustls (the `ring` provider):
//!
//! * [`ServerTls`]: the listener terminates TLS with a certificate and key
//!   from PEM files, offers `h2` and `http/1.1` by ALPN, and picks up a
//!   renewed certificate without a restart.
//! * [`client_config`]: the rustls configuration towards `https://`
//!   upstreams (the system's roots or a CA file, an optional client
//!   certificate).
//! * [`pem`]: reading certificates and keys, with errors naming the file.

pub mod client;
pub mod pem;
pub mod server;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{ConfigBuilder, ConfigSide, WantsVerifier, WantsVersions};

pub use client::client_config;
pub use pem::TlsError;
pub use server::ServerTls;

/// The crypto provider every TLS configuration of the gateway is built
/// with (`ring`). It is also installed as the process default once, so that
/// code building configurations without naming a provider agrees; another
/// crate having installed one first is fine.
pub fn provider() -> Arc<CryptoProvider> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `builder` (of either side's configuration) with TLS 1.2 and 1.3.
fn versions<S: ConfigSide>(
    builder: ConfigBuilder<S, WantsVersions>,
) -> Result<ConfigBuilder<S, WantsVerifier>, TlsError> {
    builder
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            context: "TLS versions".into(),
            source,
        })
}
