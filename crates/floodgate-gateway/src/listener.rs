//! The client-facing listener: the runtime's accept loop ([`accept_loop`]:
//! at most `max_connections`, fitted to the open files limit, room made
//! under a flood, a back-off when descriptors run out) and connection
//! protections ([`Http`]: header, idle and HTTP/2 limits, the graceful
//! drain), with the gateway's own part: TLS terminated within the header
//! timeout (ALPN `h2`, else HTTP/2 with prior knowledge told by its
//! preface), and each request handed to the [`Gateway`] with what the
//! proxy needs to know of its connection.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use floodgate_policy::Backend;
use floodgate_runtime::listener::{
    Accepted, Counters, DrainWatcher, Http, Prefixed, Protocols, Slot, Sniffed, accept_loop,
    descriptors, sniff,
};
use http::header::UPGRADE;
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsAcceptor;

use crate::config::ListenerLimits;
use crate::gateway::Gateway;
use crate::proxy::ClientInfo;
use crate::upgrade::ConnectionGuard;

/// Serves `gateway` on `listener` (TLS with `tls`) until `stop` turns
/// true, then stops accepting and waits for the connections to finish
/// their requests in flight (the caller bounds the wait). Two descriptors
/// a connection count against the open files limit: the client's and an
/// upstream's.
pub async fn serve<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let http = Arc::new(Http::new(&limits.connection(), Protocols::Http1AndHttp2));
    let places = descriptors::fit_max_connections("gateway", limits.max_connections, 2);
    let counters = Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    };
    let header_timeout = limits.header_read_timeout;
    accept_loop(listener, places, counters, stop, move |a: Accepted| {
        let (gateway, http, tls) = (gateway.clone(), http.clone(), tls.clone());
        async move {
            let Accepted {
                mut stream,
                peer,
                slot,
                activity,
                mut watcher,
            } = a;
            // The TLS handshake and the first bytes are due within the
            // header timeout. A connection that has sent nothing when
            // shutdown begins has nothing in flight: it is closed.
            let deadline = Instant::now() + header_timeout;
            // The slot is held by the connection and by a tunnel it was
            // upgraded to, whichever ends last.
            let conn = Conn {
                gateway,
                peer,
                slot: Arc::new(slot),
            };
            let Some(tls) = tls else {
                let Some((kind, prefix)) = first_bytes(&mut stream, deadline, &mut watcher).await
                else {
                    return;
                };
                let service = conn.service(false);
                let io = Prefixed::new(prefix, stream);
                return http
                    .serve_io(io, kind, peer, activity, watcher, service)
                    .await;
            };
            let accepted = tokio::select! {
                a = timeout_at(deadline, tls.accept(stream)) => a,
                _ = watcher.signalled() => return,
            };
            let mut stream = match accepted {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let (kind, prefix) = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                (Sniffed::Http2, Bytes::new())
            } else {
                // No ALPN (or http/1.1): HTTP/2 with prior knowledge is
                // still recognised by its preface.
                match first_bytes(&mut stream, deadline, &mut watcher).await {
                    Some(s) => s,
                    None => return,
                }
            };
            let service = conn.service(true);
            let io = Prefixed::new(prefix, stream);
            http.serve_io(io, kind, peer, activity, watcher, service)
                .await;
        }
    })
    .await;
}

/// What the first bytes of a connection say (read by `deadline`, unless
/// shutdown comes first), and the bytes.
async fn first_bytes<I: AsyncRead + AsyncWrite + Unpin>(
    io: &mut I,
    deadline: Instant,
    watcher: &mut DrainWatcher,
) -> Option<(Sniffed, Bytes)> {
    tokio::select! {
        s = timeout_at(deadline, sniff(io)) => s.ok()?.ok(),
        _ = watcher.signalled() => None,
    }
}

/// What every request of a connection shares.
struct Conn<B> {
    gateway: Arc<Gateway<B>>,
    peer: SocketAddr,
    slot: Arc<Slot>,
}

impl<B: Backend + 'static> Conn<B> {
    /// The connection's service: each request to the gateway, with what
    /// the proxy needs to know of the connection (`tls`: a TLS one).
    fn service(
        self,
        tls: bool,
    ) -> impl hyper::service::Service<
        hyper::Request<Incoming>,
        Response = hyper::Response<crate::gateway::GatewayBody>,
        Error = std::convert::Infallible,
        Future: Send,
    > + Send
    + Sync
    + 'static {
        let Conn {
            gateway,
            peer,
            slot,
        } = self;
        service_fn(move |req: hyper::Request<Incoming>| {
            let client = ClientInfo {
                peer,
                tls,
                trusted_hop: false,
                guard: req
                    .headers()
                    .contains_key(UPGRADE)
                    .then(|| ConnectionGuard::new(slot.clone())),
            };
            gateway.clone().handle(req, client)
        })
    }
}
