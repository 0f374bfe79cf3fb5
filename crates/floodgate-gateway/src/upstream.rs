//! The upstream: a pooled keep-alive client (HTTP/1.1, or HTTP/2 with
//! prior knowledge or ALPN), over TCP or TLS (`https://` URLs), the base
//! URLs taken in turn, and the rewriting of a client's request into the
//! upstream's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::header::HOST;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Uri, Version};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{HostHeader, UpstreamConfig, UpstreamProtocol, UpstreamUrl};
use crate::tls::TlsError;

/// The connector: TCP, with TLS for `https://` URLs.
pub type Connector = HttpsConnector<HttpConnector>;

/// The pooled client and where it sends requests.
pub struct Upstream {
    client: Client<Connector, Incoming>,
    urls: Box<[UpstreamUrl]>,
    next: AtomicUsize,
    protocol: UpstreamProtocol,
    host: HostHeader,
    response_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("urls", &self.urls)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be rewritten for the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadTarget;

impl Upstream {
    /// A client for `config` (call inside a tokio runtime). TLS settings
    /// are loaded when a URL is `https://` (a missing CA file, a client key
    /// that does not match its certificate are errors).
    pub fn new(config: &UpstreamConfig) -> Result<Self, TlsError> {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(config.connect_timeout));
        tcp.set_keepalive(Some(Duration::from_secs(60)));
        // The TLS connector wraps it and handles `https://` itself.
        tcp.enforce_http(false);
        let tls = if config.urls.iter().any(|u| u.tls) {
            crate::tls::client_config(&config.tls)?
        } else {
            crate::tls::client::unused_config()?
        };
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let connector = match config.protocol {
            // No ALPN: the upstream speaks HTTP/1.1.
            UpstreamProtocol::Http1 => https.enable_http1().wrap_connector(tcp),
            // ALPN `h2` over TLS; prior knowledge over cleartext.
            UpstreamProtocol::Http2 => https.enable_http2().wrap_connector(tcp),
        };
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle)
            // A request whose connection closed before it was written is
            // sent again on another (it never reached the upstream).
            .retry_canceled_requests(true);
        if config.protocol == UpstreamProtocol::Http2 {
            builder
                .http2_only(true)
                .http2_adaptive_window(true)
                .http2_keep_alive_interval(Duration::from_secs(30))
                .http2_keep_alive_timeout(Duration::from_secs(10));
        }
        Ok(Upstream {
            client: builder.build(connector),
            urls: config.urls.clone().into_boxed_slice(),
            next: AtomicUsize::new(0),
            protocol: config.protocol,
            host: config.host,
            response_timeout: config.response_timeout,
        })
    }

    /// The client.
    pub fn client(&self) -> &Client<Connector, Incoming> {
        &self.client
    }

    /// Longest wait for a response head.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The next base URL (round robin).
    fn pick(&self) -> Option<&UpstreamUrl> {
        match self.urls.len() {
            0 => None,
            1 => self.urls.first(),
            n => self.urls.get(self.next.fetch_add(1, Ordering::Relaxed) % n),
        }
    }

    /// Rewrites a client's request (already stripped of its hop-by-hop
    /// fields) for the upstream: its URI, version and `Host`.
    pub fn prepare(&self, req: &mut Request<Incoming>) -> Result<(), BadTarget> {
        let target = self.pick().ok_or(BadTarget)?;
        let original = std::mem::take(req.uri_mut());
        let pq = original
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let pq = if target.prefix.is_empty() {
            pq
        } else {
            PathAndQuery::try_from(format!("{}{}", target.prefix, pq.as_str()))
                .map_err(|_| BadTarget)?
        };
        let uri = Uri::builder()
            .scheme(target.scheme())
            .authority(target.authority.clone())
            .path_and_query(pq)
            .build()
            .map_err(|_| BadTarget)?;
        *req.uri_mut() = uri;
        match self.host {
            HostHeader::Preserve => {
                // HTTP/2 clients send `:authority` instead of `Host`.
                if !req.headers().contains_key(HOST)
                    && let Some(a) = original.authority()
                    && let Ok(v) = HeaderValue::from_str(a.as_str())
                {
                    req.headers_mut().insert(HOST, v);
                }
            }
            HostHeader::Upstream => {
                // The client sets it from the URI.
                req.headers_mut().remove(HOST);
            }
        }
        *req.version_mut() = match self.protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::Http2 => Version::HTTP_2,
        };
        Ok(())
    }
}
