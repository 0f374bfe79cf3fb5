//! The background task of the keys decided here: every tick, the work due
//! (hits pushed, leases that ended given back, penalties and blocks told
//! to Redis). It holds the keys only weakly: it ends with the backend, or
//! with the runtime it was spawned on (the next decision then spawns it on
//! the caller's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use floodgate::Timestamp;
use floodgate::algorithms::AnyLimit;

use super::calls::Ask;
use super::entry::Names;
use super::local::{Keep, Share};
use super::take::{Caller, Taken, take_from};
use super::{Gate, Sharing};
use crate::RedisBackend;

/// The most keys in one call of the background work.
const BACKGROUND_KEYS: usize = 64;

/// How often the task looks for due work.
const TICK: Duration = Duration::from_millis(5);

/// Clears the flag when the task ends, however it ends (a runtime shutting
/// down drops it).
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Spawns the task on the current runtime, if there is one (the flag is
/// already set by the caller; it is cleared if there is none).
pub(super) fn spawn(
    sharing: Weak<Sharing>,
    alive: Arc<AtomicBool>,
    redis: Arc<RedisBackend>,
    gate: Gate,
) {
    let guard = Alive(alive);
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        let _guard = guard;
        loop {
            tokio::time::sleep(TICK).await;
            let Some(s) = sharing.upgrade() else {
                break;
            };
            s.run_due(&redis, &gate, wall(), false).await;
        }
    });
}

/// This process's wall clock (the caller's time of the background work).
fn wall() -> Timestamp {
    Timestamp::from_nanos(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    )
}

impl Sharing {
    /// Spawns the background task unless it runs. Not with client-supplied
    /// time: the caller's clock is then only known at its calls, and the
    /// background work runs when it calls `flush`.
    pub(super) fn ensure_task(self: &Arc<Self>, redis: &Arc<RedisBackend>, gate: &Gate) {
        if redis.client_time()
            || self.task.load(Ordering::Relaxed)
            || self.task.swap(true, Ordering::AcqRel)
        {
            return;
        }
        spawn(
            Arc::downgrade(self),
            self.task.clone(),
            redis.clone(),
            Gate {
                breaker: gate.breaker.clone(),
                stats: gate.stats.clone(),
            },
        );
    }

    /// The background work due at `now` (the caller's time; every queued
    /// key when `all`): pushes hits, gives back leases that ended, tells
    /// Redis what is owed. With Redis's clock, `now` only matters before
    /// Redis has answered once.
    pub(crate) async fn run_due(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        now: Timestamp,
        all: bool,
    ) {
        let Some(t) = self.clock.now(now) else {
            return;
        };
        let due = self.queue.due(if all { u64::MAX } else { t.as_nanos() });
        if due.is_empty() {
            return;
        }
        let margin = self.clock.margin(0);
        let caller = if all {
            Caller::All
        } else {
            Caller::Due { margin }
        };
        let mut asks: Vec<(Arc<Names>, AnyLimit, Ask)> = Vec::new();
        for names in due {
            let got = self.store.update(&Keep, &*names.key, t, |e| {
                e.queued = false;
                let share = if e.view.synced || e.view.pending {
                    Share::Sync {
                        interval: 0,
                        slice: u64::MAX,
                    }
                } else {
                    Share::Lease { duration: 0 }
                };
                let taken = take_from(e, share, 0, t, caller);
                // A lease still in use comes back at its end.
                let again = match taken {
                    Taken::Wait => Some(t.as_nanos().saturating_add(1_000_000)),
                    Taken::Nothing if e.lease.open => Some(e.lease.end),
                    _ => None,
                };
                if again.is_some() {
                    e.queued = true;
                }
                (e.limit.clone(), taken, again)
            });
            if let Some((limit, taken, again)) = got {
                if let Some(due) = again {
                    self.queue
                        .push(due.max(t.as_nanos() + 1_000_000), names.clone());
                }
                if let Taken::Go(ask) = taken {
                    asks.push((names, limit, ask));
                }
            }
        }
        if asks.is_empty() {
            return;
        }
        let keys: Vec<(&[u8], &AnyLimit, Ask)> =
            asks.iter().map(|(n, l, a)| (&*n.key, l, *a)).collect();
        // In calls of a few keys, one after the other: the leases of many
        // keys end together (at a window's end), and one burst of large
        // scripts would hold Redis up for the requests' calls.
        for chunk in keys.chunks(BACKGROUND_KEYS) {
            let _ = self.call(redis, gate, chunk, now).await;
        }
    }

    /// The keys waiting for the background task.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }
}
