//! The body of a proxied response: the upstream's, streamed as it comes
//! (with the HTTP/1.1 connection it came on, given back to the pool when
//! the body ends), or one the gateway wrote itself (502, 504).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use crate::pool::Pooled;

pin_project! {
    #[project = KindProj]
    enum Kind {
        Upstream { #[pin] body: Incoming, conn: Option<Pooled> },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// A response body: the upstream's frames untouched (data and
    /// trailers), or a complete body of the gateway's own.
    pub struct ProxyBody {
        #[pin]
        kind: Kind,
    }
}

impl ProxyBody {
    /// A complete body written by the gateway.
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        ProxyBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// The upstream's body, streamed; `conn` goes back to the pool once it
    /// ends (dropped with the body otherwise, which closes it).
    pub fn upstream(body: Incoming, conn: Option<Pooled>) -> Self {
        let conn = match conn {
            // Nothing to read: the connection is free already.
            Some(c) if body.is_end_stream() => {
                c.release();
                None
            }
            c => c,
        };
        ProxyBody {
            kind: Kind::Upstream { body, conn },
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.project().kind.project() {
            KindProj::Upstream { mut body, conn } => {
                let polled = body.as_mut().poll_frame(cx);
                // The end: no more frames, or the last one of a body of
                // known length (the server may not poll again).
                let ended = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    _ => false,
                };
                if ended && let Some(c) = conn.take() {
                    c.release();
                }
                polled
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body, .. } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body, .. } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Upstream { .. } => f.write_str("ProxyBody::Upstream"),
            Kind::Full { data } => f
                .debug_struct("ProxyBody::Full")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
