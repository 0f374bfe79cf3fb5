//! The body of a proxied response: the upstream's, streamed as it comes,
//! or one the gateway wrote itself (502, 504).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

pin_project! {
    #[project = KindProj]
    enum Kind {
        Upstream { #[pin] body: Incoming },
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

    /// The upstream's body, streamed.
    pub fn upstream(body: Incoming) -> Self {
        ProxyBody {
            kind: Kind::Upstream { body },
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
            KindProj::Upstream { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body } => body.size_hint(),
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
