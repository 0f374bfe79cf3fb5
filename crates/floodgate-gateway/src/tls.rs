//! The rustls configuration towards `https://` upstreams: trusted roots
//! (a CA file, or the system's), an optional client certificate. ALPN is
//! set by the connector from the upstream protocol (`h2` for `http2`).
//! The listener's TLS is every listener's
//! ([`floodgate_runtime::tls`]).

use floodgate_runtime::tls::pem::{authorities, certificates, private_key};
use floodgate_runtime::tls::{provider, versions};
use rustls::{ClientConfig, RootCertStore};

pub use floodgate_runtime::tls::TlsError;

use crate::config::UpstreamTls;

/// The trusted roots: every certificate of `tls.ca`, else the system's.
fn roots(tls: &UpstreamTls) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match &tls.ca {
        Some(path) => store = authorities(path)?,
        None => {
            let native = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(native.certs);
            if added == 0 {
                let why = native.errors.first().map_or_else(
                    || "the system store is empty".to_owned(),
                    std::string::ToString::to_string,
                );
                return Err(TlsError::NoRoots(format!(
                    "{why} (set gateway.upstream.tls.ca)"
                )));
            }
        }
    }
    Ok(store)
}

/// The client configuration for `tls` (TLS 1.2 and 1.3, no ALPN yet).
pub(crate) fn client_config(tls: &UpstreamTls) -> Result<ClientConfig, TlsError> {
    let builder = versions(ClientConfig::builder_with_provider(provider()))?
        .with_root_certificates(roots(tls)?);
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key = private_key(key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|source| TlsError::Rustls {
                    context: format!("client certificate {}", cert.display()),
                    source,
                })
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(TlsError::HalfClientAuth),
    }
}
