//! Opening one upstream connection: TCP (no delay, keep-alive, within
//! `connect_timeout`), TLS for `https://` URLs (ALPN `h2` when the
//! upstream protocol is HTTP/2); then, towards HTTP/2, hyper's handshake
//! (fixed windows: each stream's binds, the connection's never does), the
//! connection driven by a task of its own.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::config::{UpstreamConfig, UpstreamProtocol, UpstreamUrl};
use crate::h1::Stream;
use crate::tls::TlsError;
use crate::upload::UploadBody;

/// Each stream's receive window on an HTTP/2 upstream connection: the
/// most of one response the gateway holds while its client does not read
/// it (the stream waits, the others go on).
const UPSTREAM_STREAM_WINDOW: u32 = 256 << 10;
/// The connection's receive window: HTTP/2's largest, so that it never
/// binds before the streams' own — a stalled client's stream holds its own
/// window, never the connection's shared one.
const UPSTREAM_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Name resolution or TCP connect failed.
    #[error("connect to {0}: {1}")]
    Tcp(String, io::Error),
    /// `connect_timeout` elapsed.
    #[error("connect to {0}: timed out")]
    Timeout(String),
    /// The TLS handshake failed (an untrusted or mismatched certificate,
    /// a refused client certificate).
    #[error("TLS with {0}: {1}")]
    Tls(String, io::Error),
    /// The host is not a valid TLS server name.
    #[error("TLS with {0}: invalid server name")]
    ServerName(String),
    /// The HTTP handshake failed.
    #[error("HTTP handshake with {0}: {1}")]
    Handshake(String, hyper::Error),
}

/// Opens connections for one upstream configuration.
pub struct Connector {
    connect_timeout: Duration,
    tls: Option<TlsConnector>,
    h2: http2::Builder<TokioExecutor>,
}

impl Connector {
    /// A connector for `config`; TLS is set up when a URL is `https://`.
    pub fn new(config: &UpstreamConfig) -> Result<Self, TlsError> {
        let tls = if config.urls.iter().any(|u| u.tls) {
            let mut c: ClientConfig = crate::tls::client_config(&config.tls)?;
            if config.protocol == UpstreamProtocol::Http2 {
                c.alpn_protocols = vec![b"h2".to_vec()];
            }
            Some(TlsConnector::from(Arc::new(c)))
        } else {
            None
        };
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .initial_stream_window_size(UPSTREAM_STREAM_WINDOW)
            .initial_connection_window_size(UPSTREAM_CONNECTION_WINDOW)
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        Ok(Connector {
            connect_timeout: config.connect_timeout,
            tls,
            h2,
        })
    }

    /// Opens a connection to `url`: TCP, and TLS for an `https://` URL.
    pub async fn open(&self, url: &UpstreamUrl) -> Result<Stream, ConnectError> {
        let name = url.authority.as_str();
        let host = url.authority.host();
        let port = url.authority.port_u16().unwrap_or(80);
        // Brackets around an IPv6 literal are not part of the address.
        let addr_host = host.trim_start_matches('[').trim_end_matches(']');
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect((addr_host, port)))
            .await
            .map_err(|_| ConnectError::Timeout(name.to_owned()))?
            .map_err(|e| ConnectError::Tcp(name.to_owned(), e))?;
        let _ = tcp.set_nodelay(true);
        let _ = socket_keepalive(&tcp);
        match (&self.tls, url.tls) {
            (Some(tls), true) => {
                let server = ServerName::try_from(addr_host.to_owned())
                    .map_err(|_| ConnectError::ServerName(name.to_owned()))?;
                let stream = tokio::time::timeout(self.connect_timeout, tls.connect(server, tcp))
                    .await
                    .map_err(|_| ConnectError::Timeout(name.to_owned()))?
                    .map_err(|e| ConnectError::Tls(name.to_owned(), e))?;
                Ok(Either::Right(Box::new(stream)))
            }
            _ => Ok(Either::Left(tcp)),
        }
    }

    /// Hands `stream`, opened to `url`, to hyper's HTTP/2 client: its
    /// handshake, then a task that drives the connection.
    pub async fn handshake_http2(
        &self,
        url: &UpstreamUrl,
        stream: Stream,
    ) -> Result<http2::SendRequest<UploadBody>, ConnectError> {
        let (sender, conn) = self
            .h2
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Handshake(url.authority.as_str().to_owned(), e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// TCP keep-alive probes after 60 s idle (dead peers behind NATs).
fn socket_keepalive(tcp: &TcpStream) -> io::Result<()> {
    let sock = socket2::SockRef::from(tcp);
    sock.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(Duration::from_secs(60)))
}
