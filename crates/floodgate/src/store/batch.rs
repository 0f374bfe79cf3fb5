//! Several keys, several limits, one atomic decision: the request is admitted
//! only if every limit admits it, and then every limit is charged; otherwise
//! nothing is charged (except penalty-mode limits).

use std::borrow::Borrow;
use std::hash::Hash;

use super::shard::{Shard, Swept, prefetch_entry};
use super::slot::SlotGuard;
use super::visit::Room;
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

/// Per-item bookkeeping: hash, the index of its shard's guard, and the item
/// it is merged into (items with the same key share one state).
#[derive(Clone, Copy, Default)]
pub(super) struct Slot {
    /// The key's hash.
    pub(super) hash: u64,
    /// Its shard.
    shard: usize,
    /// The index of its shard's guard.
    guard: usize,
    /// The first item with the same key.
    lead: usize,
    /// For that first item, the summed cost of every item with the key.
    cost: u64,
}

/// A batch being decided: its items, their bookkeeping, and how it runs.
struct Batch<'b, 'a, Q: ?Sized, A> {
    items: &'b [Item<'a, Q, A>],
    slots: &'b [Slot],
    /// Some key is shared by several items.
    duplicates: bool,
    /// Items sharing a key, and dry runs, decide on copies of states.
    views: bool,
    /// Nothing is changed ([`Store::simulate_many`]).
    dry: bool,
}

impl<Q: ?Sized, A> Batch<'_, '_, Q, A> {
    /// The items that come first among those sharing their key.
    #[inline]
    fn leads(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.items.len()).filter(|&i| self.slots[i].lead == i)
    }

    /// The items sharing the key of the item at `lead`, in order.
    #[inline]
    fn members(&self, lead: usize) -> impl Iterator<Item = usize> + '_ {
        (lead..self.items.len()).filter(move |&j| self.slots[j].lead == lead)
    }

    /// Whether the key of the item at `lead` is shared by more items.
    #[inline]
    fn shared(&self, lead: usize) -> bool {
        self.duplicates && self.members(lead).nth(1).is_some()
    }
}

/// What the check decided the batch's charge is.
struct Verdict {
    /// How every key is charged.
    mode: Apply,
    /// A rejected request charged by [`Apply::Force`].
    forced: bool,
    /// The item whose new key a full store has no room for, under
    /// [`WhenFull::Deny`]: the whole batch is rejected for it.
    refused: Option<usize>,
}

impl Verdict {
    /// `mode` applied to every key, as asked.
    fn applying(mode: Apply) -> Self {
        Verdict {
            mode,
            forced: false,
            refused: None,
        }
    }
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

    /// The batch proper (two items or more): places the items, locks their
    /// shards, checks every item, then charges (or reports) each.
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
        let slots = on_stack(&mut inline, &mut heap, items.len(), Slot::default);
        let duplicates = self.place(items, slots);
        // Items sharing a key, and dry runs, decide on copies of states.
        let views = (duplicates || dry) && copies(items);
        let mut small = [0usize; 16];
        let mut order = Vec::new();
        let distinct = distinct_shards(slots, &mut small, &mut order);
        let mut inline_guards: [Option<SlotGuard<'_, Shard<K, S>>>; 16] =
            std::array::from_fn(|_| None);
        let mut heap_guards = Vec::new();
        let guards = on_stack(&mut inline_guards, &mut heap_guards, distinct.len(), || {
            None
        });
        let now = self.lock_all(guards, distinct, now);
        for slot in slots.iter_mut() {
            slot.guard = distinct.binary_search(&slot.shard).unwrap_or(0);
        }
        let batch = Batch {
            items,
            slots,
            duplicates,
            views,
            dry,
        };
        let verdict = match apply {
            Apply::Commit | Apply::Force => self.check_all(&batch, guards, now, apply),
            other => Verdict::applying(other),
        };
        let swept = self.charge_all(&batch, guards, now, &verdict, out);
        drop(inline_guards);
        drop(heap_guards);
        self.record(swept);
        if let Some(i) = verdict.refused {
            for j in batch.members(i) {
                out[j] = self.without_room(out[j]);
            }
        }
        out[..items.len()]
            .iter()
            .copied()
            .reduce(Decision::narrowest)
            .expect("items is not empty")
    }

    /// Fills each item's slot: its hash, its shard (whose entry is
    /// prefetched), and the first item with the same key, which carries
    /// their summed cost. Whether any key repeats.
    #[inline]
    fn place<A, Q>(&self, items: &[Item<'_, Q, A>], slots: &mut [Slot]) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
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
        duplicates
    }

    /// Locks the `distinct` shards in ascending order (two batches never
    /// wait on each other) and returns the batch's one instant: the latest
    /// any of its shards has seen (a clock that went backwards is no time
    /// elapsed), recorded in all of them.
    #[inline]
    fn lock_all<'s>(
        &'s self,
        guards: &mut [Option<SlotGuard<'s, Shard<K, S>>>],
        distinct: &[usize],
        now: Timestamp,
    ) -> Timestamp {
        for (g, &s) in guards.iter_mut().zip(distinct) {
            *g = Some(self.shards[s].lock());
        }
        let mut latest = now.as_nanos();
        for g in guards.iter_mut() {
            latest = latest.max(locked(g).monotonic(now.as_nanos()));
        }
        for g in guards.iter_mut() {
            locked(g).monotonic(latest);
        }
        Timestamp::from_nanos(latest)
    }

    /// The check before anything is charged ([`Apply::Commit`] or
    /// [`Apply::Force`]): whether every key admits the request in its turn
    /// and, under [`WhenFull::Deny`], finds room if new; it stops at the
    /// first that does not.
    #[inline]
    fn check_all<'s, A, Q>(
        &self,
        batch: &Batch<'_, '_, Q, A>,
        guards: &mut [Option<SlotGuard<'s, Shard<K, S>>>],
        now: Timestamp,
        apply: Apply,
    ) -> Verdict
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        // New keys found room for so far, per guard: two in one shard need
        // two places.
        let mut reserved: Vec<usize> = Vec::new();
        let shards = guards.len();
        let mut refused = None;
        let mut all = true;
        for i in batch.leads() {
            let slot = &batch.slots[i];
            let guard = locked(&mut guards[slot.guard]);
            let admitted = self.admits(batch, guard, i, now);
            if admitted && !batch.dry && self.when_full == WhenFull::Deny {
                if reserved.is_empty() {
                    reserved.resize(shards, 0);
                }
                let held = &mut reserved[slot.guard];
                match self.room(guard, slot, &batch.items[i], slot.cost, now, *held, apply) {
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
        let (mode, forced) = match (all, apply) {
            (true, a) => (a, false),
            (false, Apply::Force) => (Apply::Force, true),
            (false, _) => (Apply::Rejected, false),
        };
        Verdict {
            mode,
            forced,
            refused,
        }
    }

    /// Whether the key of the item at `lead` admits the request, changing
    /// nothing: the items sharing it in order, each against what the ones
    /// before it would leave, when their states are copied; otherwise
    /// their summed cost at once.
    #[inline]
    fn admits<A, Q>(
        &self,
        batch: &Batch<'_, '_, Q, A>,
        guard: &mut SlotGuard<'_, Shard<K, S>>,
        lead: usize,
        now: Timestamp,
    ) -> bool
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let (slot, item) = (&batch.slots[lead], &batch.items[lead]);
        if batch.views && batch.shared(lead) {
            let Some(mut view) = self.snapshot(guard, slot, item) else {
                unreachable!("states are copied when `views`")
            };
            return batch.members(lead).all(|j| {
                let member = &batch.items[j];
                member
                    .limit
                    .decide(&mut view, now, member.cost, Apply::Commit)
                    .is_allowed()
            });
        }
        let cost = if batch.views { item.cost } else { slot.cost };
        let (d, _) = self.visit(guard, slot, item, cost, now, Apply::Check, false);
        d.is_allowed()
    }

    /// Applies the verdict to every key, writing each item's decision to
    /// `out`; what the insertions swept.
    #[inline]
    fn charge_all<'s, A, Q>(
        &self,
        batch: &Batch<'_, '_, Q, A>,
        guards: &mut [Option<SlotGuard<'s, Shard<K, S>>>],
        now: Timestamp,
        verdict: &Verdict,
        out: &mut [Decision],
    ) -> Swept
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let mut swept = Swept::default();
        for i in batch.leads() {
            let guard = locked(&mut guards[batch.slots[i].guard]);
            // A forced charge of a rejected request spares in-flight
            // limits: they never charge what they did not admit.
            let mode = if verdict.forced && batch.items[i].limit.in_flight() {
                Apply::Rejected
            } else {
                verdict.mode
            };
            swept += self.charge(batch, guard, i, now, mode, out);
        }
        swept
    }

    /// Applies `mode` to the key of the item at `lead` for every item
    /// sharing it, writing their decisions to `out`.
    #[inline]
    fn charge<A, Q>(
        &self,
        batch: &Batch<'_, '_, Q, A>,
        guard: &mut SlotGuard<'_, Shard<K, S>>,
        lead: usize,
        now: Timestamp,
        mode: Apply,
        out: &mut [Decision],
    ) -> Swept
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let slot = &batch.slots[lead];
        let single = !batch.shared(lead);
        if (single || !batch.views) && !batch.dry {
            // One item, or items whose states cannot be copied: their
            // costs added up, one decision for all.
            let (d, s) = self.visit(guard, slot, &batch.items[lead], slot.cost, now, mode, true);
            if batch.duplicates {
                for j in batch.members(lead) {
                    out[j] = d;
                }
            } else {
                out[lead] = d;
            }
            return s;
        }
        if batch.dry || matches!(mode, Apply::Check | Apply::Rejected) {
            return self.report_in_order(batch, guard, lead, now, mode, out);
        }
        // Charged in order.
        let mut swept = Swept::default();
        for j in batch.members(lead) {
            let item = &batch.items[j];
            let (d, s) = self.visit(guard, slot, item, item.cost, now, mode, true);
            swept += s;
            out[j] = d;
        }
        swept
    }

    /// Reports the items sharing the key of the item at `lead` in order,
    /// against a view of the key where the items before each one were
    /// charged; a rejected request (not a dry run) then leaves the key as
    /// their summed cost, rejected, leaves it.
    fn report_in_order<A, Q>(
        &self,
        batch: &Batch<'_, '_, Q, A>,
        guard: &mut SlotGuard<'_, Shard<K, S>>,
        lead: usize,
        now: Timestamp,
        mode: Apply,
        out: &mut [Decision],
    ) -> Swept
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let (slot, lead_item) = (&batch.slots[lead], &batch.items[lead]);
        let Some(mut view) = self.snapshot(guard, slot, lead_item) else {
            unreachable!("states are copied when `views`")
        };
        let charging = matches!(mode, Apply::Commit | Apply::Force);
        for j in batch.members(lead) {
            let item = &batch.items[j];
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
        if batch.dry || mode != Apply::Rejected {
            return Swept::default();
        }
        // The key itself takes the summed cost, rejected.
        let (_, s) = self.visit(
            guard,
            slot,
            lead_item,
            slot.cost,
            now,
            Apply::Rejected,
            true,
        );
        s
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

/// The first `n` places of `inline` when they suffice, else `heap` grown to
/// `n`: the usual small batches keep their bookkeeping on the stack.
#[inline]
fn on_stack<'s, T, const N: usize>(
    inline: &'s mut [T; N],
    heap: &'s mut Vec<T>,
    n: usize,
    fill: impl FnMut() -> T,
) -> &'s mut [T] {
    if n <= N {
        &mut inline[..n]
    } else {
        heap.resize_with(n, fill);
        heap
    }
}

/// The distinct shards of `slots` in ascending order (the order they are
/// locked in), kept in `small` when it suffices, else in `order`.
#[inline]
fn distinct_shards<'s>(
    slots: &[Slot],
    small: &'s mut [usize; 16],
    order: &'s mut Vec<usize>,
) -> &'s [usize] {
    let shards = on_stack(small, order, slots.len(), || 0);
    for (d, s) in shards.iter_mut().zip(slots) {
        *d = s.shard;
    }
    shards.sort_unstable();
    let mut n = 0;
    for i in 0..shards.len() {
        if i == 0 || shards[i] != shards[n - 1] {
            shards[n] = shards[i];
            n += 1;
        }
    }
    &shards[..n]
}
