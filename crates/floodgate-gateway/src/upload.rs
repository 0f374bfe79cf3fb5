//! The body of a forwarded request: the client's, streamed to the upstream
//! as it comes, with a record of its progress so the proxy can tell a
//! finished upload (the response timeout starts), a client that stopped
//! sending (408) and an upstream that stopped reading (504).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::time::Instant;

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
    finished: Notify,
}

impl Progress {
    fn new() -> Self {
        Progress {
            start: Instant::now(),
            last: AtomicU64::new(0),
            waiting_client: AtomicBool::new(false),
            done: AtomicBool::new(false),
            finished: Notify::new(),
        }
    }

    fn touch(&self) {
        let nanos = self.start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
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
    }
}

/// Marks the upload finished when the body is dropped.
struct Finisher(Arc<Progress>);

impl std::ops::Deref for Finisher {
    type Target = Progress;
    fn deref(&self) -> &Progress {
        &self.0
    }
}

impl std::fmt::Debug for UploadBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadBody").finish_non_exhaustive()
    }
}

impl UploadBody {
    /// Wraps `body`; the progress is tracked unless the body is empty
    /// (then there is nothing to wait for, and nothing is allocated).
    pub fn new(body: Incoming) -> (Self, Option<Arc<Progress>>) {
        let progress = (!body.is_end_stream()).then(|| Arc::new(Progress::new()));
        (
            UploadBody {
                body,
                progress: progress.clone().map(Finisher),
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
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = body.as_mut().poll_frame(cx);
        if let Some(p) = this.progress.as_deref() {
            match &polled {
                Poll::Pending => p.waiting_client.store(true, Ordering::Relaxed),
                Poll::Ready(Some(Ok(_))) => {
                    p.waiting_client.store(false, Ordering::Relaxed);
                    p.touch();
                    if body.is_end_stream() {
                        p.finish();
                    }
                }
                Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                    p.waiting_client.store(false, Ordering::Relaxed);
                    p.finish();
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let end = self.body.is_end_stream();
        if end && let Some(p) = &self.progress {
            p.finish();
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
