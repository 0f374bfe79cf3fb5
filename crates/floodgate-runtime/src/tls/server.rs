//! [`ServerTls`]: TLS termination on a listener. The certificate is
//! served through a resolver whose key pair can be swapped while running:
//! [`ServerTls::reload`] re-reads the files when they changed, called at the
//! configuration's pace (new handshakes use the new certificate;
//! established connections keep theirs).

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use floodgate_policy::reload::FileStamp;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ConfigBuilder, ServerConfig, WantsVerifier};
use tokio_rustls::TlsAcceptor;

use super::ListenerTls;
use super::pem::{TlsError, authorities, certificates, private_key};
use super::san::RequireSan;

/// ALPN protocols offered to clients, preferred first.
pub(super) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The certificate currently served.
#[derive(Debug)]
struct Resolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// What the two files looked like when last loaded, to reload only on
/// change (a renewed pair renamed into place often has the sizes of the
/// old one: the files' identity tells them apart).
type Stamp = [Option<FileStamp>; 2];

fn stamp(files: &ListenerTls) -> Stamp {
    [FileStamp::of(&files.cert), FileStamp::of(&files.key)]
}

/// Loads and checks a certificate chain and its key.
pub fn load_certified_key(files: &ListenerTls) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let rustls = |source| TlsError::Rustls {
        context: format!(
            "certificate {} with key {}",
            files.cert.display(),
            files.key.display()
        ),
        source,
    };
    let signing = super::provider()
        .key_provider
        .load_private_key(key)
        .map_err(rustls)?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(rustls)?;
    Ok(certified)
}

/// The clients `files` accept: any (no `client_ca`), or those presenting
/// a certificate issued by `client_ca` (and valid for `client_san`, if
/// given).
fn client_auth(
    builder: ConfigBuilder<ServerConfig, WantsVerifier>,
    files: &ListenerTls,
) -> Result<ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>, TlsError> {
    let Some(ca) = &files.client_ca else {
        return Ok(builder.with_no_client_auth());
    };
    let roots = Arc::new(authorities(ca)?);
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, super::provider())
        .build()
        .map_err(|e| TlsError::Pem {
            path: ca.clone(),
            message: e.to_string(),
        })?;
    let Some(san) = &files.client_san else {
        return Ok(builder.with_client_cert_verifier(verifier));
    };
    let san = super::san::client_san(san).map_err(TlsError::ClientSan)?;
    let verifier = RequireSan {
        inner: verifier,
        san,
    };
    Ok(builder.with_client_cert_verifier(Arc::new(verifier)))
}

/// TLS termination for a listener.
pub struct ServerTls {
    files: ListenerTls,
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
    stamp: Mutex<Stamp>,
}

impl ServerTls {
    /// Loads the certificate and key of `files` and builds the acceptor
    /// (TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`; a client certificate
    /// from `files.client_ca` required if given).
    pub fn new(files: &ListenerTls) -> Result<Self, TlsError> {
        let stamp = stamp(files);
        let certified = load_certified_key(files)?;
        let resolver = Arc::new(Resolver {
            current: ArcSwap::from_pointee(certified),
        });
        let builder = super::versions(ServerConfig::builder_with_provider(super::provider()))?;
        let mut config = client_auth(builder, files)?.with_cert_resolver(resolver.clone());
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(ServerTls {
            files: files.clone(),
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            stamp: Mutex::new(stamp),
        })
    }

    /// The acceptor (cheap to clone).
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Re-reads the files if they changed since the last load (whatever
    /// their metadata says if `forced`: a reload asked for, e.g. on SIGHUP)
    /// and swaps in the new certificate, logging the outcome. On an error
    /// (a half-written file, a key that does not match) the current one
    /// stays and the next call tries again.
    pub fn reload(&self, forced: bool) {
        let now = stamp(&self.files);
        let Ok(mut last) = self.stamp.lock() else {
            return;
        };
        if *last == now && !forced {
            return;
        }
        match load_certified_key(&self.files) {
            Ok(certified) => {
                self.resolver.current.store(Arc::new(certified));
                *last = now;
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate not reloaded; the current one stays");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;

    /// A self-signed certificate for `localhost` and its key, as PEM.
    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    /// What is logged, kept.
    #[derive(Clone, Default)]
    struct Logged(Arc<Mutex<Vec<u8>>>);

    impl Write for Logged {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reload that finds a key not matching the certificate, or an
    /// unreadable file, keeps the current certificate and logs why; the
    /// next good pair is served.
    #[test]
    fn a_bad_reload_keeps_the_current_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let files = ListenerTls {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
            client_san: None,
        };
        let ((cert_a, key_a), (cert_b, key_b)) = (pair(), pair());
        std::fs::write(&files.cert, &cert_a).unwrap();
        std::fs::write(&files.key, &key_a).unwrap();
        let tls = ServerTls::new(&files).unwrap();
        let served = || tls.resolver.current.load().cert[0].to_vec();
        let first = served();

        let logged = Logged::default();
        let writer = logged.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            std::fs::write(&files.key, &key_b).unwrap();
            tls.reload(true);
            assert_eq!(served(), first);
            std::fs::remove_file(&files.cert).unwrap();
            tls.reload(true);
            assert_eq!(served(), first);
            std::fs::write(&files.cert, &cert_b).unwrap();
            tls.reload(true);
        });
        assert_ne!(served(), first, "the good pair is served");
        let log = String::from_utf8(logged.0.lock().unwrap().clone()).unwrap();
        let refused: Vec<&str> = log.lines().filter(|l| l.contains("not reloaded")).collect();
        assert_eq!(refused.len(), 2, "{log}");
        assert!(
            refused[0].contains("tls.key") && refused[1].contains("cannot read"),
            "{log}"
        );
    }
}
