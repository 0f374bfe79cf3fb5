//! One exchange on an upstream connection, whichever client carries it:
//! the gateway's own HTTP/1.1 client ([`h1`](crate::h1): written and
//! answered in the request's own task), or hyper's on the pool's shared
//! HTTP/2 connection. The response's body carries the HTTP/1.1
//! connection, back to its pool when the body ends ([`UpstreamBody`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http2;

use crate::connect::ConnectError;
use crate::h1::upload::Upload;
use crate::h1::{self, FramingError};
use crate::pool::HostPool;
use crate::upload::{UploadBody, UploadError};

/// Why an exchange with the upstream broke, whichever client carried it.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// No connection could be opened.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The request could not be written whole.
    #[error("writing the request: {0}")]
    Write(io::Error),
    /// The client's request body failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// The connection closed before any byte of a response.
    #[error("the connection closed before a response")]
    Closed,
    /// The connection was reset before any byte of a response.
    #[error("the connection was reset before a response")]
    Reset,
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
    /// Whether a request the gateway's own client failed to exchange (and
    /// whose body it did not start on) can be sent again on another
    /// connection: it was not written whole, or (for an idempotent method,
    /// RFC 9110 §9.2.2) the connection closed before answering.
    pub fn may_retry(&self, method: &http::Method) -> bool {
        use http::Method;
        match self {
            ExchangeError::Write(_) => true,
            ExchangeError::Closed | ExchangeError::Reset => matches!(
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
pub(crate) struct Unsent {
    /// What broke.
    pub error: ExchangeError,
    /// The request, when the upstream did not act on it.
    pub request: Option<Request<UploadBody>>,
}

/// Sends `req` (prepared for the upstream; `upgrade`: it asks for one) on
/// `conn`; the response's body
/// carries the connection, back to `pool` when it ends.
///
/// An `async` block rather than an `async fn`: its future holds the
/// request and the connection once, not once more as parameters moved
/// into the body.
#[allow(clippy::manual_async_fn)]
pub(crate) fn send_http1(
    mut conn: h1::Conn,
    req: Request<UploadBody>,
    upgrade: bool,
    pool: &Arc<HostPool>,
) -> impl Future<Output = Result<Response<UpstreamBody>, Unsent>> + Send {
    async move {
        let (parts, body) = req.into_parts();
        // A body to write (boxed: most requests have none).
        let (empty, mut upload) = if body.is_end_stream() {
            (Some(body), None)
        } else {
            (None, Some(Box::new(Upload::new(body, &parts.headers))))
        };
        match conn.request(&parts, upload.as_deref_mut(), upgrade).await {
            Ok(head) if head.parts.status == StatusCode::SWITCHING_PROTOCOLS => Ok(
                Response::from_parts(head.parts, UpstreamBody::Upgraded(Some(conn))),
            ),
            Ok(head) => {
                let body = h1::ResponseBody::new(
                    conn,
                    head.framing,
                    upload.filter(|u| !u.is_complete()),
                    head.keep_alive.then(|| Arc::downgrade(pool)),
                );
                Ok(Response::from_parts(head.parts, UpstreamBody::Own(body)))
            }
            Err(error) => {
                let again = error.may_retry(&parts.method);
                let body = empty.or_else(|| upload.and_then(|u| u.into_untouched()));
                Err(Unsent {
                    error,
                    request: body
                        .filter(|_| again)
                        .map(|b| Request::from_parts(parts, b)),
                })
            }
        }
    }
}

/// Sends `req` (prepared for the upstream) on the shared HTTP/2
/// connection `sender`.
pub(crate) async fn send_http2(
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
        Ok(res) => Ok(res.map(UpstreamBody::Http2)),
        Err(mut e) => Err(Unsent {
            // Never written: safe to send again on another connection.
            request: e.take_message(),
            error: e.into_error().into(),
        }),
    }
}

/// An upstream response's body, carrying its connection back to the pool
/// when it ends.
pub enum UpstreamBody {
    /// From the gateway's own client.
    Own(h1::ResponseBody),
    /// From the shared HTTP/2 connection.
    Http2(Incoming),
    /// None: the response switched protocols, and the connection (until
    /// taken) is the tunnel's.
    Upgraded(Option<h1::Conn>),
}

impl UpstreamBody {
    /// The connection of a response that switched protocols.
    pub fn take_upgraded(&mut self) -> Option<h1::Conn> {
        match self {
            UpstreamBody::Upgraded(conn) => conn.take(),
            _ => None,
        }
    }

    /// Closes the connection now (an exchange given up on).
    pub fn close(&mut self) {
        if let UpstreamBody::Own(body) = self {
            body.close();
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
            UpstreamBody::Http2(body) => Pin::new(body).poll_frame(cx).map_err(ExchangeError::from),
            UpstreamBody::Upgraded(_) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Own(body) => body.is_end_stream(),
            UpstreamBody::Http2(body) => body.is_end_stream(),
            UpstreamBody::Upgraded(_) => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Own(body) => body.size_hint(),
            UpstreamBody::Http2(body) => body.size_hint(),
            UpstreamBody::Upgraded(_) => SizeHint::with_exact(0),
        }
    }
}
