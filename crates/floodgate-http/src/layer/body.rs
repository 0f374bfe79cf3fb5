//! The response body: the inner service's body, or the contract's
//! rejection; either way it holds what a request keeps until its body
//! ends (concurrency units, permits, the in-flight count).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::requests::RequestResult;
use super::shared::{Finishing, Hold};

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// A response body of the layer. What the request held (concurrency
    /// units, queue permits, its place in the in-flight count) is given
    /// back when the body ends, fails, or is dropped — whichever comes
    /// first, cancellation and panics included.
    pub struct FloodgateBody<B> {
        #[pin]
        kind: Kind<B>,
        held: Option<Box<dyn Hold>>,
        // The trailers, held back while what their request left running
        // (the charge of the cost they tell) finishes; boxed, as every
        // response carries the field and few ever fill it.
        closing: Option<Box<(Finishing, Frame<Bytes>)>>,
        result: Option<RequestResult>,
    }
}

impl<B> FloodgateBody<B> {
    /// The inner service's body of a request counted as `result`,
    /// holding `held` until it ends.
    pub(crate) fn inner(body: B, held: Option<Box<dyn Hold>>, result: RequestResult) -> Self {
        FloodgateBody {
            kind: Kind::Inner { body },
            held,
            closing: None,
            result: Some(result),
        }
    }

    /// A body the layer did not see (a server's own answer beside the
    /// layer's, such as a request refused before it is limited): holds
    /// nothing, counted as nothing.
    pub fn new(body: B) -> Self {
        FloodgateBody {
            kind: Kind::Inner { body },
            held: None,
            closing: None,
            result: None,
        }
    }

    /// The outcome the layer counted its request as
    /// (`floodgate_requests_total`'s `result`); none for a body it did
    /// not see.
    pub fn result(&self) -> Option<RequestResult> {
        self.result
    }

    /// Whether the layer answered with this body itself (a rejection, a
    /// shed request, a limiter failure) rather than passing on the inner
    /// service's.
    pub fn is_from_layer(&self) -> bool {
        matches!(self.kind, Kind::Full { .. })
    }

    /// A complete body (a rejection) of a request counted as `result`.
    pub(crate) fn full(data: Bytes, result: RequestResult) -> Self {
        FloodgateBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            held: None,
            closing: None,
            result: Some(result),
        }
    }
}

impl<B> std::fmt::Debug for FloodgateBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloodgateBody")
            .field("holds", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Body for FloodgateBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if let Some(closing) = this.closing {
            // Finished or failed alike: the trailers go out now.
            let _ = ready!(Pin::new(&mut closing.0).poll(cx));
            return Poll::Ready(this.closing.take().map(|c| Ok(c.1)));
        }
        let polled = match this.kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        };
        let Some(held) = this.held.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Some(Ok(frame))) => match frame.trailers_ref() {
                Some(trailers) => {
                    held.trailers(trailers);
                    let Some(mut f) = this.held.take().and_then(Hold::close) else {
                        return Poll::Ready(Some(Ok(frame)));
                    };
                    if Pin::new(&mut f).poll(cx).is_ready() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    *this.closing = Some(Box::new((f, frame)));
                    Poll::Pending
                }
                None => Poll::Ready(Some(Ok(frame))),
            },
            Poll::Ready(None) => {
                held.ended();
                this.held.take();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.held.take();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.closing.is_some() {
            return false;
        }
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
