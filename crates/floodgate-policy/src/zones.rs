//! nginx's zones in the in-memory backend: the counters of a shaper limit
//! whose node expiry can change a decision live in one
//! [`ShaperZone`] per limit (a rule's limit is a `limit_req_zone`), so that
//! they are kept and deleted exactly as nginx keeps and deletes its nodes.
//! Every other counter lives in the sharded store.
//!
//! A request whose counters are in zones and in the store is decided
//! atomically all the same: its zones are locked (in ascending order, so
//! that two requests never wait on each other), checked, then the store's
//! counters are decided together, and the zones are charged only if
//! everything admitted the request. As in nginx, the limits are looked up
//! in order up to the first that rejects: a zone counter before it (or that
//! rejects) has its node moved to the front of its zone, or given one,
//! without being charged; a zone counter after it is not looked up at all.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use floodgate::algorithms::{AnyLimit, LimitKind, Packed, PackedState, Penalty, Shaper};
use floodgate::store::{ShaperZone, ZoneGuard};
use floodgate::{Apply, Decision, Store, Timestamp};
use smallvec::SmallVec;

use crate::backend::{Item, KeyId};
use crate::compile::PolicySet;

/// The zone a limit's counters need: `Some` for a shaper on its own
/// (no penalty, no block: nginx's `limit_req`) whose expiry can change a
/// decision ([`Shaper::expiry_shows`]).
pub(crate) fn zone_of(limit: &AnyLimit, fingerprint: u64, index: usize) -> Option<u64> {
    let LimitKind::Shaper(s) = limit.kind() else {
        return None;
    };
    (s.expiry_shows() && limit.penalty_mode() == Penalty::None && limit.block().is_zero()).then(
        || {
            // One id per (rule, limit), never 0.
            let mixed = fingerprint ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            mixed.max(1)
        },
    )
}

/// The shaper an item's zone decides with, when it has one.
fn zoned<'a>(item: &Item<'a>) -> Option<(u64, &'a Shaper)> {
    let zone = item.zone?;
    // Only a shaper is given a zone (`zone_of`).
    let LimitKind::Shaper(s) = item.limit.kind() else {
        return None;
    };
    Some((zone, s))
}

/// The in-memory backend's zones, by id.
pub(crate) struct Zones {
    capacity: usize,
    map: RwLock<HashMap<u64, Arc<ShaperZone<KeyId>>>>,
}

impl Zones {
    /// Zones of at most `capacity` nodes each.
    pub(crate) fn new(capacity: usize) -> Self {
        Zones {
            capacity,
            map: RwLock::new(HashMap::new()),
        }
    }

    /// Whether any of `items` is counted in a zone.
    #[inline]
    pub(crate) fn any(items: &[Item<'_>]) -> bool {
        items.iter().any(|i| i.zone.is_some())
    }

    fn get(&self, id: u64) -> Arc<ShaperZone<KeyId>> {
        if let Some(z) = self
            .map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
        {
            return Arc::clone(z);
        }
        let mut map = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(map.entry(id).or_insert_with(|| {
            Arc::new(ShaperZone::new(self.capacity).expect("the store's capacity is a zone's"))
        }))
    }

    /// Drops the zones no rule of `policy` has (their counters can never be
    /// decided again).
    pub(crate) fn keep(&self, policy: &PolicySet) {
        let live: std::collections::HashSet<u64> = policy
            .rules()
            .iter()
            .flat_map(|r| r.limits().iter().filter_map(|l| l.zone))
            .collect();
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|id, _| live.contains(id));
    }

    /// Nodes held across all zones.
    pub(crate) fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|z| z.len())
            .sum()
    }

    /// Decides `items` (some in zones) atomically, as the store decides a
    /// batch; `ids` are the items' counter ids.
    pub(crate) fn decide(
        &self,
        store: &Store<KeyId, PackedState>,
        items: &[Item<'_>],
        ids: &[KeyId],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        // The zones involved, each locked once, in ascending order.
        let mut order: SmallVec<[u64; 4]> =
            items.iter().filter_map(|i| zoned(i).map(|z| z.0)).collect();
        order.sort_unstable();
        order.dedup();
        let zones: SmallVec<[Arc<ShaperZone<KeyId>>; 4]> =
            order.iter().map(|&id| self.get(id)).collect();
        let mut locked = Locked {
            guards: zones.iter().map(|z| z.lock()).collect(),
            order,
        };

        // A dry run decides as the real call would, on copies.
        let dry = apply == Apply::Check;
        let apply = if dry { Apply::Commit } else { apply };
        let shared = Shared::of(items, ids);
        let n = items.len();
        let call = Call {
            items,
            ids,
            now,
            apply,
        };

        let mut refused = call.first_zone_refusal(&shared, &mut locked);
        refused = call.decide_stored(store, dry, refused, out);
        call.settle_zones(&shared, &mut locked, dry, refused, out);
        for i in 0..n {
            if shared.lead[i] != i {
                out[i] = out[shared.lead[i]];
            }
        }
        drop(locked);
        out[..n]
            .iter()
            .copied()
            .reduce(Decision::narrowest)
            .expect("items is not empty")
    }
}

/// The zones a request's items are counted in, locked.
struct Locked<'z> {
    /// Their ids, ascending.
    order: SmallVec<[u64; 4]>,
    /// Their guards, in the same order.
    guards: SmallVec<[ZoneGuard<'z, KeyId>; 4]>,
}

impl<'z> Locked<'z> {
    /// The guard of zone `id`.
    fn guard(&mut self, id: u64) -> &mut ZoneGuard<'z, KeyId> {
        let i = self.order.binary_search(&id).expect("every zone is locked");
        &mut self.guards[i]
    }
}

/// Items with the same counter share it: the first one (the lead)
/// decides, with their costs added up (as in the store).
struct Shared {
    /// Each item's lead.
    lead: SmallVec<[usize; 16]>,
    /// A lead's cost: its own and its followers'.
    cost: SmallVec<[u64; 16]>,
}

impl Shared {
    fn of(items: &[Item<'_>], ids: &[KeyId]) -> Self {
        let n = items.len();
        let mut lead: SmallVec<[usize; 16]> = SmallVec::with_capacity(n);
        let mut cost: SmallVec<[u64; 16]> = SmallVec::from_elem(0, n);
        for i in 0..n {
            let l = (0..i)
                .find(|&j| ids[j] == ids[i] && items[j].zone == items[i].zone)
                .unwrap_or(i);
            lead.push(l);
            cost[l] = cost[l].saturating_add(items[i].cost);
        }
        Shared { lead, cost }
    }
}

/// One call's items and how they are applied (a dry run's as its real call).
struct Call<'c, 'a> {
    items: &'c [Item<'a>],
    ids: &'c [KeyId],
    now: Timestamp,
    apply: Apply,
}

impl Call<'_, '_> {
    /// The zones' own check, in request order: the first item a zone
    /// refuses (`usize::MAX`: none, or nothing charged).
    fn first_zone_refusal(&self, shared: &Shared, locked: &mut Locked<'_>) -> usize {
        if !matches!(self.apply, Apply::Commit | Apply::Force) {
            return usize::MAX;
        }
        for (i, item) in self.items.iter().enumerate() {
            if let (true, Some((z, s))) = (shared.lead[i] == i, zoned(item)) {
                let d =
                    locked
                        .guard(z)
                        .decide(s, &self.ids[i], self.now, shared.cost[i], Apply::Check);
                if !d.is_allowed() {
                    return i;
                }
            }
        }
        usize::MAX
    }

    /// The store's counters, decided together (charged only if every
    /// zone admits the request); returns the first refusal so far.
    fn decide_stored(
        &self,
        store: &Store<KeyId, PackedState>,
        dry: bool,
        mut refused: usize,
        out: &mut [Decision],
    ) -> usize {
        let items = self.items;
        let stored: SmallVec<[usize; 16]> = (0..items.len())
            .filter(|&i| zoned(&items[i]).is_none())
            .collect();
        if stored.is_empty() {
            return refused;
        }
        let store_apply = match self.apply {
            Apply::Commit if refused != usize::MAX => Apply::Rejected,
            other => other,
        };
        let limits: SmallVec<[Packed<&AnyLimit>; 16]> =
            stored.iter().map(|&i| Packed(items[i].limit)).collect();
        let batch: SmallVec<[floodgate::store::Item<'_, KeyId, Packed<&AnyLimit>>; 16]> = stored
            .iter()
            .zip(&limits)
            .map(|(&i, limit)| floodgate::store::Item {
                key: &self.ids[i],
                limit,
                cost: items[i].cost,
            })
            .collect();
        let mut decided: SmallVec<[Decision; 16]> = SmallVec::from_elem(out[0], stored.len());
        let now = self.now;
        match (dry, store_apply) {
            (true, Apply::Commit) => store.simulate_many(&batch, now, &mut decided),
            (true, _) => store.decide_many(&batch, now, Apply::Check, &mut decided),
            (false, _) => store.decide_many(&batch, now, store_apply, &mut decided),
        };
        for (&i, d) in stored.iter().zip(&decided) {
            out[i] = *d;
            if !d.is_allowed() && matches!(self.apply, Apply::Commit | Apply::Force) {
                refused = refused.min(i);
            }
        }
        refused
    }

    /// The zones' counters: charged if everything admitted the request;
    /// otherwise looked up (not charged) up to the first refusal, and
    /// only looked at after it.
    fn settle_zones(
        &self,
        shared: &Shared,
        locked: &mut Locked<'_>,
        dry: bool,
        refused: usize,
        out: &mut [Decision],
    ) {
        for (i, item) in self.items.iter().enumerate() {
            let Some((z, s)) = zoned(item) else {
                continue;
            };
            if shared.lead[i] != i {
                continue;
            }
            let mode = match self.apply {
                Apply::Commit | Apply::Force if refused == usize::MAX => self.apply,
                Apply::Force => Apply::Force,
                Apply::Commit if i <= refused => Apply::Rejected,
                Apply::Commit => Apply::Check,
                other => other,
            };
            let (id, cost) = (&self.ids[i], shared.cost[i]);
            out[i] = if dry {
                locked.guard(z).dry_run(s, id, self.now, cost, mode)
            } else {
                locked.guard(z).decide(s, id, self.now, cost, mode)
            };
        }
    }
}
