//! TLS peers for the TLS tests (certificates from the testkit's [`Pki`]):
//! an HTTPS upstream (the same answers as the cleartext one) and HTTPS
//! clients trusting a given CA.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub(crate) use floodgate_testkit::tls::{Leaf, Pki};
use floodgate_testkit::tls::{chain, key};

use super::{Seen, Upstream, accept_upstream, spawn_upstream_connection};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An HTTPS upstream with `leaf`, offering `alpn` (empty: none); with
/// `client_ca`, it requires a client certificate issued by that CA.
pub(crate) async fn tls_upstream(leaf: &Leaf, alpn: &[&[u8]], client_ca: Option<&Pki>) -> Upstream {
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
pub(crate) fn https_client(
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
pub(crate) async fn presented(addr: SocketAddr, roots: RootCertStore) -> Vec<u8> {
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
