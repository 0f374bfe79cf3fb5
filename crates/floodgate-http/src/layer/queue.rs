//! Concurrency limits with bounded FIFO queues and timeouts: globally, and
//! per value of a descriptor entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::config::{KeyedQueueLimit, QueueLimit};
use super::shed::Gauge;

/// Why no permit was had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueError {
    /// Every permit is taken and the queue is full (or there is none).
    Full,
    /// The wait exceeded the queue timeout.
    Timeout,
}

/// A semaphore whose waiters are served in arrival order (tokio's
/// semaphore is fair), with at most `queue` waiting.
pub(crate) struct ConcurrencyQueue {
    pub limit: QueueLimit,
    permits: Arc<Semaphore>,
    waiting: Gauge,
}

impl ConcurrencyQueue {
    pub(super) fn new(limit: QueueLimit) -> Self {
        ConcurrencyQueue {
            permits: Arc::new(Semaphore::new(limit.max.min(Semaphore::MAX_PERMITS))),
            limit,
            waiting: Gauge::default(),
        }
    }

    /// A permit now, or after waiting in line (bounded, with a timeout).
    pub(super) async fn acquire(&self) -> Result<OwnedSemaphorePermit, QueueError> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(p);
        }
        let Some(_waiting) = self.waiting.try_enter(self.limit.queue) else {
            return Err(QueueError::Full);
        };
        let acquire = self.permits.clone().acquire_owned();
        let permit = match self.limit.timeout {
            Some(t) => tokio::time::timeout(t, acquire)
                .await
                .map_err(|_| QueueError::Timeout)?,
            None => acquire.await,
        };
        permit.map_err(|_| QueueError::Full)
    }

    fn idle(&self) -> bool {
        self.waiting.get() == 0
            && self.permits.available_permits() == self.limit.max.min(Semaphore::MAX_PERMITS)
    }
}

/// The queue of each value with requests in flight or waiting.
type Queues = Arc<Mutex<HashMap<Box<str>, Arc<ConcurrencyQueue>>>>;

/// One [`ConcurrencyQueue`] per value, created on first use and dropped
/// when idle (so the map holds only values with requests in flight).
pub(crate) struct KeyedQueues {
    pub config: KeyedQueueLimit,
    /// The policy name of its rejections (`concurrency:user`).
    pub name: Box<str>,
    map: Queues,
}

/// A permit of a keyed queue; removes the value's queue when it was the
/// last user.
pub(crate) struct KeyedPermit {
    permit: Option<OwnedSemaphorePermit>,
    queue: Arc<ConcurrencyQueue>,
    key: Box<str>,
    map: Queues,
}

impl Drop for KeyedPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        if let Ok(mut map) = self.map.lock() {
            // Others get a clone only under this lock: two references (the
            // map's and ours) mean nobody else uses it.
            if Arc::strong_count(&self.queue) == 2 && self.queue.idle() {
                map.remove(&self.key);
            }
        }
    }
}

impl KeyedQueues {
    pub(super) fn new(config: KeyedQueueLimit) -> Self {
        KeyedQueues {
            name: format!("concurrency:{}", config.key).into(),
            config,
            map: Arc::default(),
        }
    }

    /// A permit for `value`.
    pub(super) async fn acquire(&self, value: &str) -> Result<KeyedPermit, QueueError> {
        let queue = {
            let mut map = self.map.lock().map_err(|_| QueueError::Full)?;
            map.entry(value.into())
                .or_insert_with(|| Arc::new(ConcurrencyQueue::new(self.config.limit)))
                .clone()
        };
        // Made before the wait: a wait cancelled or timed out removes the
        // value's queue too when it was its last user.
        let mut guard = KeyedPermit {
            permit: None,
            queue,
            key: value.into(),
            map: self.map.clone(),
        };
        guard.permit = Some(guard.queue.acquire().await?);
        Ok(guard)
    }

    /// Values with a queue (requests in flight or waiting).
    pub(super) fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }
}
