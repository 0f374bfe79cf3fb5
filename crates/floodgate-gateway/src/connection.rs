//! One upstream connection, whichever client carries its exchanges: the
//! gateway's own HTTP/1.1 client ([`h1`](crate::h1): requests without a
//! body, written and answered in the request's own task), hyper's HTTP/1.1
//! client (requests with a body, upgrades; driven by a task of its own), or
//! the pool's shared HTTP/2 connection. A connection carries a request and
//! hands its response body the connection, which goes back to its pool when
//! the body ends ([`UpstreamBody`]).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use tokio::task::AbortHandle;

use crate::connect::ConnectError;
use crate::h1::{self, FramingError};
use crate::pool::HostPool;
use crate::upload::UploadBody;

/// An upstream connection (see the module docs).
pub enum Connection {
    /// HTTP/1.1, on the gateway's own client.
    Own(h1::Conn),
    /// HTTP/1.1, on hyper's client; closed when `abort` is dropped.
    Hyper {
        /// The request sender.
        sender: http1::SendRequest<UploadBody>,
        /// The connection task's off switch.
        abort: Abort,
    },
    /// HTTP/2, shared by concurrent requests.
    Http2(http2::SendRequest<UploadBody>),
}

/// Held with a connection hyper's client drives: dropping it closes the
/// connection at once, even mid-exchange (an exchange given up on — a
/// timeout — must not keep a request body or an upstream connection
/// busy). [`detach`](Abort::detach) leaves the connection to finish by
/// itself (an upgraded one, now a tunnel's).
#[derive(Debug)]
pub struct Abort(pub(crate) Option<AbortHandle>);

impl Abort {
    /// Lets the connection run to its own end.
    pub fn detach(mut self) {
        self.0 = None;
    }
}

impl Drop for Abort {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// Why an exchange with the upstream broke, whichever client carried it.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// No connection could be opened.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The request head could not be written whole (so the upstream did
    /// not act on it).
    #[error("writing the request: {0}")]
    Write(io::Error),
    /// The connection closed (or was reset) before any byte of a response.
    #[error("the connection closed before a response")]
    Closed,
    /// Reading failed mid-response.
    #[error("reading the response: {0}")]
    Read(io::Error),
    /// The connection closed mid-response.
    #[error("the connection closed mid-response")]
    Incomplete,
    /// The response was malformed.
    #[error(transparent)]
    Framing(#[from] FramingError),
    /// Hyper's client failed.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
}

impl ExchangeError {
    /// Whether a request the gateway's own client failed to exchange can
    /// be sent again on another connection: it was not written whole, or
    /// (for an idempotent method, RFC 9110 §9.2.2) the connection closed
    /// before answering.
    pub fn may_retry(&self, method: &http::Method) -> bool {
        use http::Method;
        match self {
            ExchangeError::Write(_) => true,
            ExchangeError::Closed => matches!(
                *method,
                Method::GET
                    | Method::HEAD
                    | Method::OPTIONS
                    | Method::TRACE
                    | Method::PUT
                    | Method::DELETE
            ),
            _ => false,
        }
    }
}

/// A request a connection could not exchange, given back when it may be
/// sent again on another connection.
pub struct Unsent {
    /// What broke.
    pub error: ExchangeError,
    /// The request, when the upstream did not act on it.
    pub request: Option<Request<UploadBody>>,
}

impl From<hyper::client::conn::TrySendError<Request<UploadBody>>> for Unsent {
    fn from(mut e: hyper::client::conn::TrySendError<Request<UploadBody>>) -> Self {
        Unsent {
            // Never written: safe to send again on another connection.
            request: e.take_message(),
            error: e.into_error().into(),
        }
    }
}

impl Connection {
    /// Sends `req` (prepared for the upstream); the response's body carries
    /// the connection, back to `pool` when it ends.
    ///
    /// An `async` block rather than an `async fn`: its future holds the
    /// request and the connection once, not once more as parameters moved
    /// into the body.
    #[allow(clippy::manual_async_fn)]
    pub fn send(
        self,
        req: Request<UploadBody>,
        pool: &Arc<HostPool>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, Unsent>> + Send {
        async move {
            match self {
                Connection::Own(mut conn) => {
                    let (parts, body) = req.into_parts();
                    match conn
                        .request(&parts.method, &parts.uri, &parts.headers)
                        .await
                    {
                        Ok(head) => {
                            let body = h1::ResponseBody::new(
                                conn,
                                head.framing,
                                head.keep_alive,
                                Arc::downgrade(pool),
                            );
                            Ok(Response::from_parts(head.parts, UpstreamBody::Own(body)))
                        }
                        Err(error) => {
                            let again = error.may_retry(&parts.method);
                            Err(Unsent {
                                error,
                                request: again.then(|| Request::from_parts(parts, body)),
                            })
                        }
                    }
                }
                // Boxed: the rarer paths' state stays out of every request's
                // future.
                Connection::Hyper { sender, abort } => {
                    Box::pin(send_http1(sender, abort, req, pool)).await
                }
                Connection::Http2(sender) => Box::pin(send_http2(sender, req)).await,
            }
        }
    }

    /// Whether an idle connection can carry another request (no system
    /// call for hyper's; see [`h1::Conn::is_usable`] for the own client's).
    pub fn is_usable(&mut self) -> bool {
        match self {
            Connection::Own(conn) => conn.is_usable(),
            Connection::Hyper { sender, .. } => !sender.is_closed(),
            Connection::Http2(sender) => !sender.is_closed(),
        }
    }
}

async fn send_http1(
    mut sender: http1::SendRequest<UploadBody>,
    abort: Abort,
    req: Request<UploadBody>,
    pool: &Arc<HostPool>,
) -> Result<Response<UpstreamBody>, Unsent> {
    match sender.try_send_request(req).await {
        Ok(res) => {
            let lease = Lease {
                sender,
                abort,
                pool: Arc::downgrade(pool),
            };
            Ok(res.map(|body| UpstreamBody::hyper(body, Some(lease))))
        }
        Err(e) => Err(Unsent::from(e)),
    }
}

async fn send_http2(
    mut sender: http2::SendRequest<UploadBody>,
    req: Request<UploadBody>,
) -> Result<Response<UpstreamBody>, Unsent> {
    if let Err(e) = sender.ready().await {
        return Err(Unsent {
            error: e.into(),
            request: None,
        });
    }
    match sender.try_send_request(req).await {
        Ok(res) => Ok(res.map(|body| UpstreamBody::hyper(body, None))),
        Err(e) => Err(Unsent::from(e)),
    }
}

/// A connection hyper's HTTP/1.1 client drives, out of the pool for one
/// exchange: back to the pool when its response body ends, closed when
/// dropped before.
pub struct Lease {
    sender: http1::SendRequest<UploadBody>,
    abort: Abort,
    pool: Weak<HostPool>,
}

impl Lease {
    fn release(self) {
        if self.sender.is_closed() {
            return;
        }
        if let Some(pool) = self.pool.upgrade() {
            pool.checkin(Connection::Hyper {
                sender: self.sender,
                abort: self.abort,
            });
        }
    }
}

/// An upstream response's body, carrying its connection back to the pool
/// when it ends.
pub enum UpstreamBody {
    /// From the gateway's own client.
    Own(h1::ResponseBody),
    /// From hyper's client (with its HTTP/1.1 connection; none over the
    /// shared HTTP/2 one).
    Hyper {
        /// The body.
        body: Incoming,
        /// Its connection, until the body ends.
        lease: Option<Lease>,
    },
}

impl UpstreamBody {
    fn hyper(body: Incoming, lease: Option<Lease>) -> Self {
        let lease = match lease {
            // Nothing to read: the connection is free already.
            Some(l) if body.is_end_stream() => {
                l.release();
                None
            }
            l => l,
        };
        UpstreamBody::Hyper { body, lease }
    }

    /// Leaves the connection to run to its own end outside the pool (an
    /// upgraded connection, now a tunnel's).
    pub fn detach(&mut self) {
        if let UpstreamBody::Hyper { lease, .. } = self
            && let Some(l) = lease.take()
        {
            l.abort.detach();
        }
    }

    /// Closes the connection now (an exchange given up on).
    pub fn close(&mut self) {
        match self {
            UpstreamBody::Own(body) => body.close(),
            UpstreamBody::Hyper { lease, .. } => drop(lease.take()),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = ExchangeError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        match self.get_mut() {
            UpstreamBody::Own(body) => Pin::new(body).poll_frame(cx),
            UpstreamBody::Hyper { body, lease } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                // The end: no more frames, or the last one of a body of
                // known length (the server may not poll again).
                let ended = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    _ => false,
                };
                if ended && let Some(l) = lease.take() {
                    l.release();
                }
                polled.map_err(ExchangeError::from)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Own(body) => body.is_end_stream(),
            UpstreamBody::Hyper { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Own(body) => body.size_hint(),
            UpstreamBody::Hyper { body, .. } => body.size_hint(),
        }
    }
}
