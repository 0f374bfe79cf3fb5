//! Releases of Redis-held permits that Redis could not take when they were
//! made (it failed, timed out, or the breaker was keeping calls away from
//! it): kept, bounded, and sent again as soon as Redis answers a call.
//!
//! Without them, a permit whose holder finished during an outage would stay
//! held in Redis until its lease ends (ten minutes by default, never without
//! a lease), and a concurrency limit whose permits were all in flight when
//! Redis went away would deny everything for that long after it came back.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use floodgate::Timestamp;
use floodgate_policy::{BackendError, Permit};
use futures_util::future::join_all;

use crate::RedisBackend;
use crate::stats::ResilienceStats;

/// How many releases are sent at once when delivering the queue (pipelined
/// on the backend's connections).
const BATCH: usize = 64;

/// One release to send again.
struct Pending {
    /// The permit's concurrency state key.
    key: Vec<u8>,
    units: u64,
    permit: Permit,
    /// When it was made (used with client-supplied time).
    at: Timestamp,
}

/// The queue of releases waiting for Redis.
pub(crate) struct DeferredReleases {
    queue: Mutex<VecDeque<Pending>>,
    /// Releases waiting: queued or being sent (read without the lock on
    /// every successful call).
    waiting: AtomicUsize,
    /// Whether a delivery is running (one at a time).
    delivering: AtomicBool,
    bound: AtomicUsize,
}

impl DeferredReleases {
    pub(crate) fn new(bound: usize) -> Self {
        DeferredReleases {
            queue: Mutex::new(VecDeque::new()),
            waiting: AtomicUsize::new(0),
            delivering: AtomicBool::new(false),
            bound: AtomicUsize::new(bound.max(1)),
        }
    }

    pub(crate) fn set_bound(&self, bound: usize) {
        self.bound.store(bound.max(1), Ordering::Relaxed);
    }

    pub(crate) fn bound(&self) -> usize {
        self.bound.load(Ordering::Relaxed)
    }

    /// Releases waiting for Redis: queued, or being sent.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// `n` waiting releases are done with (delivered or dropped).
    fn done(&self, n: usize) {
        self.waiting.fetch_sub(n, Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        // A panic never happens under this lock; a poisoned one still holds
        // a consistent queue.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a release for later; when the queue is full the oldest is
    /// dropped (its permit is then freed in Redis when its lease ends).
    pub(crate) fn push(
        &self,
        key: Vec<u8>,
        units: u64,
        permit: Permit,
        at: Timestamp,
        stats: &ResilienceStats,
    ) {
        let mut q = self.lock();
        if q.len() >= self.bound() {
            // Replaced: the count stays.
            q.pop_front();
            stats.releases_dropped.inc();
        } else {
            self.waiting.fetch_add(1, Ordering::AcqRel);
        }
        q.push_back(Pending {
            key,
            units,
            permit,
            at,
        });
        stats.releases_deferred.inc();
    }

    fn take(&self, n: usize) -> Vec<Pending> {
        let mut q = self.lock();
        let n = n.min(q.len());
        // Still counted as waiting while they are sent.
        q.drain(..n).collect()
    }

    fn put_back(&self, failed: Vec<Pending>, stats: &ResilienceStats) {
        let mut q = self.lock();
        for p in failed.into_iter().rev() {
            if q.len() >= self.bound() {
                // Newer releases came in meanwhile: the oldest give way.
                stats.releases_dropped.inc();
                self.done(1);
                continue;
            }
            q.push_front(p);
        }
    }
}

/// Starts delivering the queue in the background (the caller has seen it
/// non-empty), unless a delivery is already running, or there is no tokio
/// runtime to run it on (the next successful call tries again).
///
/// The delivery runs on the caller's runtime, which may go away before it
/// ends (a short-lived runtime, dropped with its tasks): the task then puts
/// back the batch it was sending and lets the next successful call start
/// another (see [`Delivery`]), even if it was never polled.
pub(crate) fn deliver_soon(
    redis: &Arc<RedisBackend>,
    deferred: &Arc<DeferredReleases>,
    stats: &Arc<ResilienceStats>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if deferred
        .delivering
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // Made before the task, so that dropping the task unpolled (a runtime
    // shutting down refuses it that way too) still clears the flag.
    let delivery = Delivery {
        deferred: deferred.clone(),
        stats: stats.clone(),
        batch: Vec::new(),
    };
    handle.spawn(deliver(redis.clone(), delivery));
}

/// The running delivery: owns the `delivering` flag and the batch being
/// sent. However the delivery ends (done, or its task dropped with its
/// runtime, polled or not), the flag is cleared, and a batch whose results
/// never came back is queued again (still counted as waiting), so the next
/// successful call delivers it. Some of it may have reached Redis: sending
/// a release twice gives back nothing more when the first gave back all the
/// permit's units (it then holds nothing), at most the rest of that one
/// permit's units otherwise; the same as a release sent again after a
/// timeout whose request Redis did run.
struct Delivery {
    deferred: Arc<DeferredReleases>,
    stats: Arc<ResilienceStats>,
    /// Taken from the queue, results not in yet.
    batch: Vec<Pending>,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            self.deferred.put_back(batch, &self.stats);
        }
        self.deferred.delivering.store(false, Ordering::Release);
    }
}

/// Sends the queued releases, [`BATCH`] at a time, until the queue is
/// empty or one fails for lack of Redis (those are queued again, for the
/// next successful call to retry; one Redis answers with an error is
/// dropped). Dropping `delivery` (here at the end, or with the task) ends
/// the delivery.
async fn deliver(redis: Arc<RedisBackend>, mut delivery: Delivery) {
    loop {
        delivery.batch = delivery.deferred.take(BATCH);
        if delivery.batch.is_empty() {
            break;
        }
        let results = join_all(
            delivery
                .batch
                .iter()
                .map(|p| redis.release_key(&p.key, p.units, p.permit, p.at)),
        )
        .await;
        // The results are in: from here on, this batch is accounted for here.
        let batch = std::mem::take(&mut delivery.batch);
        let mut failed = Vec::new();
        let sent = batch.len();
        for (p, r) in batch.into_iter().zip(results) {
            match r {
                Ok(_) => delivery.stats.releases_redelivered.inc(),
                // Redis answered, with something no retry changes.
                Err(BackendError::Protocol(_)) => delivery.stats.releases_dropped.inc(),
                Err(_) => failed.push(p),
            }
        }
        delivery.deferred.done(sent - failed.len());
        if !failed.is_empty() {
            delivery.deferred.put_back(failed, &delivery.stats);
            break;
        }
    }
}
