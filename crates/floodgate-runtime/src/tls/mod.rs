//! TLS with rustls (the `ring` provider), for every listener and for the
//! gateway's upstreams:
//!
//! * [`ServerTls`]: a listener terminates TLS with a certificate and key
//!   from PEM files, offers `h2` and `http/1.1` by ALPN, asks clients for a
//!   certificate from a CA when one is given (mTLS), and picks up a renewed
//!   certificate without a restart.
//!   A client certificate may also be required to carry a name ([`san`]).
//! * [`client_config`]: a client's trusted roots (a CA file or the
//!   system's) and certificate, for the gateway's upstreams and the
//!   tracing exporter's collector.
//! * [`pem`]: reading certificates, keys and CA bundles, with errors
//!   naming the file.

mod client;
pub mod pem;
pub mod san;
mod server;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

pub use tokio_rustls::TlsAcceptor;

use rustls::crypto::CryptoProvider;
use rustls::{ConfigBuilder, ConfigSide, WantsVerifier, WantsVersions};

pub use client::{ClientFiles, client_config};
pub use pem::TlsError;
pub use server::{ServerTls, load_certified_key};

/// TLS on a listener: the files it is set up from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerTls {
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM bundle of the authorities client certificates must come from
    /// (none: no client certificate asked for; some: one required, mTLS).
    pub client_ca: Option<PathBuf>,
    /// A name (DNS name or IP address) the client certificate must be
    /// valid for, besides coming from `client_ca` ([`san`]).
    pub client_san: Option<String>,
}

/// The certificates of a process's listeners, reloaded together at the
/// configuration's pace (listeners are added while the reloads already
/// run: the list is behind a lock, taken at startup and on reloads only).
#[derive(Default)]
pub struct Certificates(Mutex<Vec<Arc<ServerTls>>>);

impl Certificates {
    /// The acceptor of a listener with TLS `files` (none: cleartext),
    /// its certificate reloaded with the others'.
    pub fn add(&self, files: Option<ListenerTls>) -> Result<Option<TlsAcceptor>, TlsError> {
        let Some(files) = files else { return Ok(None) };
        let tls = Arc::new(ServerTls::new(&files)?);
        let acceptor = tls.acceptor().clone();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tls);
        Ok(Some(acceptor))
    }

    /// Re-reads every certificate whose files changed (all of them if
    /// `forced`), as [`ServerTls::reload`] does.
    pub fn reload(&self, forced: bool) {
        let all = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for tls in all {
            tls.reload(forced);
        }
    }
}

/// The crypto provider every TLS configuration is built with (`ring`). It
/// is also installed as the process default once, so that code building
/// configurations without naming a provider agrees; another crate having
/// installed one first is fine.
pub fn provider() -> Arc<CryptoProvider> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `builder` (of either side's configuration) with TLS 1.2 and 1.3.
pub fn versions<S: ConfigSide>(
    builder: ConfigBuilder<S, WantsVersions>,
) -> Result<ConfigBuilder<S, WantsVerifier>, TlsError> {
    builder
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            context: "TLS versions".into(),
            source,
        })
}
