//! The bound on spans waiting for export: a span finished while
//! `server.tracing.queue_size` wait (a collector slow or not answering) is
//! dropped at once and counted, so memory stays bounded and a request
//! never waits for the exporter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// Spans dropped because the export queue was full.
pub const DROPPED_TOTAL: &str = "floodgate_tracing_spans_dropped_total";

/// How many finished spans are waiting, shared by the processor that
/// queues them and the exporter that takes them.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    waiting: Arc<AtomicUsize>,
    most: usize,
}

impl Pending {
    /// A queue of at most `most` spans.
    pub(super) fn new(most: usize) -> Self {
        Pending {
            waiting: Arc::new(AtomicUsize::new(0)),
            most,
        }
    }

    /// `exporter`, telling this queue of what it takes.
    pub(super) fn exporter<E>(&self, exporter: E) -> Taking<E> {
        Taking {
            inner: exporter,
            pending: self.clone(),
        }
    }

    /// Takes a place for one more span, if one is free.
    fn enter(&self) -> bool {
        let most = self.most;
        let take = |n: usize| (n < most).then_some(n + 1);
        self.waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)
            .is_ok()
    }

    /// `n` spans left the queue.
    fn leave(&self, n: usize) {
        let give = |w: usize| Some(w.saturating_sub(n));
        let _ = self
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, give);
    }
}

/// A span processor queueing into `inner` while [`Pending`] has room.
#[derive(Debug)]
pub(super) struct Bounded<P> {
    inner: P,
    pending: Pending,
    dropped: metrics::Counter,
}

impl<P> Bounded<P> {
    /// `inner`, bounded by `pending`.
    pub(super) fn new(inner: P, pending: Pending) -> Self {
        metrics::describe_counter!(
            DROPPED_TOTAL,
            "Finished spans dropped because server.tracing.queue_size spans were already waiting for export."
        );
        Bounded {
            inner,
            pending,
            dropped: metrics::counter!(DROPPED_TOTAL),
        }
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.enter() {
            self.inner.on_end(span);
        } else {
            self.dropped.increment(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that gives the queue back the places of what it takes.
#[derive(Debug)]
pub(super) struct Taking<E> {
    inner: E,
    pending: Pending,
}

impl<E: SpanExporter> SpanExporter for Taking<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.pending.leave(batch.len());
        self.inner.export(batch).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue holds at most its size; what the exporter takes frees
    /// places.
    #[test]
    fn places_are_bounded_and_given_back() {
        let p = Pending::new(2);
        assert!(p.enter() && p.enter());
        assert!(!p.enter(), "full");
        p.leave(1);
        assert!(p.enter());
        p.leave(5);
        assert!(p.enter(), "never below empty");
    }
}
