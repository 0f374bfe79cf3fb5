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
//! are closed to make room ([`Connections`]), and a failing `accept` is
//! retried after a growing pause rather than at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_policy::Backend;
use http::header::UPGRADE;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_rustls::TlsAcceptor;

use crate::config::ListenerLimits;
use crate::connections::{Activity, Connections};
use crate::descriptors;
use crate::drain::{Drain, DrainWatcher};
use crate::gateway::Gateway;
use crate::idle::Streams;
use crate::io::{Prefixed, Sniffed, sniff};
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

/// Connections closed at a time to make room when descriptors run out.
const EVICT_BATCH: usize = 8;
/// How often a new connection waiting for a place looks again for one to
/// close (a connection may have finished its request since).
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// Serves `gateway` on `listener` (TLS with `tls`) until `shutdown`
/// resolves, then stops accepting and waits for the connections to finish
/// their requests in flight (the caller bounds the wait).
pub async fn serve<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let protocols = Arc::new(Protocols::new(&limits));
    let places = max_connections(limits.max_connections);
    // Connections closed at a time when every place is taken: room for
    // the next few, without waiting for one closed connection at a time.
    let room_batch = (places / 16).clamp(1, EVICT_BATCH);
    let permits = Arc::new(Semaphore::new(places));
    let registry = Arc::new(Connections::new());
    let graceful = Drain::new();
    let connections = metrics::gauge!("floodgate_gateway_connections");
    let mut accepting = Accepting::default();
    tokio::pin!(shutdown);
    'accepting: loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            a = accepting.accept(&listener, &registry) => a,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => break,
            // Every place taken: room is made by closing the connection
            // that has waited longest without a request, else this one
            // waits for a connection to end.
            Err(TryAcquireError::NoPermits) => loop {
                registry.evict_waiting(room_batch);
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break 'accepting,
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => break p,
                        Err(_) => break 'accepting,
                    },
                    _ = tokio::time::sleep(ROOM_RETRY) => {}
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let gateway = gateway.clone();
        let protocols = protocols.clone();
        let connections = connections.clone();
        let tls = tls.clone();
        let registered = registry.register();
        // A request sent with the connection is there already: its head is
        // arriving, not a connection that waits for nothing.
        if has_bytes(&stream) {
            registered.activity().heard();
        }
        tokio::spawn(async move {
            connections.increment(1.0);
            // The slot is held by the connection and by a tunnel it was
            // upgraded to, whichever ends last.
            let slot = Arc::new(Slot {
                _permit: permit,
                gauge: connections,
            });
            let activity = registered.activity().clone();
            let conn = Conn {
                gateway,
                peer,
                slot,
                activity: activity.clone(),
            };
            let serving = async {
                match tls {
                    None => serve_tcp(conn, &protocols, stream, watcher).await,
                    Some(tls) => serve_tls(conn, &protocols, stream, tls, watcher).await,
                }
            };
            tokio::select! {
                _ = serving => {}
                _ = closed_to_make_room(&activity) => {
                    tracing::debug!(%peer, "connection closed to make room");
                }
            }
            drop(registered);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// `configured`, lowered to what the open files limit (raised to its
/// hard limit first) leaves room for, with a warning.
fn max_connections(configured: usize) -> usize {
    let Some(files) = descriptors::raise_limit() else {
        return configured;
    };
    let budget = descriptors::connection_budget(files);
    if budget < configured {
        tracing::warn!(
            max_connections = configured,
            open_files_limit = files,
            lowered_to = budget,
            "max_connections is more than the open files limit allows (two descriptors per \
             connection): lowered; raise the limit (ulimit -n, LimitNOFILE) to use the setting"
        );
    }
    budget.min(configured)
}

/// The first bytes of a connection have been read: an HTTP/1.1 head is
/// arriving (left its grace to finish); an HTTP/2 connection without a
/// stream yet is idle, whatever it sent (its preface and settings).
fn heard(activity: &Activity, kind: Sniffed) {
    match kind {
        Sniffed::Http1 => activity.heard(),
        Sniffed::Http2 | Sniffed::Closed => activity.silent(),
    }
}

/// Whether bytes wait to be read on `stream` (one non-blocking peek).
fn has_bytes(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    matches!(socket2::SockRef::from(stream).peek(&mut byte), Ok(n) if n > 0)
}

/// Resolves once the connection has been chosen to close to make room
/// and has no request in flight.
async fn closed_to_make_room(activity: &Activity) {
    loop {
        activity.evicted().await;
        if !activity.keep() {
            return;
        }
    }
}

/// The accept loop's state through a run of failures.
#[derive(Default)]
struct Accepting {
    /// Failures in a row, and when the first of them happened.
    failing: Option<(u64, tokio::time::Instant)>,
}

impl Accepting {
    /// The pause after `failures` failures in a row: 10 ms, doubling up to
    /// 1 s.
    fn pause(failures: u64) -> Duration {
        Duration::from_millis(10u64 << failures.saturating_sub(1).min(7))
            .min(Duration::from_secs(1))
    }

    /// Accepts the next connection. When descriptors (or kernel memory)
    /// run out, the connections that have waited longest are closed and
    /// `accept` is retried after a growing pause, never at once; a run of
    /// failures is logged when it starts and when it ends.
    async fn accept(
        &mut self,
        listener: &TcpListener,
        registry: &Connections,
    ) -> (TcpStream, SocketAddr) {
        let errors = metrics::counter!("floodgate_gateway_accept_errors_total");
        loop {
            match listener.accept().await {
                Ok(a) => {
                    if let Some((failures, since)) = self.failing.take() {
                        tracing::info!(
                            failures,
                            after = ?since.elapsed(),
                            "accepting connections again"
                        );
                    }
                    return a;
                }
                Err(e) if descriptors::connection_only(&e) => {
                    tracing::debug!(error = %e, "a connection went away before it was accepted");
                }
                Err(e) => {
                    errors.increment(1);
                    let closed = if descriptors::exhausted(&e) {
                        registry.evict_waiting(EVICT_BATCH)
                    } else {
                        0
                    };
                    let (failures, _) =
                        self.failing.get_or_insert((0, tokio::time::Instant::now()));
                    *failures += 1;
                    let pause = Self::pause(*failures);
                    if *failures == 1 {
                        tracing::warn!(
                            error = %e,
                            closed_waiting_connections = closed,
                            "accept failed; retrying with a growing pause"
                        );
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

/// A client connection's place under `max_connections`.
struct Slot {
    _permit: OwnedSemaphorePermit,
    gauge: metrics::Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
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
            .then(|| ConnectionGuard(slot.clone() as Arc<dyn std::any::Any + Send + Sync>)),
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
            serve_h2(conn, &streams, idle, watcher, |c| c.graceful_shutdown()).await
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

/// Drives an HTTP/2 connection: on shutdown, or once it has had no open
/// stream for `idle`, it is asked to close gracefully (`GOAWAY`); a client
/// that opens no stream in the next `idle` either is disconnected.
async fn serve_h2<C>(
    conn: C,
    streams: &Streams,
    idle: Duration,
    mut watcher: DrainWatcher,
    graceful: impl FnOnce(std::pin::Pin<&mut C>),
) -> Result<(), hyper::Error>
where
    C: std::future::Future<Output = Result<(), hyper::Error>>,
{
    let mut conn = std::pin::pin!(conn);
    let idled = tokio::select! {
        out = conn.as_mut() => return out,
        _ = watcher.signalled() => false,
        _ = streams.idle_for(idle) => true,
    };
    graceful(conn.as_mut());
    if !idled {
        return conn.await;
    }
    tokio::select! {
        out = conn.as_mut() => out,
        _ = streams.idle_for(idle) => {
            tracing::debug!("idle HTTP/2 connection closed");
            Ok(())
        }
    }
}
