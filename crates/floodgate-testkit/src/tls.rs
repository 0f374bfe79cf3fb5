//! Throwaway certificates (rcgen) and TLS clients: a test CA issuing
//! certificates for `localhost` and 127.0.0.1 as PEM files, and
//! connections trusting it, with or without a client certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
pub use rustls::ClientConfig;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A certificate authority and the files of what it issued, in a
/// temporary directory.
pub struct Pki {
    /// Where the files are.
    pub dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub ca_file: PathBuf,
}

/// A leaf certificate and its key, as PEM files.
pub struct Leaf {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
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
        self.leaf_for(name, &["localhost", "127.0.0.1"])
    }

    /// A certificate for the subject alternative names `sans` (DNS names
    /// or IP addresses), files named `name`.
    pub fn leaf_for(&self, name: &str, sans: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let sans = sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let params = CertificateParams::new(sans).unwrap();
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

/// Every certificate of the PEM file at `path`.
pub fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
}

/// The private key of the PEM file at `path`.
pub fn key(path: &Path) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_file(path).unwrap()
}

/// A client configuration trusting `roots`, presenting `client` if any,
/// offering `alpn`.
pub fn client_config(roots: RootCertStore, client: Option<&Leaf>, alpn: &[&[u8]]) -> ClientConfig {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some(leaf) => builder
            .with_client_auth_cert(chain(&leaf.cert), key(&leaf.key))
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A TLS connection to 127.0.0.1:`port` (as `localhost`) with `config`.
pub async fn tls_connect(port: u16, config: ClientConfig) -> std::io::Result<TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await
}

/// The certificate the TLS server at 127.0.0.1:`port` presents (its
/// leaf, DER) to a client trusting `roots`.
pub async fn presented(port: u16, roots: RootCertStore) -> Vec<u8> {
    let tls = tls_connect(port, client_config(roots, None, &[]))
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// Why a TLS call failed (the handshake, the connection, the request).
pub type CallError = Box<dyn std::error::Error + Send + Sync>;

/// An HTTP/2 connection over TLS (ALPN `h2`) to 127.0.0.1:`port` with
/// `config`, driven by a task of the current runtime.
pub async fn h2_tls_connect<B>(
    port: u16,
    mut config: ClientConfig,
) -> Result<hyper::client::conn::http2::SendRequest<B>, CallError>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tls = tls_connect(port, config).await?;
    let io = hyper_util::rt::TokioIo::new(tls);
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await?;
    tokio::spawn(conn);
    Ok(send)
}

/// The status of `GET path` over HTTP/1.1 and TLS to 127.0.0.1:`port`
/// with `config`.
pub async fn https_get(port: u16, path: &str, config: ClientConfig) -> Result<u16, CallError> {
    let tls = tls_connect(port, config).await?;
    let io = hyper_util::rt::TokioIo::new(tls);
    let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    Ok(send.send_request(req).await?.status().as_u16())
}
