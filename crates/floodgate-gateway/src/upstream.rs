//! The upstream: where requests go (the base URLs, taken in turn), how a
//! client's request is rewritten for it, and sending it on a pooled
//! connection ([`pool`](crate::pool)): HTTP/1.1, or HTTP/2 with prior
//! knowledge or ALPN, over TCP or TLS (`https://` URLs).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate_http::identity::escapes_root;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri, Version};

use crate::config::{HostHeader, UpstreamConfig, UpstreamProtocol, UpstreamUrl};
use crate::connect::Connector;
use crate::connection::{ExchangeError, Unsent, UpstreamBody, send_http1, send_http2};
use crate::pool::{HostPool, spawn_reaper};
use crate::tls::TlsError;
use crate::upload::UploadBody;

/// Attempts for a request whose reused connection closed before the
/// request was written (it never reached the upstream).
const ATTEMPTS: usize = 8;

/// The pooled connections and where requests go.
pub struct Upstream {
    pools: Box<[Arc<HostPool>]>,
    /// `Host` of each URL (the default port left out).
    hosts: Box<[HeaderValue]>,
    connector: Connector,
    next: AtomicUsize,
    protocol: UpstreamProtocol,
    host: HostHeader,
    response_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&UpstreamUrl> = self.pools.iter().map(|p| p.url()).collect();
        f.debug_struct("Upstream")
            .field("urls", &urls)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// `host[:port]`, the port left out when it is the scheme's default.
fn host_value(url: &UpstreamUrl) -> HeaderValue {
    let a = &url.authority;
    let default = if url.tls { 443 } else { 80 };
    let text = match a.port_u16() {
        Some(p) if p != default => a.as_str().to_owned(),
        _ => a.host().to_owned(),
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}

impl Upstream {
    /// Pools for `config` (call inside a tokio runtime: idle connections
    /// are reaped by a task). TLS settings are loaded when a URL is
    /// `https://` (a missing CA file, a client key that does not match its
    /// certificate are errors).
    pub fn new(config: &UpstreamConfig) -> Result<Self, TlsError> {
        let connector = Connector::new(config)?;
        let pools: Box<[Arc<HostPool>]> = config
            .urls
            .iter()
            .map(|u| {
                Arc::new(HostPool::new(
                    u.clone(),
                    config.pool_max_idle,
                    config.pool_idle_timeout,
                ))
            })
            .collect();
        let every = (config.pool_idle_timeout / 2)
            .clamp(Duration::from_millis(100), Duration::from_secs(30));
        spawn_reaper(&pools, every);
        Ok(Upstream {
            hosts: config.urls.iter().map(host_value).collect(),
            pools,
            connector,
            next: AtomicUsize::new(0),
            protocol: config.protocol,
            host: config.host,
            response_timeout: config.response_timeout,
        })
    }

    /// Longest wait for a response head.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Idle pooled connections now, over every URL.
    pub fn idle_connections(&self) -> usize {
        self.pools.iter().map(|p| p.idle_count()).sum()
    }

    /// The next URL (round robin).
    fn pick(&self) -> Option<usize> {
        match self.pools.len() {
            0 => None,
            1 => Some(0),
            n => Some(self.next.fetch_add(1, Ordering::Relaxed) % n),
        }
    }

    /// Rewrites a client's request (already stripped of its hop-by-hop
    /// fields, its path normal) for the upstream: its URI (origin-form
    /// towards HTTP/1.1, absolute towards HTTP/2), version and authority.
    /// Returns the URL chosen, for [`send`](Self::send); none when the
    /// target cannot be rewritten, or would leave the URL's path prefix
    /// (`/..` joined to `/public`; see [`escapes_root`]). `has_host`: the
    /// request has a `Host` field.
    ///
    /// The authority goes once: towards HTTP/1.1 as `Host`, towards
    /// HTTP/2 as `:authority` alone (a `Host` beside it is refused by
    /// servers that find them different, nginx among them).
    pub fn prepare<B>(&self, req: &mut Request<B>, has_host: bool) -> Option<usize> {
        let target = self.pick()?;
        let url = self.pools[target].url();
        let original = std::mem::take(req.uri_mut());
        let pq = original
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let pq = if url.prefix.is_empty() {
            pq
        } else {
            if escapes_root(pq.path().as_bytes()) {
                return None;
            }
            PathAndQuery::try_from(format!("{}{}", url.prefix, pq.as_str())).ok()?
        };
        let http2 = self.protocol == UpstreamProtocol::Http2;
        if http2 {
            let authority = match self.host {
                HostHeader::Preserve if has_host => {
                    let host = req.headers_mut().remove(HOST)?;
                    Authority::try_from(host.as_bytes()).ok()?
                }
                HostHeader::Preserve => original
                    .authority()
                    .cloned()
                    .unwrap_or_else(|| url.authority.clone()),
                HostHeader::Upstream => {
                    req.headers_mut().remove(HOST);
                    url.authority.clone()
                }
            };
            *req.uri_mut() = Uri::builder()
                .scheme(url.scheme())
                .authority(authority)
                .path_and_query(pq)
                .build()
                .ok()?;
            *req.version_mut() = Version::HTTP_2;
            return Some(target);
        }
        *req.uri_mut() = Uri::from(pq);
        match self.host {
            // HTTP/2 clients send `:authority` instead of `Host`.
            HostHeader::Preserve if !has_host => {
                let from_client = original
                    .authority()
                    .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
                let host = from_client.unwrap_or_else(|| self.hosts[target].clone());
                req.headers_mut().insert(HOST, host);
            }
            HostHeader::Preserve => {}
            HostHeader::Upstream => {
                req.headers_mut().insert(HOST, self.hosts[target].clone());
            }
        }
        *req.version_mut() = Version::HTTP_11;
        Some(target)
    }

    /// Sends a prepared request to URL `target` (`upgrade`: it asks for
    /// one, with its `Upgrade` field), on a pooled connection
    /// (the gateway's own client towards HTTP/1.1, hyper's towards
    /// HTTP/2); the response's body carries the connection back to the
    /// pool when it ends. A request
    /// a reused connection failed before the upstream acted on it is sent
    /// again on another.
    ///
    /// An `async` block rather than an `async fn`: its future holds the
    /// request once, not once more as a parameter moved into the body.
    #[allow(clippy::manual_async_fn)]
    pub fn send(
        &self,
        target: usize,
        mut req: Request<UploadBody>,
        upgrade: bool,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, ExchangeError>> + Send {
        async move {
            let pool = &self.pools[target];
            let mut attempt = 0;
            loop {
                attempt += 1;
                let reused;
                let sent = match self.protocol {
                    UpstreamProtocol::Http1 => {
                        let conn;
                        (conn, reused) = pool.checkout(&self.connector).await?;
                        send_http1(conn, req, upgrade, pool).await
                    }
                    UpstreamProtocol::Http2 => {
                        reused = true;
                        let sender = pool.checkout_http2(&self.connector).await?;
                        // Boxed: the rarer path's state stays out of every
                        // request's future.
                        Box::pin(send_http2(sender, req)).await
                    }
                };
                match sent {
                    Ok(res) => return Ok(res),
                    Err(Unsent {
                        error,
                        request: Some(again),
                    }) if reused && attempt < ATTEMPTS => {
                        tracing::debug!(%error, "reused upstream connection failed; retrying");
                        req = again;
                    }
                    Err(unsent) => return Err(unsent.error),
                }
            }
        }
    }
}
