//! Decisions made here: passes of the core store against what the entries
//! hold, with calls to Redis for the keys that need a lease or a view in
//! between.

use std::sync::Arc;

use floodgate::algorithms::AnyLimit;
use floodgate::{Algorithm, Apply, Decision, Timestamp};
use floodgate_policy::Item;
use smallvec::SmallVec;

use super::calls::Ask;
use super::local::{Decide, Share, Signal};
use super::take::Taken;
use super::{Failed, Gate, ROUNDS, Sharing};
use crate::RedisBackend;

impl Sharing {
    /// Decides `items` here (each with its share), asking Redis for leases
    /// or views as needed. `Failed::Backend` when Redis was needed and
    /// could not answer; `Failed::Starved` when the request should be
    /// decided by Redis instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn decide(
        self: &Arc<Self>,
        redis: &Arc<RedisBackend>,
        gate: &Gate,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Result<Decision, Failed> {
        self.ensure_task(redis, gate);
        for _ in 0..ROUNDS {
            let signal = Signal::default();
            let at = self.clock.now(now);
            if let Some(t) = at {
                let d = self.pass(items, shares, t, apply, out, &signal);
                if signal.any_late() && !signal.any() {
                    return self
                        .decide_late(redis, gate, items, shares, now, apply, out, &signal)
                        .await;
                }
                if !signal.any() {
                    self.stats.local_decisions.inc();
                    if apply.charge_if_allowed() && d.is_allowed() {
                        self.hold_permits(items, now);
                    }
                    return Ok(d);
                }
            }
            let (asks, wait) = self.take_all(redis, items, shares, at, &signal, apply);
            if !asks.is_empty() {
                let keys: SmallVec<[(&[u8], &AnyLimit, Ask); 4]> = asks
                    .iter()
                    .map(|&(i, ask)| (items[i].key, items[i].limit, ask))
                    .collect();
                self.call(redis, gate, &keys, now).await?;
            } else if let Some(i) = wait {
                self.wait(redis, items[i].key, shares[i]).await;
            }
        }
        self.stats.starved.inc();
        Err(Failed::Starved)
    }

    /// Remembers the concurrency permits an admitted request holds here.
    fn hold_permits(&self, items: &[Item<'_>], now: Timestamp) {
        for i in items {
            if !i.permit.is_none() && i.cost > 0 && i.limit.is_concurrency() {
                self.permits.insert(i.permit, i.key, i.cost, now);
            }
        }
    }

    /// What the keys a pass marked (every key, when the clock had no time
    /// at `at`) send to Redis, once per key; and an item whose key waits
    /// for a call on its way.
    fn take_all(
        &self,
        redis: &RedisBackend,
        items: &[Item<'_>],
        shares: &[Share],
        at: Option<Timestamp>,
        signal: &Signal,
        apply: Apply,
    ) -> (SmallVec<[(usize, Ask); 4]>, Option<usize>) {
        let t = at.unwrap_or(Timestamp::ZERO);
        let mut asks: SmallVec<[(usize, Ask); 4]> = SmallVec::new();
        let mut wait = None;
        for (i, item) in items.iter().enumerate() {
            if at.is_some() && !signal.marks(i) {
                continue;
            }
            if asks.iter().any(|(j, _)| items[*j].key == item.key) {
                continue;
            }
            let need = if apply == Apply::Check {
                0
            } else {
                key_cost(items, item.key)
            };
            match self.take(redis, item, shares[i], need, t) {
                Taken::Go(ask) => asks.push((i, ask)),
                Taken::Wait => wait = Some(i),
                Taken::Nothing => {}
            }
        }
        (asks, wait)
    }

    /// A denied batch's items its second pass left undecided (Redis had
    /// never been asked about them): each asked, then decided on its own
    /// as the batch's second pass would have (a penalty charges them).
    #[allow(clippy::too_many_arguments)]
    async fn decide_late(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        signal: &Signal,
    ) -> Result<Decision, Failed> {
        for (i, item) in items.iter().enumerate() {
            if !signal.marks_late(i) {
                continue;
            }
            let cost = key_cost(items, item.key);
            let d = self
                .decide_one_late(redis, gate, item, shares[i], cost, now, apply)
                .await?;
            // Items with the same key share its decision.
            for (j, other) in items.iter().enumerate().skip(i) {
                if other.key == item.key {
                    out[j] = d;
                }
            }
        }
        let mut combined = out[0];
        for d in &out[1..items.len()] {
            combined = combined.narrowest(*d);
        }
        self.stats.local_decisions.inc();
        Ok(combined)
    }

    /// One of [`decide_late`](Self::decide_late)'s items (its key's
    /// items costing `cost` together): asked, then decided on its own.
    #[allow(clippy::too_many_arguments)]
    async fn decide_one_late(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        item: &Item<'_>,
        share: Share,
        cost: u64,
        now: Timestamp,
        apply: Apply,
    ) -> Result<Decision, Failed> {
        let mode = match apply {
            Apply::Force if !item.limit.in_flight() => Apply::Force,
            _ => Apply::Rejected,
        };
        for _ in 0..ROUNDS {
            let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
            match self.take(redis, item, share, 0, t) {
                Taken::Go(ask) => {
                    self.call(redis, gate, &[(item.key, item.limit, ask)], now)
                        .await?;
                }
                Taken::Wait => self.wait(redis, item.key, share).await,
                Taken::Nothing => {}
            }
            let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
            let one = Signal::default();
            let local = Decide {
                limit: item.limit,
                share,
                signal: &one,
                index: 0,
                apply: mode,
                margin: self.margin(share),
                queue: &self.queue,
                multi: false,
            };
            let d = self.store.decide(&local, item.key, t, cost, mode);
            if !one.any() {
                return Ok(d);
            }
        }
        Err(Failed::Starved)
    }

    /// One decision pass in the core store.
    fn pass(
        &self,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        signal: &Signal,
    ) -> Decision {
        let locals: SmallVec<[Decide<'_>; 16]> = items
            .iter()
            .zip(shares)
            .enumerate()
            .map(|(index, (item, &share))| Decide {
                limit: item.limit,
                share,
                signal,
                index,
                apply,
                margin: self.margin(share),
                queue: &self.queue,
                multi: items.len() > 1,
            })
            .collect();
        let batch: SmallVec<[floodgate::store::Item<'_, [u8], Decide<'_>>; 16]> = items
            .iter()
            .zip(&locals)
            .map(|(item, limit)| floodgate::store::Item {
                key: item.key,
                limit,
                cost: item.cost,
            })
            .collect();
        self.store.decide_many(&batch, now, apply, out)
    }

    /// How much earlier than its end a lease stops being used (see
    /// [`super::clock::Clock::margin`]).
    pub(super) fn margin(&self, share: Share) -> u64 {
        match share {
            Share::Lease { duration } => self.clock.margin(duration),
            Share::Sync { .. } => 0,
        }
    }
}

/// What the items on `key` cost together: items with the same key share
/// one counter, their costs add up (as the store merges them).
fn key_cost(items: &[Item<'_>], key: &[u8]) -> u64 {
    items
        .iter()
        .filter(|j| j.key == key)
        .fold(0u64, |n, j| n.saturating_add(j.cost))
}
