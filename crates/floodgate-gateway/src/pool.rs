//! The upstream connection pool, per upstream URL: idle HTTP/1.1
//! connections are kept (at most `pool_max_idle`, closed after
//! `pool_idle_timeout`) and taken last in, first out; HTTP/2 has one
//! shared connection, reopened when it closes. A taken HTTP/1.1
//! connection travels with its response body and comes back when the body
//! ends (a body dropped early closes it).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use hyper::client::conn::http2;

use crate::config::UpstreamUrl;
use crate::connect::{ConnectError, Connector};
use crate::h1;
use crate::upload::UploadBody;

struct Idle {
    conn: h1::Conn,
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

    /// An HTTP/1.1 connection for one request: the most recently used idle
    /// one that is still open, else a new one. The flag says whether it
    /// served requests before (a request that fails before it is written
    /// may then be sent again on another).
    pub async fn checkout(&self, connector: &Connector) -> Result<(h1::Conn, bool), ConnectError> {
        while let Some(mut idle) = self.idle.lock().ok().and_then(|mut i| i.pop()) {
            if idle.since.elapsed() < self.idle_timeout && idle.conn.is_usable() {
                return Ok((idle.conn, true));
            }
        }
        // Boxed: opening a connection (TLS included) is a large future, and
        // it is rare; inline, every request's future would carry (and move)
        // its kilobytes.
        let stream = Box::pin(connector.open(&self.url)).await?;
        Ok((h1::Conn::new(stream), false))
    }

    /// The shared HTTP/2 connection, if open.
    fn shared_http2(&self) -> Option<http2::SendRequest<UploadBody>> {
        let shared = self.http2.lock().ok()?;
        shared.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// The shared HTTP/2 connection, opened by the first request that
    /// finds none (the others wait for it).
    pub async fn checkout_http2(
        &self,
        connector: &Connector,
    ) -> Result<http2::SendRequest<UploadBody>, ConnectError> {
        if let Some(s) = self.shared_http2() {
            return Ok(s);
        }
        let _one = self.connecting.lock().await;
        if let Some(s) = self.shared_http2() {
            return Ok(s);
        }
        let stream = Box::pin(connector.open(&self.url)).await?;
        let sender = Box::pin(connector.handshake_http2(self.url(), stream)).await?;
        if let Ok(mut shared) = self.http2.lock() {
            *shared = Some(sender.clone());
        }
        Ok(sender)
    }

    /// Gives back an HTTP/1.1 connection whose exchange ended cleanly, if
    /// there is room.
    pub fn checkin(&self, conn: h1::Conn) {
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
pub(crate) fn spawn_reaper(pools: &[Arc<HostPool>], every: Duration) {
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
