//! Leased concurrency limits in memory: the units each holder takes are
//! kept in the counter's own state, each lot with the end of its lease
//! ([`floodgate::algorithms::LeaseState`]), so the units of a holder that
//! never gives them back return when their lease ends, and a holder gives
//! back only its own. The permits table is not used for them.

use floodgate::algorithms::{AnyLimit, HeldBy};
use floodgate::{Apply, Decision, Timestamp};
use smallvec::SmallVec;

use super::{Item, MemoryBackend, Released};

/// Items decided without a heap allocation.
const INLINE: usize = 16;

/// The holder `item` names (its permit, for a leased limit: see
/// [`Item::permit`]).
fn holder(item: &Item<'_>) -> u64 {
    item.permit.get() as u64
}

impl MemoryBackend {
    /// Decides a request with a leased concurrency limit among its items:
    /// every item decided for its holder, atomically as any other batch.
    pub(super) fn decide_leased(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        let ids: SmallVec<[u128; INLINE]> = items.iter().map(|i| self.ids.of(i.key)).collect();
        let held: SmallVec<[HeldBy<'_>; INLINE]> = items
            .iter()
            .map(|i| HeldBy::new(i.limit, holder(i)))
            .collect();
        let batch: SmallVec<[floodgate::store::Item<'_, u128, HeldBy<'_>>; INLINE]> = held
            .iter()
            .zip(&ids)
            .zip(items)
            .map(|((h, id), i)| floodgate::store::Item {
                key: id,
                limit: h,
                cost: i.cost,
            })
            .collect();
        let d = if apply == Apply::Check {
            self.store.simulate_many(&batch, now, out)
        } else {
            self.store.decide_many(&batch, now, apply, out)
        };
        self.record(items, &ids, d, apply);
        d
    }

    /// Gives back up to `units` of the units `item`'s holder holds of its
    /// leased counter: [`Released::NotHeld`] when it holds none.
    pub(super) fn release_leased(&self, item: Item<'_>, units: u64, now: Timestamp) -> Released {
        let id = self.ids.of(item.key);
        let limit: &AnyLimit = item.limit;
        let given = self
            .store
            .update(limit, &id, now, |s| {
                limit.give_back(s, now, units, holder(&item))
            })
            .unwrap_or(0);
        if given == 0 {
            Released::NotHeld
        } else {
            Released::Given(given)
        }
    }
}
