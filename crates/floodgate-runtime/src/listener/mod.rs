//! The listeners' machinery, one for every binary: the accept loop (a cap
//! on connections fitted to the open files limit, room made under a flood,
//! a back-off when descriptors run out), the protections of each
//! connection (header, idle, send and HTTP/2 limits, its age, the PROXY
//! protocol header), and the graceful drain.

mod accept;
mod activity;
mod age;
mod connection;
pub mod descriptors;
mod own_http2;
pub mod proxy_protocol;
mod send;
mod sniff;
mod socket;
mod stall;

use std::convert::Infallible;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use accept::accept_loop;

pub use accept::{Counters, Slot};
pub use connection::{ConnectionLimits, Http, Protocols};
pub use own_http2::{ConnectionError, Http2Connection, Http2Server, Io, Open, Streams};
pub use proxy_protocol::ProxyProtocol;
pub use sniff::{Prefixed, Sniffed, sniff};
pub use socket::{Listen, UNIX_PEER, UnixSocket};

use crate::error::RuntimeError;

/// Connections the admin listener takes at once, on its own (a flood of
/// the public listeners leaves it reachable).
pub const ADMIN_CONNECTIONS: usize = 32;

/// Binds `addr`, logging it as the `what` listener, and a warning when it
/// is reachable beyond loopback. `[::]` listens on IPv4 and IPv6 alike,
/// whatever the system's default for IPv6 sockets.
pub async fn bind(what: &str, addr: SocketAddr) -> Result<TcpListener, RuntimeError> {
    let listener = bind_socket(addr).map_err(|source| RuntimeError::Bind { addr, source })?;
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

/// A listening socket on `addr` as tokio's `TcpListener::bind` makes it
/// (address reuse, the standard library's backlog), dual-stack when `addr`
/// is `[::]`.
fn bind_socket(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(128)?;
    TcpListener::from_std(socket.into())
}

/// What a listener serves: a hyper service that answers every request
/// (its failures are responses) with a body of [`ResponseBody`].
pub trait HttpService<B>:
    hyper::service::Service<
        Request<Incoming>,
        Response = Response<B>,
        Error = Infallible,
        Future: Send + 'static,
    > + Send
    + Sync
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<B>,
            Error = Infallible,
            Future: Send + 'static,
        > + Send
        + Sync
        + 'static
{
}

/// The body of a listener's responses.
pub trait ResponseBody:
    Body<Data = Bytes, Error: Into<Box<dyn StdError + Send + Sync>>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: Body<Data = Bytes, Error: Into<Box<dyn StdError + Send + Sync>>> + Send + 'static
{
}

/// Serves on `listener` (TCP or a [`UnixSocket`]) under `http`'s protections, TLS terminated by
/// `tls` first if any, at most `places` connections at once (room made
/// under a flood, counted in `counters`), until `stop` turns true; then
/// stops accepting and waits for the connections to finish their requests
/// in flight (the caller bounds the wait). Each connection's service is
/// made by `service` from its client's address and its place under the
/// cap (held until the connection and whatever it was upgraded to end).
pub async fn serve<L: Listen, S, B>(
    listener: L,
    places: usize,
    counters: Counters,
    http: Http,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
    service: impl Fn(SocketAddr, &Arc<Slot>) -> S + Send + Sync + 'static,
) where
    S: HttpService<B>,
    B: ResponseBody,
{
    let shared = Arc::new((http, tls, service));
    accept_loop(listener, places, counters, stop, move |a| {
        let shared = shared.clone();
        async move {
            let (http, tls, service) = &*shared;
            http.serve(a, tls.as_ref(), service).await;
        }
    })
    .await;
}

/// [`serve`] in a task, TLS terminated by `tls` if any, with the same
/// `service` on every connection (an axum router through
/// [`TowerToHyperService`](hyper_util::service::TowerToHyperService));
/// connections are counted in `floodgate_connections{listener}`
/// ([`Counters::of`]).
pub fn spawn_service<L: Listen, S, B>(
    what: &'static str,
    listener: L,
    service: S,
    http: Http,
    tls: Option<TlsAcceptor>,
    places: usize,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()>
where
    S: HttpService<B> + Clone,
    B: ResponseBody,
{
    let counters = Counters::of(what);
    let service = move |_: SocketAddr, _: &Arc<Slot>| service.clone();
    tokio::spawn(serve(listener, places, counters, http, tls, stop, service))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[::]` takes IPv4 connections too, on one socket, even where the
    /// system's default for IPv6 sockets is IPv6 only.
    #[tokio::test]
    async fn the_ipv6_wildcard_listens_on_both_families() {
        let listener = bind("test", "[::]:0".parse().unwrap()).await.unwrap();
        assert!(!socket2::SockRef::from(&listener).only_v6().unwrap());
        let port = listener.local_addr().unwrap().port();
        for ip in ["127.0.0.1", "::1"] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let client = tokio::net::TcpStream::connect((ip, port));
            let (client, accepted) = tokio::join!(client, listener.accept());
            assert!(client.is_ok() && accepted.is_ok(), "{ip}");
        }
    }
}
