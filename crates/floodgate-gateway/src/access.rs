//! The access log (`gateway.access_log`): one line per request, as a
//! `tracing` event of target [`TARGET`] at level INFO, written with the
//! other logs (text or JSON lines on standard error, `server.log`).
//!
//! Written when the response head is ready: `status` is the one sent to
//! the client, `micros` the time from the request head to the response
//! head, `limited` whether the limiter answered (a rejection, a shed
//! request, a limiter failure) rather than the upstream. The path is logged
//! without its query (queries often carry credentials), at most
//! [`MAX_PATH`] bytes.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use http::{Method, Request, StatusCode, Version};

/// The target of access log events (`floodgate::access=info` in a log
/// filter selects them).
pub const TARGET: &str = "floodgate::access";

/// The longest path logged (longer ones are cut, marked with `…`).
pub const MAX_PATH: usize = 1024;

/// What is known of a request when it arrives.
pub(crate) struct AccessEntry {
    start: Instant,
    method: Method,
    path: Box<str>,
    version: Version,
    peer: SocketAddr,
    /// The client address: the peer's, or the one found after trusted
    /// proxies.
    client: IpAddr,
}

impl AccessEntry {
    pub(crate) fn begin<T>(req: &Request<T>, peer: SocketAddr) -> Box<AccessEntry> {
        let path = req.uri().path();
        let path: Box<str> = if path.len() <= MAX_PATH {
            path.into()
        } else {
            // A URI path is ASCII: any byte is a character boundary.
            format!("{}…", &path[..MAX_PATH]).into()
        };
        Box::new(AccessEntry {
            start: Instant::now(),
            method: req.method().clone(),
            path,
            version: req.version(),
            peer,
            client: peer.ip(),
        })
    }

    /// The client address the limiter resolved (after trusted proxies).
    pub(crate) fn set_client(&mut self, client: IpAddr) {
        self.client = client;
    }

    /// Writes the line for a response of `status`.
    pub(crate) fn finish(self, status: StatusCode, limited: bool) {
        let micros = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        tracing::info!(
            target: TARGET,
            method = %self.method,
            path = %self.path,
            version = ?self.version,
            status = status.as_u16(),
            limited,
            micros,
            peer = %self.peer,
            client = %self.client,
        );
    }
}
