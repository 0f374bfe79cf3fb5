//! Several keys, several limits, one atomic decision: the request is admitted
//! only if every limit admits it, and then every limit is charged; otherwise
//! nothing is charged (except penalty-mode limits).

use std::borrow::Borrow;
use std::hash::Hash;

use super::shard::{Shard, Swept, idle_secs, prefetch_entry};
use super::slot::SlotGuard;
use super::{Store, WhenFull};
use crate::algorithm::{Algorithm, Apply};
use crate::key::ToKey;
use crate::{Decision, Timestamp};

/// One (key, limit, cost) of a batch.
#[derive(Debug)]
pub struct Item<'a, Q: ?Sized, A> {
    /// The key the limit applies to.
    pub key: &'a Q,
    /// The limit.
    pub limit: &'a A,
    /// The request's cost under this limit (0 checks without charging).
    pub cost: u64,
}

impl<Q: ?Sized, A> Clone for Item<'_, Q, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Q: ?Sized, A> Copy for Item<'_, Q, A> {}

/// Whether a batch's new key finds a place in a full store
/// ([`WhenFull::Deny`]).
enum Room {
    /// Not a new key that keeps a state: it needs none.
    NotNeeded,
    /// A place for it.
    Taken,
    /// None: the batch is refused.
    Refused,
}

/// Per-item bookkeeping: hash, the index of its shard's guard, and the item
/// it is merged into (items with the same key share one state).
#[derive(Clone, Copy, Default)]
struct Slot {
    hash: u64,
    shard: usize,
    guard: usize,
    lead: usize,
    cost: u64,
}

impl<K: Hash + Eq, S> Store<K, S> {
    /// Decides on one request against several (key, limit) pairs at once,
    /// atomically: all admit it and all are charged, or none is charged
    /// (penalty-mode limits excepted, never an
    /// [in-flight](Algorithm::in_flight) one). Each item's own decision is
    /// written to `out` (same order, same length as `items`); the returned
    /// decision is the [narrowest](Decision::narrowest).
    ///
    /// Items with equal keys share one state and are decided in order, as
    /// if sent one after the other: each is checked against the state the
    /// items before it leave, and reports the state after its own cost
    /// (limits whose states cannot be [copied](Algorithm::snapshot) add
    /// up their costs instead, and share one decision).
    /// The request is admitted when every item admits it in its turn; then
    /// each is charged in order. When it is rejected, each reports its turn
    /// as if the items before it had been charged, and the key is left as
    /// the items' summed cost, rejected, leaves it (a penalty-mode limit
    /// counts all of them). `apply` is [`Apply::Commit`] for a normal
    /// request, [`Apply::Force`] to charge whatever the outcome, or
    /// [`Apply::Check`] to peek (nothing is charged; see
    /// [`simulate_many`](Self::simulate_many) for a dry run).
    ///
    /// # Panics
    ///
    /// If `items` is empty or `out` is shorter than `items`.
    pub fn decide_many<A, Q>(
        &self,
        items: &[Item<'_, Q, A>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        assert!(!items.is_empty() && out.len() >= items.len());
        if let [item] = items {
            // One limit is its own batch: deciding it with `apply` is what
            // checking it and then committing (or rejecting) would do, in
            // one pass and without the batch's bookkeeping.
            let d = self.decide(item.limit, item.key, now, item.cost, apply);
            out[0] = d;
            return d;
        }
        self.run_many(items, now, apply, false, out)
    }

    /// A dry run of [`decide_many`](Self::decide_many) with
    /// [`Apply::Commit`]: every item's decision exactly as the real call
    /// would make it (admitted and charged in order, or rejected; penalty
    /// modes and blocks included), changing nothing. Limits whose states
    /// cannot be [copied](Algorithm::snapshot) are peeked at
    /// ([`Apply::Check`]) instead.
    ///
    /// # Panics
    ///
    /// If `items` is empty or `out` is shorter than `items`.
    pub fn simulate_many<A, Q>(
        &self,
        items: &[Item<'_, Q, A>],
        now: Timestamp,
        out: &mut [Decision],
    ) -> Decision
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        assert!(!items.is_empty() && out.len() >= items.len());
        if !copies(items) {
            return self.decide_many(items, now, Apply::Check, out);
        }
        self.run_many(items, now, Apply::Commit, true, out)
    }

    fn run_many<A, Q>(
        &self,
        items: &[Item<'_, Q, A>],
        now: Timestamp,
        apply: Apply,
        dry: bool,
        out: &mut [Decision],
    ) -> Decision
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let mut inline = [Slot::default(); 16];
        let mut heap = Vec::new();
        let slots: &mut [Slot] = if items.len() <= inline.len() {
            &mut inline[..items.len()]
        } else {
            heap.resize(items.len(), Slot::default());
            &mut heap
        };
        let mut duplicates = false;
        for (i, item) in items.iter().enumerate() {
            let hash = self.hash(item.key);
            let shard = self.shard_of(hash);
            prefetch_entry::<K, S>(self.prefetch, self.shards[shard].hint(), hash);
            let lead = (0..i)
                .find(|&j| slots[j].hash == hash && items[j].key == item.key)
                .unwrap_or(i);
            duplicates |= lead != i;
            slots[i] = Slot {
                hash,
                shard,
                guard: 0,
                lead,
                cost: 0,
            };
            slots[lead].cost = slots[lead].cost.saturating_add(item.cost);
        }
        // Items sharing a key, and dry runs, decide on copies of states.
        let views = (duplicates || dry) && copies(items);
        // Lock the distinct shards in ascending order.
        let mut order: Vec<usize> = Vec::new();
        let mut small = [0usize; 16];
        let distinct: &mut [usize] = if items.len() <= small.len() {
            for (d, s) in small.iter_mut().zip(slots.iter()) {
                *d = s.shard;
            }
            &mut small[..items.len()]
        } else {
            order.extend(slots.iter().map(|s| s.shard));
            &mut order
        };
        distinct.sort_unstable();
        let mut n = 0;
        for i in 0..distinct.len() {
            if i == 0 || distinct[i] != distinct[n - 1] {
                distinct[n] = distinct[i];
                n += 1;
            }
        }
        let distinct = &distinct[..n];
        // The guards live on the stack for the usual small batches.
        let mut inline_guards: [Option<SlotGuard<'_, Shard<K, S>>>; 16] =
            std::array::from_fn(|_| None);
        let mut heap_guards: Vec<Option<SlotGuard<'_, Shard<K, S>>>> = Vec::new();
        let guards: &mut [Option<SlotGuard<'_, Shard<K, S>>>] = if n <= inline_guards.len() {
            &mut inline_guards[..n]
        } else {
            heap_guards.resize_with(n, || None);
            &mut heap_guards
        };
        for (g, &s) in guards.iter_mut().zip(distinct) {
            *g = Some(self.shards[s].lock());
        }
        // One instant for the whole batch: the latest any of its shards has
        // seen (a clock that went backwards is no time elapsed), recorded
        // in all of them.
        let mut latest = now.as_nanos();
        for g in guards.iter_mut() {
            latest = latest.max(locked(g).monotonic(now.as_nanos()));
        }
        for g in guards.iter_mut() {
            locked(g).monotonic(latest);
        }
        let now = Timestamp::from_nanos(latest);
        for slot in slots.iter_mut() {
            slot.guard = distinct.binary_search(&slot.shard).unwrap_or(0);
        }
        let slots: &[Slot] = slots;
        let members = |lead: usize| (lead..items.len()).filter(move |&j| slots[j].lead == lead);
        // The item whose new key a full store has no room for, under
        // `WhenFull::Deny`: the whole batch is rejected for it. New keys
        // found room for so far, per guard: two in one shard need two
        // places.
        let mut refused = None;
        let mut reserved: Vec<usize> = Vec::new();
        let (mode, forced) = match apply {
            Apply::Commit | Apply::Force => {
                let mut all = true;
                for i in (0..items.len()).filter(|&i| slots[i].lead == i) {
                    let guard = locked(&mut guards[slots[i].guard]);
                    let admitted = if views && duplicates && members(i).nth(1).is_some() {
                        // In order, each against what the ones before it
                        // would leave.
                        let Some(mut view) = self.snapshot(guard, &slots[i], &items[i]) else {
                            unreachable!("states are copied when `views`")
                        };
                        members(i).all(|j| {
                            items[j]
                                .limit
                                .decide(&mut view, now, items[j].cost, Apply::Commit)
                                .is_allowed()
                        })
                    } else {
                        let cost = if views { items[i].cost } else { slots[i].cost };
                        let (d, _) =
                            self.visit(guard, &slots[i], &items[i], cost, now, Apply::Check, false);
                        d.is_allowed()
                    };
                    if admitted && !dry && self.when_full == WhenFull::Deny {
                        if reserved.is_empty() {
                            reserved.resize(distinct.len(), 0);
                        }
                        let held = &mut reserved[slots[i].guard];
                        match self.room(
                            guard,
                            &slots[i],
                            &items[i],
                            slots[i].cost,
                            now,
                            *held,
                            apply,
                        ) {
                            Room::Refused => {
                                refused = Some(i);
                                all = false;
                                break;
                            }
                            Room::Taken => *held += 1,
                            Room::NotNeeded => {}
                        }
                    }
                    if !admitted {
                        all = false;
                        break;
                    }
                }
                match (all, apply) {
                    (true, a) => (a, false),
                    (false, Apply::Force) => (Apply::Force, true),
                    (false, _) => (Apply::Rejected, false),
                }
            }
            other => (other, false),
        };
        let mut swept = Swept::default();
        for i in (0..items.len()).filter(|&i| slots[i].lead == i) {
            let slot = slots[i];
            let guard = locked(&mut guards[slot.guard]);
            // A forced charge of a rejected request spares in-flight
            // limits: they never charge what they did not admit.
            let mode = if forced && items[i].limit.in_flight() {
                Apply::Rejected
            } else {
                mode
            };
            let single = !duplicates || members(i).nth(1).is_none();
            if (single || !views) && !dry {
                // One item, or items whose states cannot be copied: their
                // costs added up, one decision for all.
                let (d, s) = self.visit(guard, &slot, &items[i], slot.cost, now, mode, true);
                swept.reclaimed += s.reclaimed;
                swept.evicted += s.evicted;
                if duplicates {
                    for j in members(i) {
                        out[j] = d;
                    }
                } else {
                    out[i] = d;
                }
                continue;
            }
            if dry || matches!(mode, Apply::Check | Apply::Rejected) {
                // Reported in order against a view of the key where the
                // items before each one were charged.
                let Some(mut view) = self.snapshot(guard, &slot, &items[i]) else {
                    unreachable!("states are copied when `views`")
                };
                let charging = matches!(mode, Apply::Commit | Apply::Force);
                for j in members(i) {
                    let item = &items[j];
                    if charging {
                        out[j] = item.limit.decide(&mut view, now, item.cost, mode);
                    } else {
                        let Some(mut probe) = item.limit.snapshot(&view) else {
                            unreachable!("states are copied when `views`")
                        };
                        out[j] = item.limit.decide(&mut probe, now, item.cost, mode);
                        item.limit.decide(&mut view, now, item.cost, Apply::Force);
                    }
                }
                if !dry && mode == Apply::Rejected {
                    // The key itself takes the summed cost, rejected.
                    let (_, s) = self.visit(
                        guard,
                        &slot,
                        &items[i],
                        slot.cost,
                        now,
                        Apply::Rejected,
                        true,
                    );
                    swept.reclaimed += s.reclaimed;
                    swept.evicted += s.evicted;
                }
                continue;
            }
            // Charged in order.
            for j in members(i) {
                let (d, s) = self.visit(guard, &slot, &items[j], items[j].cost, now, mode, true);
                swept.reclaimed += s.reclaimed;
                swept.evicted += s.evicted;
                out[j] = d;
            }
        }
        drop(inline_guards);
        drop(heap_guards);
        self.record(swept);
        if let Some(i) = refused {
            for j in members(i) {
                out[j] = self.without_room(out[j]);
            }
        }
        out[..items.len()]
            .iter()
            .copied()
            .reduce(Decision::narrowest)
            .expect("items is not empty")
    }

    /// A copy of the state `item`'s key holds in its (locked) shard, or a
    /// fresh one; `None` when its limit cannot copy states.
    fn snapshot<A, Q>(
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
    fn room<A, Q>(
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
        let (swept, room) = shard.before_insert(now, self.shard_cap, tick, self.when_full);
        self.record(swept);
        if room && shard.table.len() + held < self.shard_cap {
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
    fn visit<A, Q>(
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

/// Whether every item's limit can copy states (see
/// [`Algorithm::snapshot`]).
fn copies<Q: ?Sized, A: Algorithm>(items: &[Item<'_, Q, A>]) -> bool {
    items
        .iter()
        .all(|i| i.limit.snapshot(&i.limit.fresh()).is_some())
}

/// The guard of a shard locked at the start of the batch.
fn locked<'a, 'g, T>(g: &'a mut Option<SlotGuard<'g, T>>) -> &'a mut SlotGuard<'g, T> {
    g.as_mut()
        .expect("every shard of the batch is locked before any item is visited")
}
