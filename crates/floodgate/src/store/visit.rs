//! One key of a batch in its (locked) shard: a copy of its state, a place
//! for it in a full store, a decision on it.

use std::borrow::Borrow;
use std::hash::Hash;

use super::batch::{Item, Slot};
use super::shard::{Shard, Swept, idle_secs};
use super::slot::SlotGuard;
use super::{Store, WhenFull};
use crate::algorithm::{Algorithm, Apply};
use crate::key::ToKey;
use crate::{Decision, Timestamp};

/// Whether a batch's new key finds a place in a full store
/// ([`WhenFull::Deny`]).
pub(super) enum Room {
    /// Not a new key that keeps a state: it needs none.
    NotNeeded,
    /// A place for it.
    Taken,
    /// None: the batch is refused.
    Refused,
}

impl<K: Hash + Eq, S> Store<K, S> {
    /// A copy of the state `item`'s key holds in its (locked) shard, or a
    /// fresh one; `None` when its limit cannot copy states.
    pub(super) fn snapshot<A, Q>(
        &self,
        shard: &mut SlotGuard<'_, Shard<K, S>>,
        slot: &Slot,
        item: &Item<'_, Q, A>,
    ) -> Option<S>
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match shard.table.find(slot.hash, |e| e.key.borrow() == item.key) {
            Some(e) => item.limit.snapshot(&e.state),
            None => Some(item.limit.fresh()),
        }
    }

    /// Under [`WhenFull::Deny`], whether `item`'s key needs a place in its
    /// shard (it is new and would keep a state after `cost`) and, if so,
    /// whether the shard has one beside the `held` places the batch's
    /// earlier new keys took there (looked for as an insertion would, so
    /// room made now is kept for them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn room<A, Q>(
        &self,
        shard: &mut SlotGuard<'_, Shard<K, S>>,
        slot: &Slot,
        item: &Item<'_, Q, A>,
        cost: u64,
        now: Timestamp,
        held: usize,
        apply: Apply,
    ) -> Room
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let known = shard
            .table
            .find(slot.hash, |e| e.key.borrow() == item.key)
            .is_some();
        if known {
            return Room::NotNeeded;
        }
        let mut state = item.limit.fresh();
        let (_, idle) = item.limit.decide_idle(&mut state, now, cost, apply);
        if idle <= now && idle != Timestamp::MAX {
            return Room::NotNeeded;
        }
        let tick = shard.tick();
        let (swept, room) = shard.before_insert(now, tick, self.when_full);
        self.record(swept);
        if room && shard.table.len() + held < shard.cap() {
            Room::Taken
        } else {
            Room::Refused
        }
    }

    /// Decides `cost` on one key in its (locked) shard; inserts the key
    /// when `store` is set and its state is no longer fresh (without state
    /// when the full store has no room: the batch's check has already
    /// refused it under [`WhenFull::Deny`], so it is admitted, counted).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn visit<A, Q>(
        &self,
        shard: &mut SlotGuard<'_, Shard<K, S>>,
        slot: &Slot,
        item: &Item<'_, Q, A>,
        cost: u64,
        now: Timestamp,
        apply: Apply,
        store: bool,
    ) -> (Decision, Swept)
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let tick = shard.next_tick();
        let limit = item.limit;
        let base = shard.base();
        if let Some(e) = shard
            .table
            .find_mut(slot.hash, |e| e.key.borrow() == item.key)
        {
            if !store {
                return (
                    limit.decide(&mut e.state, now, cost, apply),
                    Swept::default(),
                );
            }
            let (d, idle) = limit.decide_idle(&mut e.state, now, cost, apply);
            e.idle = idle_secs(idle, now, base, limit.pins());
            e.touched = tick;
            return (d, Swept::default());
        }
        let mut state = limit.fresh();
        let (d, idle) = limit.decide_idle(&mut state, now, cost, apply);
        let mut swept = Swept::default();
        // Kept: not idle yet, or pinned (permits held, even at the end of time).
        if store && (idle > now || idle == Timestamp::MAX) {
            let kept;
            (swept, kept) = self.insert(
                shard,
                slot.hash,
                || item.key.to_key(),
                state,
                (idle, limit.pins()),
                now,
            );
            if !kept {
                self.count_full(WhenFull::Admit);
            }
        }
        (d, swept)
    }
}
