//! The client-facing listener: accepts connections (at most
//! `max_connections`, and no more than the open files limit leaves room
//! for), completes the TLS handshake when TLS is on, tells HTTP/2 from
//! HTTP/1.1 (ALPN, else the first bytes) within the header timeout, serves
//! each with hyper under the configured protections (HTTP/1.1 with
//! upgrades), and on shutdown stops accepting and lets every connection
//! finish its requests in flight.
//!
//! When every place is taken, or `accept` fails for want of descriptors,
//! the connections that have waited longest without a request in flight
//! are closed to make room, and a failing `accept` is retried after a
//! growing pause rather than at once ([`accept_loop`], the runtime's, as
//! the decision service's).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_policy::Backend;
use floodgate_runtime::listener::{
    Accepted, Activity, Counters, DrainWatcher, Prefixed, Slot, Sniffed, Streams, accept_loop,
    descriptors, heard, serve_h2, sniff,
};
use http::header::UPGRADE;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::ListenerLimits;
use crate::gateway::Gateway;
use crate::proxy::ClientInfo;
use crate::upgrade::ConnectionGuard;

/// The protocol builders, shared by every connection.
struct Protocols {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    limits: ListenerLimits,
}

impl Protocols {
    fn new(limits: &ListenerLimits) -> Self {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192))
            .max_headers(limits.max_headers)
            .keep_alive(true);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(limits.max_header_bytes.min(u32::MAX as usize) as u32)
            .max_concurrent_streams(limits.max_concurrent_streams)
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(10));
        Protocols {
            h1,
            h2,
            limits: limits.clone(),
        }
    }
}

/// Serves `gateway` on `listener` (TLS with `tls`) until `stop` turns
/// true, then stops accepting and waits for the connections to finish
/// their requests in flight (the caller bounds the wait). The accept loop
/// is the runtime's ([`accept_loop`]): `max_connections` fitted to the
/// open files limit (two descriptors a connection: the client's and an
/// upstream's), room made under a flood, a back-off when descriptors run
/// out.
pub async fn serve<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let protocols = Arc::new(Protocols::new(&limits));
    let places = descriptors::fit_max_connections("gateway", limits.max_connections, 2);
    let counters = Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    };
    accept_loop(listener, places, counters, stop, move |a: Accepted| {
        let (gateway, protocols, tls) = (gateway.clone(), protocols.clone(), tls.clone());
        async move {
            // The slot is held by the connection and by a tunnel it was
            // upgraded to, whichever ends last.
            let conn = Conn {
                gateway,
                peer: a.peer,
                slot: Arc::new(a.slot),
                activity: a.activity,
            };
            match tls {
                None => serve_tcp(conn, &protocols, a.stream, a.watcher).await,
                Some(tls) => serve_tls(conn, &protocols, a.stream, tls, a.watcher).await,
            }
        }
    })
    .await;
}

/// What every request of a connection shares.
struct Conn<B> {
    gateway: Arc<Gateway<B>>,
    peer: SocketAddr,
    slot: Arc<Slot>,
    /// Its requests in flight (a connection with none may be closed to
    /// make room).
    activity: Arc<Activity>,
}

async fn serve_tcp<B: Backend + 'static>(
    conn: Conn<B>,
    protocols: &Protocols,
    mut stream: TcpStream,
    watcher: DrainWatcher,
) {
    // The first bytes (the HTTP/2 preface or a request line) are due within
    // the header timeout too. A connection that has sent nothing when
    // shutdown begins has nothing in flight: it is closed.
    let mut watcher = watcher;
    let sniffed = tokio::select! {
        s = tokio::time::timeout(protocols.limits.header_read_timeout, sniff(&mut stream)) => s,
        _ = watcher.signalled() => return,
    };
    let (kind, prefix) = match sniffed {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => return,
    };
    heard(&conn.activity, kind);
    serve_io(
        conn,
        protocols,
        Prefixed::new(prefix, stream),
        kind,
        false,
        watcher,
    )
    .await;
}

async fn serve_tls<B: Backend + 'static>(
    conn: Conn<B>,
    protocols: &Protocols,
    stream: TcpStream,
    tls: TlsAcceptor,
    watcher: DrainWatcher,
) {
    // The handshake and the first bytes are due within the header timeout.
    let deadline = tokio::time::Instant::now() + protocols.limits.header_read_timeout;
    let mut watcher = watcher;
    let accepted = tokio::select! {
        a = tokio::time::timeout_at(deadline, tls.accept(stream)) => a,
        _ = watcher.signalled() => return,
    };
    let mut stream = match accepted {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, peer = %conn.peer, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let (kind, prefix) = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        (Sniffed::Http2, Bytes::new())
    } else {
        // No ALPN (or http/1.1): HTTP/2 with prior knowledge is still
        // recognised by its preface.
        let sniffed = tokio::select! {
            s = tokio::time::timeout_at(deadline, sniff(&mut stream)) => s,
            _ = watcher.signalled() => return,
        };
        match sniffed {
            Ok(Ok(s)) => s,
            Ok(Err(_)) | Err(_) => return,
        }
    };
    heard(&conn.activity, kind);
    serve_io(
        conn,
        protocols,
        Prefixed::new(prefix, stream),
        kind,
        true,
        watcher,
    )
    .await;
}

async fn serve_io<B, I>(
    conn: Conn<B>,
    protocols: &Protocols,
    io: I,
    kind: Sniffed,
    tls: bool,
    watcher: DrainWatcher,
) where
    B: Backend + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let Conn {
        gateway,
        peer,
        slot,
        activity,
    } = conn;
    let client = move |req: &hyper::Request<Incoming>| ClientInfo {
        peer: Some(peer),
        tls,
        trusted_hop: false,
        guard: req
            .headers()
            .contains_key(UPGRADE)
            .then(|| ConnectionGuard::new(slot.clone())),
        in_flight: Some(activity.begin()),
    };
    let result = match kind {
        Sniffed::Closed => return,
        Sniffed::Http2 => {
            // Every stream is counted open until its response body is
            // dropped; a connection with none for the idle timeout closes.
            let streams = Arc::new(Streams::new());
            let counted = streams.clone();
            let svc = service_fn(move |req: hyper::Request<Incoming>| {
                let open = counted.open();
                let client = client(&req);
                let handled = gateway.clone().handle(req, client);
                async move {
                    let mut res = handled.await?;
                    res.body_mut().hold(open);
                    Ok::<_, std::convert::Infallible>(res)
                }
            });
            let conn = protocols.h2.serve_connection(io, svc);
            let idle = protocols.limits.http2_idle_timeout;
            serve_h2(conn, &streams, idle, watcher).await
        }
        Sniffed::Http1 => {
            let svc = service_fn(move |req: hyper::Request<Incoming>| {
                let client = client(&req);
                gateway.clone().handle(req, client)
            });
            let conn = protocols.h1.serve_connection(io, svc).with_upgrades();
            watcher.watch(conn, |c| c.graceful_shutdown()).await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}
