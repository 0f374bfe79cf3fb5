//! The calls in flight, bounded by `server.limits.max_requests`: a call
//! counts from its start until its response has been sent (its body
//! dropped by the listener), not only while it is decided — an answer its
//! client does not read (an HTTP/2 window kept shut) holds its place until
//! the send timeout resets it. What unread responses hold is bounded by
//! the same limit as requests.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Places for calls in flight.
pub struct Calls(Arc<Semaphore>);

/// A call's place (see [`Calls::begin`]); given back when dropped.
pub struct Call {
    _permit: OwnedSemaphorePermit,
}

impl Calls {
    /// `n` places.
    pub fn new(n: usize) -> Self {
        Calls(Arc::new(Semaphore::new(n)))
    }

    /// A place for a call, if one is free.
    pub fn begin(&self) -> Option<Call> {
        let permit = self.0.clone().try_acquire_owned().ok()?;
        Some(Call { _permit: permit })
    }

    /// Places free now.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.0.available_permits()
    }
}

/// A response body that holds its call's place until it is dropped.
pub(crate) struct Counted<B> {
    body: B,
    _call: Option<Call>,
}

impl<B> Counted<B> {
    /// `body`, holding `call` (none: a call refused, holding nothing).
    pub(crate) fn new(body: B, call: Option<Call>) -> Self {
        Counted { body, _call: call }
    }
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    /// A call holds its place until its response body is dropped, read
    /// or not.
    #[tokio::test]
    async fn a_call_holds_its_place_until_its_body_is_dropped() {
        let calls = Calls::new(1);
        let body = Counted::new(Full::new(bytes::Bytes::from_static(b"x")), calls.begin());
        assert!(calls.begin().is_none(), "the only place is held");
        let read = body.collect().await.unwrap().to_bytes();
        assert_eq!(&read[..], b"x");
        assert_eq!(calls.free(), 1, "the body read and dropped");
        let unread = Counted::new(Full::new(bytes::Bytes::new()), calls.begin());
        assert_eq!(calls.free(), 0);
        drop(unread);
        assert_eq!(calls.free(), 1);
    }
}
