//! The body of a forwarded request: the client's, streamed to the upstream
//! as it comes, with a record of its progress so the proxy can tell a
//! finished upload (the response timeout starts), a client that stopped
//! sending (408), a body the client broke (malformed, cut short: 400) or
//! sent over `max_body_bytes` (413), and an upstream that stopped reading
//! (504).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How a client's request body failed to arrive whole: the client's
/// fault, never the upstream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientBodyError {
    /// The framing is broken (an invalid chunk-size line, a chunk longer
    /// than its size, an HTTP/2 body longer or shorter than its
    /// `content-length`).
    Malformed,
    /// The client closed (or reset its stream) before the end.
    Incomplete,
    /// More bytes than `max_body_bytes`.
    TooLarge,
}

impl ClientBodyError {
    /// What a body error from hyper's server says of the client: a
    /// framing it broke, or a body it did not finish.
    fn of(e: &hyper::Error) -> Self {
        if let Some(io) = find::<std::io::Error>(e) {
            return match io.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                    ClientBodyError::Malformed
                }
                _ => ClientBodyError::Incomplete,
            };
        }
        // HTTP/2: a stream error. One the gateway detected (DATA frames
        // longer or shorter than the `content-length`) is a broken framing;
        // one the client sent (a reset) is a body it gave up on.
        if let Some(h2) = find::<h2::Error>(e)
            && !h2.is_remote()
            && !h2.is_io()
        {
            return ClientBodyError::Malformed;
        }
        ClientBodyError::Incomplete
    }
}

/// The first error of type `T` in `e`'s chain.
fn find<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(e), |s| s.source()).find_map(|s| s.downcast_ref::<T>())
}

/// Why an upload stopped: what the upstream's client is told.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The client's body failed (see [`ClientBodyError`]).
    #[error("request body: {0}")]
    Client(#[source] hyper::Error),
    /// The body went over `max_body_bytes`.
    #[error("request body over max_body_bytes")]
    TooLarge,
}

/// The progress of one upload, shared by its body and the proxy.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    /// Nanoseconds from `start` to the last frame passed on.
    last: AtomicU64,
    /// The body is waiting for the client (rather than for the upstream
    /// to read).
    waiting_client: AtomicBool,
    done: AtomicBool,
    /// How the client broke its body, if it did (the first failure).
    client_error: OnceLock<ClientBodyError>,
    finished: Notify,
}

impl Progress {
    fn new() -> Self {
        Progress {
            start: Instant::now(),
            last: AtomicU64::new(0),
            waiting_client: AtomicBool::new(false),
            done: AtomicBool::new(false),
            client_error: OnceLock::new(),
            finished: Notify::new(),
        }
    }

    /// Records the client's failure (the first one), and the end of the
    /// upload it ends.
    fn fail(&self, e: ClientBodyError) {
        let _ = self.client_error.set(e);
        self.finish();
    }

    /// How the client broke its body, if it did.
    pub fn client_error(&self) -> Option<ClientBodyError> {
        self.client_error.get().copied()
    }

    fn touch(&self) {
        let nanos = self.start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.last.store(nanos, Ordering::Relaxed);
    }

    fn finish(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            self.finished.notify_one();
        }
    }

    /// When the last frame was passed on (or the upload began).
    pub fn last_progress(&self) -> Instant {
        self.start + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }

    /// Whether the body is waiting for the client to send more.
    pub fn waiting_client(&self) -> bool {
        self.waiting_client.load(Ordering::Relaxed)
    }

    /// Whether the whole body has been passed on.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Resolves once the whole body has been passed on.
    pub async fn finished(&self) {
        if self.is_done() {
            return;
        }
        self.finished.notified().await;
    }
}

pin_project! {
    /// A client's request body on its way to the upstream.
    pub struct UploadBody {
        #[pin]
        body: Incoming,
        progress: Option<Finisher>,
        // Bytes the body may still carry (`max_body_bytes`).
        allowance: u64,
    }
}

/// Marks the upload finished when the body is dropped.
struct Finisher(Arc<Progress>);

impl UploadBody {
    /// Wraps `body`, which may carry `max_bytes` (none: any length); the
    /// progress is tracked unless the body is empty (then there is
    /// nothing to wait for, and nothing is allocated).
    pub fn new(body: Incoming, max_bytes: Option<u64>) -> (Self, Option<Arc<Progress>>) {
        let progress = (!body.is_end_stream()).then(|| Arc::new(Progress::new()));
        (
            UploadBody {
                body,
                progress: progress.clone().map(Finisher),
                allowance: max_bytes.unwrap_or(u64::MAX),
            },
            progress,
        )
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        // Not sent whole (a failed exchange, an early response): nothing
        // more will come; the response's wait is bounded from now on.
        self.0.waiting_client.store(false, Ordering::Relaxed);
        self.0.finish();
    }
}

impl Body for UploadBody {
    type Data = Bytes;
    type Error = UploadError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UploadError>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = body.as_mut().poll_frame(cx);
        let Some(Finisher(p)) = this.progress.as_ref() else {
            return polled.map_err(UploadError::Client);
        };
        p.waiting_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > *this.allowance {
                        p.fail(ClientBodyError::TooLarge);
                        return Poll::Ready(Some(Err(UploadError::TooLarge)));
                    }
                    *this.allowance -= len;
                }
                p.touch();
                if body.is_end_stream() {
                    p.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                p.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                p.fail(ClientBodyError::of(&e));
                Poll::Ready(Some(Err(UploadError::Client(e))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let end = self.body.is_end_stream();
        if end && let Some(Finisher(p)) = &self.progress {
            p.finish();
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
