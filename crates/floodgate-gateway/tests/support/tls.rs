//! Throwaway certificates (rcgen) and TLS peers for the TLS tests: an
//! HTTPS upstream (the same answers as the cleartext one) and HTTPS
//! clients trusting a given CA.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::{Seen, Upstream, accept_upstream, spawn_upstream_connection};

/// A certificate authority and the files of what it issued, in a
/// temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub ca_file: PathBuf,
}

/// A leaf certificate and its key, as PEM files.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Pki {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca_file = dir.path().join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        Pki { dir, ca, ca_file }
    }

    /// A certificate for `localhost` and 127.0.0.1, files named `name`.
    pub fn leaf(&self, name: &str) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let leaf = Leaf {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }

    /// The roots trusting this CA only.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }
}

fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
}

fn key(path: &Path) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_file(path).unwrap()
}

/// An HTTPS upstream with `leaf`, offering `alpn` (empty: none); with
/// `client_ca`, it requires a client certificate issued by that CA.
pub async fn tls_upstream(leaf: &Leaf, alpn: &[&[u8]], client_ca: Option<&Pki>) -> Upstream {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(ca.roots()),
                provider(),
            )
            .build()
            .unwrap(),
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain(&leaf.cert), key(&leaf.key))
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    accept_upstream(listener, seen.clone(), move |stream, seen| {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(stream).await {
                spawn_upstream_connection(tls, seen);
            }
        });
    });
    Upstream { addr, seen }
}

/// An HTTPS client trusting `roots`: HTTP/2 (ALPN `h2` only) or HTTP/1.1
/// (no ALPN).
pub fn https_client(
    roots: RootCertStore,
    http2: bool,
) -> Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let b = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only();
    let mut client = Client::builder(TokioExecutor::new());
    if http2 {
        client.http2_only(true);
        client.build(b.enable_http2().build())
    } else {
        client.build(b.enable_http1().build())
    }
}

/// The certificate a TLS server at `addr` presents (its leaf, DER).
pub async fn presented(addr: SocketAddr, roots: RootCertStore) -> Vec<u8> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}
