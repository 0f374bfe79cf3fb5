//! Certificates and private keys from PEM files, and the errors of the TLS
//! setup.

use std::path::{Path, PathBuf};

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A certificate file holds no PEM certificate.
    #[error("{}: no PEM certificate (-----BEGIN CERTIFICATE-----) found", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A key file holds no usable PEM private key.
    #[error("{}: no PEM private key (PKCS#8, PKCS#1 or SEC1) found", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// A PEM section is malformed.
    #[error("{}: malformed PEM: {message}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate, the key or the combination (a key
    /// that does not match its certificate, an unsupported key type).
    #[error("{context}: {source}")]
    Rustls {
        /// What was being built.
        context: String,
        /// Why rustls refused.
        source: rustls::Error,
    },
    /// No trusted root certificate: the system has none and no `ca` file is
    /// configured.
    #[error("no trusted root certificates: {0}")]
    NoRoots(String),
    /// A client certificate's required name is not one.
    #[error("client SAN: {0}")]
    ClientSan(String),
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error("a client certificate needs both `cert` and `key`")]
    HalfClientAuth,
}

/// Largest certificate, key or CA bundle file read (4 MiB: a full public
/// CA bundle is about 200 KB).
pub const MAX_PEM_BYTES: u64 = 4 << 20;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    floodgate_policy::read::read_bounded(path, MAX_PEM_BYTES).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of the PEM file at `path` (a chain: leaf first), at
/// least one.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let out = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if out.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(out)
}

/// The first private key of the PEM file at `path`.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        other => TlsError::Pem {
            path: path.to_owned(),
            message: other.to_string(),
        },
    })
}

/// The authorities of the PEM bundle at `path`, as trusted roots.
pub fn authorities(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store.add(cert).map_err(|source| TlsError::Rustls {
            context: format!("CA file {}", path.display()),
            source,
        })?;
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = certificates(&missing).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        assert!(matches!(
            certificates(&empty),
            Err(TlsError::NoCertificate { .. })
        ));
        assert!(matches!(private_key(&empty), Err(TlsError::NoKey { .. })));
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        assert!(certificates(&broken).is_err());
    }
}
