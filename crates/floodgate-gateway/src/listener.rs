//! The client-facing listener: accepts connections (at most
//! `max_connections`), tells HTTP/2 from HTTP/1.1 within the header
//! timeout, serves each with hyper under the configured protections, and
//! on shutdown stops accepting and lets every connection finish its
//! requests in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::Backend;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::config::ListenerLimits;
use crate::gateway::Gateway;
use crate::io::{Prefixed, Sniffed, sniff};

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

/// Serves `gateway` on `listener` until `shutdown` resolves, then stops
/// accepting and waits up to `grace` for the connections to finish their
/// requests in flight. Returns whether they all did.
pub async fn serve<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    listener: TcpListener,
    limits: ListenerLimits,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
) -> bool {
    let protocols = Arc::new(Protocols::new(&limits));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let connections = metrics::gauge!("floodgate_gateway_connections");
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let gateway = gateway.clone();
        let protocols = protocols.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            connections.increment(1.0);
            serve_connection(gateway, &protocols, stream, peer, watcher).await;
            connections.decrement(1.0);
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(grace = ?grace, "draining connections");
    tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_ok()
}

async fn serve_connection<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    protocols: &Protocols,
    mut stream: TcpStream,
    peer: SocketAddr,
    watcher: hyper_util::server::graceful::Watcher,
) {
    // The first bytes (the HTTP/2 preface or a request line) are due within
    // the header timeout too.
    let sniffed =
        tokio::time::timeout(protocols.limits.header_read_timeout, sniff(&mut stream)).await;
    let (kind, prefix) = match sniffed {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => return,
    };
    let io = TokioIo::new(Prefixed::new(prefix, stream));
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(gateway.handle(req, peer).await) }
    });
    let result = match kind {
        Sniffed::Closed => return,
        Sniffed::Http2 => watcher.watch(protocols.h2.serve_connection(io, svc)).await,
        Sniffed::Http1 => watcher.watch(protocols.h1.serve_connection(io, svc)).await,
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}
