//! Synchronisation modes: counters decided in this process's memory, shared
//! with the fleet through Redis (see `docs/redis.md`, "Synchronisation
//! modes").
//!
//! * `lease`: an item is admitted here only within a lease, units Redis
//!   granted this instance atomically out of the key's remaining quota
//!   (`lua/lease.lua`), so the fleet never admits more than the limit.
//! * `sync`: an item is decided on a view of the key, Redis's state at the
//!   last push plus this instance's hits since; the hits are pushed and
//!   the state pulled every interval, and after a slice of units at most.
//!
//! Either way the decision itself is the core's: each key's state here (its
//! replica) is a core algorithm state, decided by the core algorithm in the
//! core store (see [`local`]), which also makes a batch of keys atomic.
//! Redis is asked only when a lease runs out or a view needs refreshing;
//! requests for a key whose call is on its way wait for that call (one
//! call per key at a time).
//!
//! The parts: [`modes`] (which limits a mode applies to), [`decide`] (the
//! decisions), [`take`] (what an entry sends with its next call),
//! [`exchange`] (the calls and their answers), [`calls`] (their commands
//! and replies), [`holdings`] (what an instance holds, handed over or
//! reported), [`task`] (the background work), [`clock`] (Redis's clock
//! here), [`entry`], [`state`] and [`local`] (a key's entry, its state and
//! the core algorithm deciding it), [`queue`] (keys due for work) and
//! [`bound`] (sync mode's over-admission bound).

mod bound;
mod calls;
mod clock;
mod decide;
mod entry;
mod exchange;
mod holdings;
mod local;
mod modes;
mod queue;
mod state;
mod take;
mod task;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use floodgate::{Store, StoreConfig};
use floodgate_policy::{Item, SyncMode};
use tokio::sync::Notify;

use crate::UnsupportedLimit;
use crate::breaker::Breaker;
use crate::issued::IssuedPermits;
use crate::script::{LEASE, SYNC, Script};
use crate::stats::{ResilienceStats, SharingStats};

pub use bound::{OverAdmission, over_admission};
pub(crate) use local::Share;
pub(crate) use modes::share;
pub use modes::supports;

use entry::Entry;
use queue::Queue;

/// Decision passes a request may make before it is decided by Redis
/// instead (other requests took the units each grant brought).
const ROUNDS: usize = 4;

/// Waiters are woken per group of keys.
const WAKE_GROUPS: usize = 64;

/// The breaker and counters every call to Redis goes through.
pub(crate) struct Gate {
    pub breaker: Arc<Breaker>,
    pub stats: Arc<ResilienceStats>,
}

/// The keys decided here, and what they hold.
pub(crate) struct Sharing {
    store: Store<Box<[u8]>, Entry>,
    default: SyncMode,
    /// This instance's id as a lease holder (hex digits).
    holder: String,
    clock: clock::Clock,
    queue: Queue,
    wake: Box<[Notify]>,
    /// The concurrency permits given out here under a lease and not given
    /// back yet: their releases come back here, and only theirs (a permit
    /// taken in Redis is never given back locally). Bounded, kept until
    /// given back or forgotten for room (a forgotten permit's release goes
    /// to Redis, which does not hold it, so its units stay taken here, as a
    /// release lost in any other way would leave them).
    permits: IssuedPermits,
    stats: Arc<SharingStats>,
    lease: Script,
    sync: Script,
    /// Set while the background task runs.
    task: Arc<AtomicBool>,
}

/// Why a request was not decided here.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Redis could not be asked (the failure policy decides).
    Backend,
    /// Every grant was taken by other requests first: decide in Redis.
    Starved,
    /// A limit Redis cannot decide exactly (a configuration error).
    Unsupported(UnsupportedLimit),
}

impl Sharing {
    pub(crate) fn new(
        capacity: usize,
        default: SyncMode,
        client_time: bool,
    ) -> Result<Self, floodgate::ConfigError> {
        Ok(Sharing {
            store: Store::new(StoreConfig::with_capacity(capacity.max(1)))?,
            default,
            holder: format!("{:x}", holder_id()),
            clock: clock::Clock::new(client_time),
            queue: Queue::default(),
            wake: (0..WAKE_GROUPS).map(|_| Notify::new()).collect(),
            permits: IssuedPermits::new(1_000_000, None),
            stats: Arc::default(),
            lease: Script::new(LEASE),
            sync: Script::new(SYNC),
            task: Arc::new(AtomicBool::new(false)),
        })
    }

    pub(crate) fn stats(&self) -> &Arc<SharingStats> {
        &self.stats
    }

    /// The store-wide default mode.
    pub(crate) fn default_mode(&self) -> SyncMode {
        self.default
    }

    /// How `item` is decided: `None` in Redis.
    #[inline]
    pub(crate) fn share_of(&self, item: &Item<'_>) -> Option<Share> {
        let mode = item.sync.unwrap_or(self.default);
        if mode == SyncMode::Exact {
            return None;
        }
        share(mode, item.limit)
    }

    /// Whether any of `items` is decided here.
    #[inline]
    pub(crate) fn any_local(&self, items: &[Item<'_>]) -> bool {
        items.iter().any(|i| self.share_of(i).is_some())
    }

    /// The mode deciding `item` (for reports).
    pub(crate) fn mode_of(&self, item: &Item<'_>) -> SyncMode {
        let mode = item.sync.unwrap_or(self.default);
        match self.share_of(item) {
            Some(_) => mode,
            None => SyncMode::Exact,
        }
    }

    fn wake_of(&self, key: &[u8]) -> &Notify {
        // FNV-1a: any spread will do.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key.iter().rev().take(32) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.wake[(h % WAKE_GROUPS as u64) as usize]
    }
}

/// A random id for this instance's leases.
fn holder_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    let seed = RandomState::new();
    seed.hash_one((std::process::id(), std::time::SystemTime::now())) | 1
}
