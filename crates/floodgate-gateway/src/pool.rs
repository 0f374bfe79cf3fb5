//! The upstream connection pool, per upstream URL: idle HTTP/1.1
//! connections are kept (at most `pool_max_idle`, closed after
//! `pool_idle_timeout`) and taken last in, first out; HTTP/2 has one
//! shared connection, reopened when it closes. A taken HTTP/1.1
//! connection travels with its response body and comes back when the body
//! ends (a body dropped early closes it).
//!
//! Idle HTTP/1.1 connections are of one kind, whichever client carried
//! their last exchange ([`Connection`]): a request without a body prefers
//! one of the gateway's own client, a request with a body one of hyper's,
//! among the most recently used; hyper's client takes over a connection of
//! the own client when a request with a body gets one.

use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use hyper::client::conn::http2;

use crate::config::UpstreamUrl;
use crate::connect::{ConnectError, Connector};
use crate::connection::Connection;
use crate::h1;
use crate::upload::UploadBody;

/// How many of the most recently used idle connections a request looks
/// at for one of the client it prefers.
const PREFERENCE_WINDOW: usize = 8;

struct Idle {
    conn: Connection,
    since: Instant,
}

/// The connections to one upstream URL.
pub struct HostPool {
    url: UpstreamUrl,
    idle: Mutex<Vec<Idle>>,
    http2: Mutex<Option<http2::SendRequest<UploadBody>>>,
    connecting: tokio::sync::Mutex<()>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl HostPool {
    /// An empty pool for `url`.
    pub fn new(url: UpstreamUrl, max_idle: usize, idle_timeout: Duration) -> Self {
        HostPool {
            url,
            idle: Mutex::new(Vec::new()),
            http2: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            max_idle,
            idle_timeout,
        }
    }

    /// The URL.
    pub fn url(&self) -> &UpstreamUrl {
        &self.url
    }

    /// The most recently used idle connection, of the gateway's own client
    /// if `own` (else of hyper's) when one is among the last few.
    fn pop_idle(&self, own: bool) -> Option<Idle> {
        let mut idle = self.idle.lock().ok()?;
        let n = idle.len();
        let preferred = idle
            .iter()
            .rev()
            .take(PREFERENCE_WINDOW)
            .position(|i| matches!(i.conn, Connection::Own(_)) == own);
        match preferred {
            Some(back) => Some(idle.remove(n - 1 - back)),
            None => idle.pop(),
        }
    }

    /// An HTTP/1.1 connection for one request (`own`: one without a body,
    /// for the gateway's own client): an idle one that is still open and
    /// ready, else a new one. The flag says whether it served requests
    /// before (a request that fails before it is written may then be sent
    /// again on another).
    pub async fn checkout(
        &self,
        connector: &Connector,
        own: bool,
    ) -> Result<(Connection, bool), ConnectError> {
        while let Some(idle) = self.pop_idle(own) {
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            match idle.conn {
                Connection::Own(mut conn) => {
                    if !conn.is_usable() {
                        continue;
                    }
                    if own {
                        return Ok((Connection::Own(conn), true));
                    }
                    // A request with a body: hyper's client takes the
                    // connection over (boxed, as in `open`: rare, large).
                    let stream = conn.into_stream();
                    let taken = Box::pin(connector.handshake(self.url(), stream)).await?;
                    return Ok((taken, true));
                }
                Connection::Hyper { mut sender, abort } => {
                    if sender.is_closed() {
                        continue;
                    }
                    // Returned when its response ended, the connection may
                    // still be finishing the exchange (a request body still
                    // streaming up): then it stays for later and a new one
                    // is opened, rather than waiting behind it.
                    let ready = sender.is_ready()
                        || std::future::poll_fn(|cx| Poll::Ready(sender.poll_ready(cx).is_ready()))
                            .await;
                    if !ready {
                        self.checkin(Connection::Hyper { sender, abort });
                        break;
                    }
                    if sender.is_ready() {
                        return Ok((Connection::Hyper { sender, abort }, true));
                    }
                }
                Connection::Http2(_) => {}
            }
        }
        // Boxed: opening a connection (TLS included) is a large future, and
        // it is rare; inline, every request's future would carry (and move)
        // its kilobytes.
        let stream = Box::pin(connector.open(&self.url)).await?;
        let conn = if own {
            Connection::Own(h1::Conn::new(stream))
        } else {
            Box::pin(connector.handshake(self.url(), stream)).await?
        };
        Ok((conn, false))
    }

    /// The shared HTTP/2 connection, if open.
    fn shared_http2(&self) -> Option<http2::SendRequest<UploadBody>> {
        let shared = self.http2.lock().ok()?;
        shared.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// The shared HTTP/2 connection, opened by the first request that
    /// finds none (the others wait for it).
    pub async fn checkout_http2(&self, connector: &Connector) -> Result<Connection, ConnectError> {
        if let Some(s) = self.shared_http2() {
            return Ok(Connection::Http2(s));
        }
        let _one = self.connecting.lock().await;
        if let Some(s) = self.shared_http2() {
            return Ok(Connection::Http2(s));
        }
        let stream = Box::pin(connector.open(&self.url)).await?;
        let conn = Box::pin(connector.handshake(self.url(), stream)).await?;
        if let (Connection::Http2(s), Ok(mut shared)) = (&conn, self.http2.lock()) {
            *shared = Some(s.clone());
        }
        Ok(conn)
    }

    /// Gives back an HTTP/1.1 connection whose exchange ended cleanly, if
    /// there is room.
    pub fn checkin(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Closes idle connections past the idle timeout, or closed by the
    /// upstream.
    pub fn reap(&self) {
        let timeout = self.idle_timeout;
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain_mut(|i| i.since.elapsed() < timeout && i.conn.is_usable());
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
