//! A small HTTP/2 server of the decision service's own, for its gRPC
//! listener (`server.grpc_http2: direct`): unary calls only
//! (`ShouldRateLimit` decided in place, any other unary method answered by
//! tonic's services), with no per-call allocation on the in-memory path
//! and each wake-up's answers written at once.
//!
//! It speaks HTTP/2 as RFC 9113 says for what it serves: the connection's
//! settings, flow control in both directions, header blocks split over
//! `CONTINUATION` frames, HPACK with a dynamic table (RFC 7541), stream
//! limits, resets and a graceful `GOAWAY`. It does not push, takes no
//! priorities into account, and refuses streaming methods.

mod calls;
mod conn;
mod frame;
pub(crate) mod hpack;
mod inbound;
mod request;
mod respond;
mod stream;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate_runtime::listener::{
    ConnectionError, ConnectionLimits, Http2Connection, Http2Server, Io, Streams,
};
use tokio::sync::Notify;
use tonic::service::Routes;

use crate::decision::DecisionService;
use calls::Calls;
use conn::Conn;

/// The gRPC listener's own HTTP/2 server.
pub(crate) struct DirectServer {
    calls: Arc<Calls>,
}

impl DirectServer {
    /// Serves `svc`'s decisions, and `routes` for any other unary call.
    pub(crate) fn new(svc: Arc<DecisionService>, routes: Routes) -> Self {
        DirectServer {
            calls: Arc::new(Calls { svc, routes }),
        }
    }
}

impl Http2Server for DirectServer {
    fn connection(
        &self,
        io: Box<dyn Io>,
        _peer: SocketAddr,
        streams: Streams,
        limits: &ConnectionLimits,
    ) -> Pin<Box<dyn Http2Connection>> {
        let shutdown = Arc::new(Notify::new());
        let conn = Conn::new(self.calls.clone(), streams, limits);
        Box::pin(Connection {
            shutdown: shutdown.clone(),
            run: Box::pin(conn.serve(io, shutdown)),
        })
    }
}

/// A connection being served.
struct Connection {
    shutdown: Arc<Notify>,
    run: Pin<Box<dyn Future<Output = Result<(), ConnectionError>> + Send>>,
}

impl Future for Connection {
    type Output = Result<(), ConnectionError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.run.as_mut().poll(cx)
    }
}

impl Http2Connection for Connection {
    fn graceful_shutdown(self: Pin<&mut Self>) {
        self.shutdown.notify_one();
    }
}
