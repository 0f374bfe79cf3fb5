//! The body of a `ShouldRateLimit` answer without per-call boxing: one
//! gRPC message, then the `grpc-status: 0` trailer. Messages are encoded
//! into blocks shared by many answers, so that an answer costs no
//! allocation of its own for its bytes.
//!
//! Its size is not announced as exact, so that no `content-length` header
//! (which gRPC does not use) is built for each answer.

use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};

/// The trailer carrying a call's gRPC status.
pub(super) static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The trailer carrying a call's gRPC error message.
pub(super) static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Bytes of the blocks answers are encoded into. An answer keeps its block
/// alive until it is sent: at most this much per call in flight, whose
/// number `server.limits.max_requests` bounds.
const BLOCK: usize = 4096;

/// Room a block must have left for the next answer to start in it (an
/// answer longer than that grows its block, correctly, at a copy's cost).
const ROOM: usize = 512;

thread_local! {
    /// This thread's block: answers are split off its front.
    static BLOCK_OF_THREAD: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// The bytes `encode` writes, split off this thread's block (a new block
/// when it has too little room left).
pub(super) fn encoded(encode: impl FnOnce(&mut BytesMut)) -> Bytes {
    BLOCK_OF_THREAD.with_borrow_mut(|block| {
        if block.capacity() - block.len() < ROOM {
            *block = BytesMut::with_capacity(BLOCK);
        }
        encode(block);
        block.split().freeze()
    })
}

/// The body of the response to an RLS call, or of any other gRPC call.
pub(crate) enum GrpcBody {
    /// An answer of the fast path.
    Answer(Answer),
    /// What tonic answered (health, reflection, RLQS) or an error.
    Tonic(tonic::body::Body),
}

impl From<tonic::body::Body> for GrpcBody {
    fn from(body: tonic::body::Body) -> Self {
        GrpcBody::Tonic(body)
    }
}

/// One encoded message, then the OK status.
pub(crate) struct Answer {
    message: Option<Bytes>,
    ended: bool,
}

impl Answer {
    /// The answer carrying `message` (a whole gRPC frame).
    pub(super) fn new(message: Bytes) -> Self {
        Answer {
            message: Some(message),
            ended: false,
        }
    }

    fn next_frame(&mut self) -> Option<Frame<Bytes>> {
        if let Some(message) = self.message.take() {
            return Some(Frame::data(message));
        }
        if self.ended {
            return None;
        }
        self.ended = true;
        let mut trailers = HeaderMap::with_capacity(1);
        trailers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("0"));
        Some(Frame::trailers(trailers))
    }
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        match self.get_mut() {
            GrpcBody::Answer(a) => Poll::Ready(a.next_frame().map(Ok)),
            GrpcBody::Tonic(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GrpcBody::Answer(a) => a.ended,
            GrpcBody::Tonic(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            // At least the message; not exact (see the module's note).
            GrpcBody::Answer(a) => {
                let mut hint = SizeHint::new();
                hint.set_lower(a.message.as_ref().map_or(0, |m| m.len() as u64));
                hint
            }
            GrpcBody::Tonic(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn an_answer_is_its_message_then_the_ok_status() {
        let message = encoded(|b| b.extend_from_slice(b"\0\0\0\0\x02\x08\x01"));
        let body = GrpcBody::Answer(Answer::new(message.clone()));
        assert!(body.size_hint().exact().is_none(), "no content-length");
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(trailers.get(&GRPC_STATUS).unwrap(), "0");
        assert_eq!(collected.to_bytes(), message);
    }

    #[test]
    fn answers_share_blocks_and_keep_their_own_bytes() {
        let a = encoded(|b| b.extend_from_slice(b"first"));
        let b = encoded(|b| b.extend_from_slice(b"second"));
        assert_eq!((&a[..], &b[..]), (&b"first"[..], &b"second"[..]));
        // A long answer grows its block and stays whole.
        let long = encoded(|b| b.extend_from_slice(&[7; 3 * BLOCK]));
        assert!(long.len() == 3 * BLOCK && long.iter().all(|x| *x == 7));
        let after = encoded(|b| b.extend_from_slice(b"after"));
        assert_eq!((&a[..], &after[..]), (&b"first"[..], &b"after"[..]));
    }
}
