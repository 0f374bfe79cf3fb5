//! The client connections of a listener and what each is doing, so that
//! when every place under its cap is taken, or the process runs out of
//! file descriptors, the connections that have waited longest
//! without a request in flight are closed to make room — as nginx reuses
//! its idle connections when its `worker_connections` run out.
//!
//! A connection "waits" from its accept (a TLS handshake, a request head
//! still arriving, nothing sent at all) and again from the end of each
//! response (an idle keep-alive connection, an HTTP/2 connection with no
//! open stream) until its next request starts. One that has sent nothing
//! since it was accepted, or is idle after a response, may be closed at
//! once; one whose first bytes have arrived is left [`HEAD_GRACE`] to
//! finish its head (a client's head arrives within a round trip; one
//! that takes longer is a slow client). A request in flight — an upload
//! however slow, a delayed or queued request, a response still streaming
//! — is never cut to make room, nor is a tunnel (upgraded connections
//! leave the registry).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

/// The flag of [`Activity::state`] marking a connection chosen to close;
/// the count of requests in flight is below it.
const EVICTED: u64 = 1 << 63;

/// How long a new connection whose first bytes have arrived is left to
/// finish its request head before it may be closed to make room.
pub(super) const HEAD_GRACE: Duration = Duration::from_secs(1);
/// When every waiting connection is a head within its [`HEAD_GRACE`] (a
/// flood of clients that dribble their heads), those that have been
/// arriving for longer than this may be closed, the oldest first: a
/// client's head arrives within a round trip.
pub(super) const HEAD_GRACE_WHEN_FULL: Duration = Duration::from_millis(100);

/// One connection's requests in flight, and since when it has waited.
#[derive(Debug)]
pub(super) struct Activity {
    /// Requests in flight, and [`EVICTED`].
    state: AtomicU64,
    /// Microseconds from the registry's epoch to when the connection last
    /// began to wait.
    since: AtomicU64,
    /// Bytes of a request have arrived since (the first head of a new
    /// connection).
    heard: AtomicBool,
    epoch: Instant,
    /// The task serving the connection, woken when it is chosen to close
    /// (an atomic waker: polled at every wake-up of the connection, it
    /// costs no lock).
    close: AtomicWaker,
}

impl Activity {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
    }

    /// The connection's first bytes have arrived: it is sending its
    /// request head (see [`HEAD_GRACE`]).
    pub(super) fn heard(&self) {
        self.heard.store(true, Ordering::Relaxed);
    }

    /// What arrived is no request head (an HTTP/2 connection's preface):
    /// the connection waits as one that sent nothing.
    pub(super) fn silent(&self) {
        self.heard.store(false, Ordering::Relaxed);
    }

    /// A request (or HTTP/2 stream) begins; it is in flight until the
    /// returned value is dropped (with its response body).
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.state.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Requests in flight.
    pub(super) fn in_flight(&self) -> u64 {
        self.state.load(Ordering::Acquire) & !EVICTED
    }

    /// Resolves when the connection has been chosen to close to make
    /// room. Check [`keep`](Self::keep) then: a request that began in the
    /// meantime keeps it open.
    pub(super) async fn evicted(&self) {
        std::future::poll_fn(|cx| {
            self.close.register(cx.waker());
            if self.state.load(Ordering::Acquire) & EVICTED != 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Resolves once the connection has had no request in flight for
    /// `timeout`, counted from now at the earliest.
    pub(super) async fn idle_for(&self, timeout: Duration) {
        let start = self.now();
        let timeout = timeout.as_micros().min(u128::from(u64::MAX)) as u64;
        loop {
            // A request in flight: looked at again a timeout later (it may
            // have ended by then).
            let busy = self.in_flight() != 0;
            let now = self.now();
            let due = if busy {
                now
            } else {
                self.since.load(Ordering::Relaxed).max(start)
            }
            .saturating_add(timeout);
            if !busy && now >= due {
                return;
            }
            tokio::time::sleep(Duration::from_micros(due - now)).await;
        }
    }

    /// After [`evicted`](Self::evicted): whether the connection is to stay
    /// after all (a request began as it was chosen; the choice is undone).
    pub(super) fn keep(&self) -> bool {
        let state = self.state.load(Ordering::Acquire);
        if state & !EVICTED == 0 {
            return false;
        }
        self.state.fetch_and(!EVICTED, Ordering::AcqRel);
        true
    }

    /// Chooses this connection to close if it has nothing in flight.
    fn evict(&self) -> bool {
        let chosen = self
            .state
            .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if chosen {
            self.close.wake();
        }
        chosen
    }

    /// When the connection began to wait, if it is waiting and may be
    /// closed at `now` (not a head still within `grace`).
    fn closable_since(&self, now: u64, grace: Duration) -> Option<u64> {
        if self.state.load(Ordering::Acquire) != 0 {
            return None;
        }
        let since = self.since.load(Ordering::Relaxed);
        let grace = grace.as_micros() as u64;
        let closable = !self.heard.load(Ordering::Relaxed) || now.saturating_sub(since) >= grace;
        closable.then_some(since)
    }
}

/// A request in flight on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        // The clock is read before the count falls: a connection is never
        // seen waiting with the time of its previous wait. What follows a
        // response is idle until a request begins.
        a.since.store(a.now(), Ordering::Relaxed);
        a.heard.store(false, Ordering::Relaxed);
        a.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections of one listener.
#[derive(Debug)]
pub(super) struct Connections {
    epoch: Instant,
    inner: Mutex<Inner>,
    evicted: metrics::Counter,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    live: HashMap<u64, Arc<Activity>>,
}

impl Connections {
    /// No connection yet; the connections closed to make room are
    /// counted in `evicted`.
    pub(super) fn new(evicted: metrics::Counter) -> Self {
        Connections {
            epoch: Instant::now(),
            inner: Mutex::new(Inner::default()),
            evicted,
        }
    }

    /// A new connection, waiting from now; it leaves the registry when the
    /// returned value is dropped.
    pub(super) fn register(self: &Arc<Self>) -> Registered {
        let activity = Arc::new(Activity {
            state: AtomicU64::new(0),
            since: AtomicU64::new(0),
            heard: AtomicBool::new(false),
            epoch: self.epoch,
            close: AtomicWaker::new(),
        });
        activity.since.store(activity.now(), Ordering::Relaxed);
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        inner.live.insert(id, activity.clone());
        Registered {
            id,
            connections: self.clone(),
            activity,
        }
    }

    /// Connections registered now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().live.len()
    }

    /// Whether none is registered.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Chooses up to `n` of the connections that have waited longest
    /// without a request in flight (leaving a head that began within
    /// [`HEAD_GRACE`] alone, unless there is no other: then within
    /// [`HEAD_GRACE_WHEN_FULL`]), and tells them to close; returns how
    /// many were chosen.
    pub(super) fn evict_waiting(&self, n: usize) -> usize {
        let now = self.epoch.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        self.evict_at(n, now)
    }

    /// [`evict_waiting`](Self::evict_waiting) as at `now` (microseconds
    /// from the epoch).
    fn evict_at(&self, n: usize, now: u64) -> usize {
        match self.evict_within(n, now, HEAD_GRACE) {
            0 => self.evict_within(n, now, HEAD_GRACE_WHEN_FULL),
            chosen => chosen,
        }
    }

    /// [`evict_at`](Self::evict_at), leaving heads within `grace` alone.
    fn evict_within(&self, n: usize, now: u64, grace: Duration) -> usize {
        if n == 0 {
            return 0;
        }
        let mut oldest: Vec<(u64, Arc<Activity>)> = Vec::with_capacity(n + 1);
        {
            let inner = self.lock();
            for a in inner.live.values() {
                let Some(since) = a.closable_since(now, grace) else {
                    continue;
                };
                if oldest.len() == n && oldest.last().is_some_and(|(s, _)| *s <= since) {
                    continue;
                }
                let at = oldest.partition_point(|(s, _)| *s <= since);
                oldest.insert(at, (since, a.clone()));
                oldest.truncate(n);
            }
        }
        let chosen = oldest.iter().filter(|(_, a)| a.evict()).count();
        self.evicted.increment(chosen as u64);
        chosen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A connection's place in the registry (see [`Connections::register`]).
#[derive(Debug)]
pub(super) struct Registered {
    id: u64,
    connections: Arc<Connections>,
    activity: Arc<Activity>,
}

impl Registered {
    /// The connection's activity.
    pub(super) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.lock().live.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Panics unless `r`'s connection is told to close within a second.
    async fn told_to_close(r: &Registered) {
        let told = tokio::time::timeout(Duration::from_secs(1), r.activity().evicted());
        told.await.expect("told to close");
    }

    /// Whether `r`'s connection is told to close within 50 ms.
    async fn told_within_50ms(r: &Registered) -> bool {
        let told = tokio::time::timeout(Duration::from_millis(50), r.activity().evicted());
        told.await.is_ok()
    }

    #[tokio::test]
    async fn the_longest_waiting_go_first_and_busy_ones_never() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let a = c.register();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let b = c.register();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let busy = c.register();
        let request = busy.activity().begin();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let d = c.register();
        assert_eq!(c.len(), 4);
        // `a` waited longest.
        assert_eq!(c.evict_waiting(1), 1);
        told_to_close(&a).await;
        assert!(!a.activity().keep());
        drop(a);
        // Then `b`, then `d`; never the busy one.
        assert_eq!(c.evict_waiting(5), 2);
        for r in [&b, &d] {
            told_to_close(r).await;
        }
        assert!(!told_within_50ms(&busy).await);
        drop((b, d));
        // Once its request ends, it waits from then on.
        drop(request);
        assert_eq!(c.evict_waiting(1), 1);
        drop(busy);
        assert!(c.is_empty());
    }

    #[tokio::test]
    async fn a_connection_that_ended_its_wait_later_goes_later() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let old = c.register();
        let young = c.register();
        tokio::time::sleep(Duration::from_millis(2)).await;
        // The older connection served a request just now.
        drop(old.activity().begin());
        assert_eq!(c.evict_waiting(1), 1);
        told_to_close(&young).await;
    }

    #[tokio::test]
    async fn a_head_in_progress_has_its_grace() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let talking = c.register();
        talking.activity().heard();
        let silent = c.register();
        let at = talking.activity().since.load(Ordering::Relaxed);
        let grace = HEAD_GRACE.as_micros() as u64;
        // The silent one goes, the one sending its head is left alone...
        assert_eq!(c.evict_at(2, at + grace - 1), 1);
        told_to_close(&silent).await;
        drop(silent);
        let full = HEAD_GRACE_WHEN_FULL.as_micros() as u64;
        assert_eq!(c.evict_at(1, at + full - 1), 0, "within its grace");
        // ... when it is the only one, until it has taken longer than a
        // head does: a slow head.
        assert_eq!(c.evict_at(1, at + full), 1);
    }

    #[tokio::test]
    async fn heads_beyond_the_short_grace_go_only_when_nothing_else_can() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let slow = c.register();
        slow.activity().heard();
        let at = slow.activity().since.load(Ordering::Relaxed);
        let later = at + HEAD_GRACE_WHEN_FULL.as_micros() as u64;
        let idle = c.register();
        // An idle connection goes first, whatever its age...
        assert_eq!(c.evict_at(1, later), 1);
        told_to_close(&idle).await;
        drop(idle);
        // ... then the head that has been arriving longest.
        let young = c.register();
        young.activity().heard();
        assert_eq!(c.evict_at(1, later), 1);
        told_to_close(&slow).await;
        assert!(
            !told_within_50ms(&young).await,
            "a head that has only just begun stays"
        );
    }

    #[tokio::test]
    async fn idle_only_without_a_request_in_flight() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let r = c.register();
        let request = r.activity().begin();
        let idle = r.activity().idle_for(Duration::from_millis(50));
        tokio::pin!(idle);
        // A request in flight: never idle.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), idle.as_mut())
                .await
                .is_err()
        );
        drop(request);
        let started = tokio::time::Instant::now();
        idle.await;
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn a_request_that_begins_as_it_is_chosen_keeps_it() {
        let c = Arc::new(Connections::new(metrics::Counter::noop()));
        let r = c.register();
        assert_eq!(c.evict_waiting(1), 1);
        let request = r.activity().begin();
        r.activity().evicted().await;
        assert!(r.activity().keep(), "a request in flight: kept");
        assert_eq!(c.evict_waiting(1), 0, "busy now");
        drop(request);
        assert_eq!(c.evict_waiting(1), 1);
    }
}
