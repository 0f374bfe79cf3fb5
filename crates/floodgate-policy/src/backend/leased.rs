//! Leased concurrency limits in memory: the units each holder takes are
//! kept in the counter's own state, each lot with the end of its lease
//! ([`floodgate::algorithms::LeaseState`]), so the units of a holder that
//! never gives them back return when their lease ends, and a holder gives
//! back only its own. The permits table is not used for them.

use std::sync::atomic::{AtomicU64, Ordering};

use floodgate::algorithms::{AnyLimit, HeldBy, Holder, Packed};
use floodgate::{Apply, Decision, Timestamp};
use smallvec::SmallVec;

use super::{Item, MemoryBackend, Released};

/// Items decided without a heap allocation.
const INLINE: usize = 16;

/// The holder `item` names (its permit, for a leased limit: see
/// [`Item::permit`]), counting the units whose lease ended in `expired`.
fn holder<'a>(item: &Item<'_>, expired: &'a AtomicU64) -> Holder<'a> {
    Holder {
        id: item.permit.get() as u64,
        expired: Some(expired),
    }
}

/// Adds the units a call found expired to `floodgate_store_lease_expired_total`
/// (rare: only a call that drops a lease ended unreturned).
fn count_expired(expired: &AtomicU64) {
    let n = expired.load(Ordering::Relaxed);
    if n > 0 {
        metrics::counter!("floodgate_store_lease_expired_total").increment(n);
    }
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
        let expired = AtomicU64::new(0);
        let ids: SmallVec<[super::KeyId; INLINE]> =
            items.iter().map(|i| self.ids.of(i.key)).collect();
        let held: SmallVec<[Packed<HeldBy<'_>>; INLINE]> = items
            .iter()
            .map(|i| Packed(HeldBy::holding(i.limit, holder(i, &expired))))
            .collect();
        let batch: SmallVec<
            [floodgate::store::Item<'_, super::KeyId, Packed<HeldBy<'_>>>; INLINE],
        > = held
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
        count_expired(&expired);
        d
    }

    /// Gives back up to `units` of the units `item`'s holder holds of its
    /// leased counter: [`Released::NotHeld`] when it holds none.
    pub(super) fn release_leased(&self, item: Item<'_>, units: u64, now: Timestamp) -> Released {
        let id = self.ids.of(item.key);
        let limit: &AnyLimit = item.limit;
        let expired = AtomicU64::new(0);
        let given = self
            .store
            .update(&Packed(limit), &id, now, |s| {
                s.update(|s| limit.give_back(s, now, units, holder(&item, &expired)))
            })
            .unwrap_or(0);
        count_expired(&expired);
        if given == 0 {
            Released::NotHeld
        } else {
            Released::Given(given)
        }
    }
}
