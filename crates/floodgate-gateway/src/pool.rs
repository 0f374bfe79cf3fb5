//! The upstream connection pool, per upstream URL: idle HTTP/1.1
//! connections are kept (at most `pool_max_idle`, closed after
//! `pool_idle_timeout`) and taken last in, first out; HTTP/2 has one
//! shared connection, reopened when it closes. A taken HTTP/1.1
//! connection travels with its response body and comes back when the body
//! ends (a body dropped early closes it).
//!
//! HTTP/1.1 connections are of two kinds, kept apart: hyper's (driven by a
//! task of their own, for requests with a body and upgrades) and the
//! gateway's own client's ([`h1`], for requests without a
//! body).

use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::upload::UploadBody;
use hyper::client::conn::{http1, http2};

use crate::config::UpstreamUrl;
use crate::connect::{Abort, ConnectError, Connector, Sender};
use crate::h1;

struct Idle {
    sender: http1::SendRequest<UploadBody>,
    abort: Abort,
    since: Instant,
}

/// The connections to one upstream URL.
pub struct HostPool {
    url: UpstreamUrl,
    idle: Mutex<Vec<Idle>>,
    direct: Mutex<Vec<(h1::Conn, Instant)>>,
    shared: Mutex<Option<http2::SendRequest<UploadBody>>>,
    connecting: tokio::sync::Mutex<()>,
    max_idle: usize,
    idle_timeout: Duration,
}

/// A connection ready for one request.
pub enum Checkout {
    /// An HTTP/1.1 connection, taken from the pool (or new).
    Http1(Pooled),
    /// The shared HTTP/2 connection.
    Http2(http2::SendRequest<UploadBody>),
}

/// An HTTP/1.1 connection out of the pool: [`Pooled::release`] gives it
/// back; dropping it closes it.
pub struct Pooled {
    /// The sender.
    pub sender: http1::SendRequest<UploadBody>,
    /// Whether it served requests before (a request that fails before it is
    /// written may be sent again on another).
    pub reused: bool,
    abort: Abort,
    pool: Weak<HostPool>,
}

impl std::fmt::Debug for Pooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled")
            .field("reused", &self.reused)
            .finish_non_exhaustive()
    }
}

impl Pooled {
    /// Leaves the connection to run to its own end outside the pool (an
    /// upgraded connection, now a tunnel's).
    pub fn detach(self) {
        self.abort.detach();
    }

    /// Back to the pool, if it can serve another request and there is
    /// room.
    pub fn release(self) {
        if self.sender.is_closed() {
            return;
        }
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        if let Ok(mut idle) = pool.idle.lock()
            && idle.len() < pool.max_idle
        {
            idle.push(Idle {
                sender: self.sender,
                abort: self.abort,
                since: Instant::now(),
            });
        }
    }
}

impl HostPool {
    /// An empty pool for `url`.
    pub fn new(url: UpstreamUrl, max_idle: usize, idle_timeout: Duration) -> Self {
        HostPool {
            url,
            idle: Mutex::new(Vec::new()),
            direct: Mutex::new(Vec::new()),
            shared: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            max_idle,
            idle_timeout,
        }
    }

    /// The URL.
    pub fn url(&self) -> &UpstreamUrl {
        &self.url
    }

    fn pop_idle(&self) -> Option<Idle> {
        self.idle.lock().ok()?.pop()
    }

    /// An HTTP/1.1 connection for one request: an idle one that is still
    /// open and ready (the most recently used first), else a new one.
    pub async fn checkout(
        self: &Arc<Self>,
        connector: &Connector,
    ) -> Result<Checkout, ConnectError> {
        while let Some(mut idle) = self.pop_idle() {
            if idle.sender.is_closed() || idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            // Returned when its response ended, the connection may still be
            // finishing the exchange (a request body still streaming up):
            // then it stays for later and a new one is opened, rather than
            // waiting behind it.
            let ready = idle.sender.is_ready()
                || std::future::poll_fn(|cx| Poll::Ready(idle.sender.poll_ready(cx).is_ready()))
                    .await;
            if !ready {
                if let Ok(mut pool) = self.idle.lock() {
                    pool.push(idle);
                }
                break;
            }
            if idle.sender.is_ready() {
                return Ok(Checkout::Http1(Pooled {
                    sender: idle.sender,
                    abort: idle.abort,
                    reused: true,
                    pool: Arc::downgrade(self),
                }));
            }
        }
        self.connect(connector).await
    }

    async fn connect(self: &Arc<Self>, connector: &Connector) -> Result<Checkout, ConnectError> {
        // Boxed: opening a connection (TLS included) is a large future, and
        // it is rare; inline, every request's future would carry (and move)
        // its kilobytes.
        match Box::pin(connector.connect(&self.url)).await? {
            Sender::Http1(sender, abort) => Ok(Checkout::Http1(Pooled {
                sender,
                abort,
                reused: false,
                pool: Arc::downgrade(self),
            })),
            Sender::Http2(sender) => {
                if let Ok(mut shared) = self.shared.lock() {
                    *shared = Some(sender.clone());
                }
                Ok(Checkout::Http2(sender))
            }
        }
    }

    /// The shared HTTP/2 connection, if open.
    fn shared_h2(&self) -> Option<http2::SendRequest<UploadBody>> {
        let shared = self.shared.lock().ok()?;
        shared.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// The shared HTTP/2 connection, opened by the first request that
    /// finds none (the others wait for it).
    pub async fn checkout_h2(
        self: &Arc<Self>,
        connector: &Connector,
    ) -> Result<Checkout, ConnectError> {
        if let Some(s) = self.shared_h2() {
            return Ok(Checkout::Http2(s));
        }
        let _one = self.connecting.lock().await;
        if let Some(s) = self.shared_h2() {
            return Ok(Checkout::Http2(s));
        }
        self.connect(connector).await
    }

    /// A connection for the gateway's own client: an idle one that is
    /// still usable (the most recently used first), else a new one. The
    /// flag says whether it served requests before.
    pub async fn checkout_direct(
        &self,
        connector: &Connector,
    ) -> Result<(h1::Conn, bool), ConnectError> {
        loop {
            let Some((mut conn, since)) = self.direct.lock().ok().and_then(|mut d| d.pop()) else {
                break;
            };
            if since.elapsed() < self.idle_timeout && conn.is_usable() {
                return Ok((conn, true));
            }
        }
        // Boxed, as in `connect`: rare, and large.
        let stream = Box::pin(connector.open(&self.url)).await?;
        Ok((h1::Conn::new(stream), false))
    }

    /// Gives back a connection of the gateway's own client whose exchange
    /// ended cleanly, if there is room.
    pub fn checkin_direct(&self, conn: h1::Conn) {
        if let Ok(mut direct) = self.direct.lock()
            && direct.len() < self.max_idle
        {
            direct.push((conn, Instant::now()));
        }
    }

    /// Closes idle connections past the idle timeout, or closed by the
    /// upstream.
    pub fn reap(&self) {
        let timeout = self.idle_timeout;
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|i| !i.sender.is_closed() && i.since.elapsed() < timeout);
        }
        if let Ok(mut direct) = self.direct.lock() {
            direct.retain_mut(|(c, since)| since.elapsed() < timeout && c.is_usable());
        }
    }

    /// Idle HTTP/1.1 connections now (of both kinds).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len()) + self.direct.lock().map_or(0, |d| d.len())
    }
}

/// Reaps the pools every `every` while any of them is alive.
pub fn spawn_reaper(pools: &[Arc<HostPool>], every: Duration) {
    let weak: Vec<Weak<HostPool>> = pools.iter().map(Arc::downgrade).collect();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let mut alive = false;
            for p in weak.iter().filter_map(Weak::upgrade) {
                p.reap();
                alive = true;
            }
            if !alive {
                return;
            }
        }
    });
}
