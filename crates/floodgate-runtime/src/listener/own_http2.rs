//! An HTTP/2 server of a frontend's own, serving a listener's HTTP/2
//! connections in place of hyper's. Everything around the connection stays
//! the listener's: the cap on connections, TLS, the PROXY protocol header,
//! the preface's deadline, the socket's send timeout, the connection's age,
//! the idle timeout and the drain on shutdown.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::activity::{Activity, InFlight};
use super::connection::ConnectionLimits;

/// A connection's byte stream, whatever carries it (TCP, a Unix socket,
/// TLS), with the send timeout applied.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why a connection ended in error (logged at debug level).
pub type ConnectionError = Box<dyn StdError + Send + Sync>;

/// Serves HTTP/2 connections.
pub trait Http2Server: Send + Sync + 'static {
    /// The connection of `peer` on `io`, whose first bytes are the
    /// client's preface, under `limits` (the concurrent streams, the
    /// header list's size); it tells `streams` when it has streams open.
    fn connection(
        &self,
        io: Box<dyn Io>,
        peer: SocketAddr,
        streams: Streams,
        limits: &ConnectionLimits,
    ) -> Pin<Box<dyn Http2Connection>>;
}

/// One connection being served: resolves when it has ended.
pub trait Http2Connection: Future<Output = Result<(), ConnectionError>> + Send {
    /// Asks the connection to finish (shutdown, its age, idleness):
    /// `GOAWAY`, its streams in flight answered, then closed.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

/// Whether a connection has streams open: the listener closes one that
/// has none for the idle timeout, and, when full, chooses among those to
/// make room.
pub struct Streams(pub(super) Arc<Activity>);

/// The connection has streams open while this is held.
pub struct Open {
    _in_flight: InFlight,
}

impl Streams {
    /// The connection has streams open until the value is dropped.
    pub fn open(&self) -> Open {
        Open {
            _in_flight: self.0.begin(),
        }
    }

    /// A stream was reset for waiting past the send timeout for room in
    /// its client's window: counted as hyper's are
    /// (`floodgate_send_timeouts_total{kind="stream"}`).
    pub fn send_timed_out(&self) {
        super::send::count_timeout("stream");
    }
}
