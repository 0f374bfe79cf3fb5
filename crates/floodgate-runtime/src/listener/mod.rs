//! The listeners' machinery, one for every binary: the accept loop (a cap
//! on connections fitted to the open files limit, room made under a flood,
//! a back-off when descriptors run out), the protections of each
//! connection (header, idle and HTTP/2 limits), and the graceful drain.

mod accept;
mod connection;
mod connections;
pub mod descriptors;
mod drain;
mod idle;
mod sniff;

use std::convert::Infallible;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body::Body;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use accept::{Accepted, Counters, Slot, accept_loop};
pub use connection::{ConnectionLimits, GracefulShutdown, Held, Http, Protocols, serve_h2};
pub use connections::{Activity, HEAD_GRACE, HEAD_GRACE_WHEN_FULL, InFlight};
pub use drain::{Drain, DrainWatcher};
pub use idle::{OpenStream, Streams};
pub use sniff::{H2_PREFACE, Prefixed, Sniffed, sniff};

use crate::error::RuntimeError;

/// Connections the admin listener takes at once, on its own (a flood of
/// the public listeners leaves it reachable).
pub const ADMIN_CONNECTIONS: usize = 32;

/// Binds `addr`, logging it as the `what` listener, and a warning when it
/// is reachable beyond loopback.
pub async fn bind(what: &str, addr: SocketAddr) -> Result<TcpListener, RuntimeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RuntimeError::Bind { addr, source })?;
    if let Ok(a) = listener.local_addr() {
        tracing::info!(listener = what, addr = %a, "listening");
        if !a.ip().is_loopback() {
            tracing::warn!(
                listener = what,
                addr = %a,
                "listening beyond loopback: reachable from other hosts"
            );
        }
    }
    Ok(listener)
}

/// Serves `service` on `listener` under `http`'s protections, at most
/// `places` connections at once ([`accept_loop`]), until `stop` turns true;
/// then lets the requests in flight finish. Connections are counted in
/// `floodgate_connections{listener}` ([`Counters::of`]).
pub fn spawn_service<S, B>(
    what: &'static str,
    listener: TcpListener,
    service: S,
    http: Http,
    places: usize,
    stop: watch::Receiver<bool>,
) -> JoinHandle<Result<(), String>>
where
    S: hyper::service::Service<
            http::Request<Incoming>,
            Response = http::Response<B>,
            Error = Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let http = Arc::new(http);
    tokio::spawn(async move {
        accept_loop(listener, places, Counters::of(what), stop, move |a| {
            let (http, service) = (http.clone(), service.clone());
            async move { http.serve(a, service).await }
        })
        .await;
        Ok(())
    })
}

/// [`spawn_service`] for an axum router.
pub fn spawn_router(
    what: &'static str,
    listener: TcpListener,
    router: axum::Router,
    http: Http,
    places: usize,
    stop: watch::Receiver<bool>,
) -> JoinHandle<Result<(), String>> {
    let service = hyper_util::service::TowerToHyperService::new(router);
    spawn_service(what, listener, service, http, places, stop)
}
