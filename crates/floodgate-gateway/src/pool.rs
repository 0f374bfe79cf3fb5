//! The upstream connection pool, per upstream URL: idle HTTP/1.1
//! connections are kept (at most `pool_max_idle`, closed after
//! `pool_idle_timeout`) and taken last in, first out; HTTP/2 has one
//! shared connection, reopened when it closes. A taken HTTP/1.1
//! connection travels with its response body and comes back when the body
//! ends (a body dropped early closes it).
//!
//! An HTTP/1.1 connection has no task of its own: whoever holds it drives
//! it ([`Pooled::drive`]) — the request while it waits for the response
//! head, then the response body as the client's connection pulls it. The
//! client's connection, the request and the upstream exchange then run in
//! one task, as in an event-driven proxy: no hand-over between tasks, no
//! wake-ups across them. While idle in the pool a connection is not
//! polled; a close by the upstream is noticed when it is next taken (or by
//! the reaper), and a request that finds it closed before being written is
//! sent on another connection.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{TrySendError, http1, http2};

use crate::config::UpstreamUrl;
use crate::connect::{ConnectError, Connector, Http1Conn, Sender};

struct Idle {
    sender: http1::SendRequest<Incoming>,
    conn: Option<Box<Http1Conn>>,
    since: Instant,
}

/// The connections to one upstream URL.
pub struct HostPool {
    url: UpstreamUrl,
    idle: Mutex<Vec<Idle>>,
    shared: Mutex<Option<http2::SendRequest<Incoming>>>,
    connecting: tokio::sync::Mutex<()>,
    max_idle: usize,
    idle_timeout: Duration,
}

/// A connection ready for one request.
pub enum Checkout {
    /// An HTTP/1.1 connection, taken from the pool (or new).
    Http1(Pooled),
    /// The shared HTTP/2 connection.
    Http2(http2::SendRequest<Incoming>),
}

/// An HTTP/1.1 connection out of the pool: [`Pooled::release`] gives it
/// back; dropping it closes it. Its holder drives it ([`Pooled::drive`]).
pub struct Pooled {
    /// The sender.
    pub sender: http1::SendRequest<Incoming>,
    /// The connection's future, while it is driven by the holder (`None`
    /// once it ended, or once handed to a task of its own).
    conn: Option<Box<Http1Conn>>,
    /// Whether it served requests before (a request that fails before it is
    /// written may be sent again on another).
    pub reused: bool,
    pool: Weak<HostPool>,
}

impl std::fmt::Debug for Pooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled")
            .field("reused", &self.reused)
            .field("driven", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// Polls a connection as far as it goes now; true when it has ended (closed
/// by either side, or broken), when it must be dropped.
fn drive(conn: &mut Option<Box<Http1Conn>>, cx: &mut Context<'_>) -> bool {
    let Some(c) = conn else {
        return false;
    };
    match c.poll_without_shutdown(cx) {
        Poll::Pending => false,
        Poll::Ready(r) => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
            *conn = None;
            true
        }
    }
}

impl Pooled {
    /// Reads and writes what the connection can now: call it whenever the
    /// exchange is waited on (it registers `cx` for the connection's
    /// readiness). A connection on a task of its own needs nothing.
    #[inline]
    pub fn drive(&mut self, cx: &mut Context<'_>) {
        drive(&mut self.conn, cx);
    }

    /// Hands the connection to a task of its own that also completes
    /// upgrades (`101 Switching Protocols` hands its bytes to the tunnel).
    pub fn spawn_with_upgrades(&mut self) {
        if let Some(conn) = self.conn.take() {
            tokio::spawn(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!(error = %e, "upstream connection ended with an error");
                }
            });
        }
    }

    /// Sends `req`, driving the connection until the response head comes.
    pub async fn send(
        &mut self,
        req: Request<Incoming>,
    ) -> Result<Response<Incoming>, TrySendError<Request<Incoming>>> {
        let Pooled { sender, conn, .. } = self;
        let mut response = std::pin::pin!(sender.try_send_request(req));
        std::future::poll_fn(|cx| {
            drive(conn, cx);
            response.as_mut().poll(cx)
        })
        .await
    }

    /// Back to the pool, if it can serve another request and there is
    /// room.
    pub fn release(mut self) {
        if self.conn.is_some() && !self.sender.is_ready() {
            // The exchange may need one more turn to settle (the end of the
            // body read, the connection back to idle); what is not ready
            // then is still busy and not worth keeping.
            drive(&mut self.conn, &mut Context::from_waker(Waker::noop()));
        }
        if self.sender.is_closed() || !self.sender.is_ready() {
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
                conn: self.conn,
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
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            // One turn of the connection: it notices a close by the
            // upstream, and settles what the last exchange left.
            let ready = std::future::poll_fn(|cx| {
                if drive(&mut idle.conn, cx) {
                    return Poll::Ready(false);
                }
                Poll::Ready(matches!(idle.sender.poll_ready(cx), Poll::Ready(Ok(()))))
            })
            .await;
            if ready {
                return Ok(Checkout::Http1(Pooled {
                    sender: idle.sender,
                    conn: idle.conn,
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
            Sender::Http1(sender, conn) => Ok(Checkout::Http1(Pooled {
                sender,
                conn: Some(conn),
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
    fn shared_h2(&self) -> Option<http2::SendRequest<Incoming>> {
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

    /// Closes idle connections past the idle timeout, and those the
    /// upstream closed.
    pub fn reap(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            let timeout = self.idle_timeout;
            let mut cx = Context::from_waker(Waker::noop());
            idle.retain_mut(|i| {
                !drive(&mut i.conn, &mut cx) && !i.sender.is_closed() && i.since.elapsed() < timeout
            });
        }
    }

    /// Idle HTTP/1.1 connections now.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len())
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
