//! The rustls configuration of a client: trusted roots (a CA file, or the
//! system's) and an optional client certificate (mTLS). ALPN is left to
//! the caller.

use std::path::Path;

use rustls::{ClientConfig, RootCertStore};

use super::pem::{TlsError, authorities, certificates, private_key};
use super::{provider, versions};

/// The files of a client's TLS.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientFiles<'a> {
    /// PEM bundle of the authorities trusted (none: the system's roots).
    pub ca: Option<&'a Path>,
    /// PEM certificate chain shown to the server, with `key`.
    pub cert: Option<&'a Path>,
    /// PEM private key of `cert`.
    pub key: Option<&'a Path>,
}

/// The client configuration of `files` (TLS 1.2 and 1.3, no ALPN);
/// `ca_setting` names the setting to give when the system has no roots.
pub fn client_config(files: ClientFiles<'_>, ca_setting: &str) -> Result<ClientConfig, TlsError> {
    let builder = versions(ClientConfig::builder_with_provider(provider()))?
        .with_root_certificates(roots(files.ca, ca_setting)?);
    match (files.cert, files.key) {
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

/// The trusted roots: every certificate of `ca`, else the system's.
fn roots(ca: Option<&Path>, ca_setting: &str) -> Result<RootCertStore, TlsError> {
    if let Some(path) = ca {
        return authorities(path);
    }
    let mut store = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = store.add_parsable_certificates(native.certs);
    if added == 0 {
        let why = native.errors.first().map_or_else(
            || "the system store is empty".to_owned(),
            std::string::ToString::to_string,
        );
        return Err(TlsError::NoRoots(format!("{why} (set {ca_setting})")));
    }
    Ok(store)
}
