//! What this instance holds of its keys, handed over or reported: units
//! given back (a permit released), everything sent to Redis before Redis
//! decides a batch as a whole, and what `/v1/check` shows.

use floodgate::Timestamp;
use floodgate::algorithms::AnyLimit;
use floodgate_policy::{Held, Item, SyncMode};
use smallvec::SmallVec;

use super::calls::Ask;
use super::local::Keep;
use super::take::{Caller, Taken, take_from};
use super::{Gate, Sharing};
use crate::RedisBackend;

impl Sharing {
    /// Gives back `units` of `item` that this instance admitted under a
    /// lease (a permit it gave out); returns the units given back here and
    /// the units left to give back elsewhere (all of them when it admitted
    /// none).
    pub(crate) fn release(&self, item: &Item<'_>, units: u64, now: Timestamp) -> (u64, u64) {
        if self.share_of(item).is_none() && item.permit.is_none() {
            return (0, units);
        }
        let (units, left) = if !item.permit.is_none() {
            match self.permits.take(item.permit, item.key, units, now) {
                // A permit given out here gives back here only.
                Some(given) => (given, 0),
                None => return (0, units),
            }
        } else {
            (units, units)
        };
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        let done = self.store.update(&Keep, item.key, t, |e| {
            let u = units.min(e.lease.in_use);
            e.limit.release(&mut e.replica, u);
            e.lease.in_use -= u;
            e.lease.units = e.lease.units.saturating_add(u);
            let queue = (!e.queued && u > 0).then(|| e.names.clone()).flatten();
            if queue.is_some() {
                e.queued = true;
            }
            (u, queue.map(|n| (e.lease.end, n)))
        });
        let Some((given, queue)) = done else {
            return (0, left);
        };
        if let Some((due, names)) = queue {
            self.queue.push(due, names);
        }
        (given, left.saturating_sub(given))
    }

    /// Before Redis decides `items` as a whole (a batch mixing modes, or
    /// starved here): what this instance holds of them goes to Redis first
    /// (leases given back, hits pushed, penalties told), so that Redis
    /// decides on the same counts as this instance would.
    pub(crate) async fn settle(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        items: &[Item<'_>],
        now: Timestamp,
    ) {
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        let mut asks: SmallVec<[(&[u8], &AnyLimit, Ask); 4]> = SmallVec::new();
        for item in items {
            let Some(share) = self.share_of(item) else {
                continue;
            };
            if asks.iter().any(|(k, _, _)| *k == item.key) {
                continue;
            }
            let taken = self.store.update(&Keep, item.key, t, |e| {
                take_from(e, share, 0, t, Caller::All)
            });
            if let Some(Taken::Go(ask)) = taken {
                asks.push((item.key, item.limit, ask));
            }
        }
        if !asks.is_empty() {
            let _ = self.call(redis, gate, &asks, now).await;
        }
    }

    /// Redis decided `items` (a batch decided there as a whole): the ones
    /// decided here otherwise ask Redis again before their next decision
    /// here.
    pub(crate) fn decided_in_redis(&self, items: &[Item<'_>], now: Timestamp) {
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        // (Also when no entry has been created: nothing to mark then.)
        for item in items {
            if self.share_of(item).is_some() {
                self.store.update(&Keep, item.key, t, |e| e.stale = true);
            }
        }
    }

    /// The mode deciding `item` and what this instance holds of it.
    pub(crate) fn held(&self, item: &Item<'_>, now: Timestamp) -> Held {
        let Some(share) = self.share_of(item) else {
            return Held {
                mode: SyncMode::Exact,
                leased: 0,
                unsynced: 0,
            };
        };
        let mode = self.mode_of(item);
        let t = self.clock.now(now).unwrap_or(now);
        let margin = self.margin(share);
        let (leased, unsynced) = self
            .store
            .update(&Keep, item.key, t, |e| {
                let unsynced = e.view.hits.total();
                (e.usable(t, margin), unsynced)
            })
            .unwrap_or((0, 0));
        Held {
            mode,
            leased,
            unsynced,
        }
    }
}
