//! What a stream sends between reports: a bucket's new assignment when
//! the streams sharing it on this instance change (one joins, leaves, or
//! falls silent past the time to live), at most once per bucket per half
//! time to live; and, after a reload, the abandonment of buckets whose
//! rule is gone. A push only looks at the bucket's counter, never
//! charges it.

use std::time::Instant;

use floodgate::Apply;

use crate::proto::rlqs::rate_limit_quota_response::BucketAction;

use super::assignment::{self, Kind};
use super::mapping::BucketKey;
use super::stream::{QuotaStream, removals_every};

impl QuotaStream {
    /// `key`'s new assignment, unless this stream no longer holds it, was
    /// pushed it within the bound, or the store cannot decide now.
    pub(super) async fn push(&mut self, key: &BucketKey) -> Option<BucketAction> {
        let ttl = self.rlqs.settings.assignment_ttl;
        let now = Instant::now();
        let held = self.buckets.get_mut(key)?;
        if held
            .pushed
            .is_some_and(|at| now.saturating_duration_since(at) < removals_every(ttl))
        {
            return None;
        }
        held.pushed = Some(now);
        let domain = self.domain.clone()?;
        if !self.charge(&domain, key, 0).await.ok()? {
            return None;
        }
        let local = self.rlqs.shares.usages(key, now, ttl);
        Some(self.assign(key, local, false).await)
    }

    /// Every half time to live: forgets the streams of this stream's
    /// buckets that fell silent (their other streams are nudged), and
    /// abandons buckets a reload removed.
    pub(super) async fn on_tick(&mut self) -> Vec<BucketAction> {
        let ttl = self.rlqs.settings.assignment_ttl;
        (self.rlqs.shares).expire(self.buckets.keys(), Instant::now(), ttl);
        self.abandon_removed().await
    }

    /// After a reload, abandons the buckets a rule limited that no rule
    /// matches any more.
    async fn abandon_removed(&mut self) -> Vec<BucketAction> {
        let generation = self.rlqs.svc.engine().policy().generation();
        let (Some(domain), true) = (self.domain.clone(), generation != self.generation) else {
            return Vec::new();
        };
        self.generation = generation;
        let limited: Vec<BucketKey> = (self.buckets.iter())
            .filter(|(_, held)| held.limited)
            .map(|(k, _)| k.clone())
            .collect();
        let mut actions = Vec::new();
        for key in limited {
            let descriptor = [key.descriptor(1)];
            let engine = self.rlqs.svc.engine();
            let checked = engine
                .evaluate_with(&domain, &descriptor, 0, Apply::Check, &mut self.response)
                .await;
            if checked.is_ok() && self.response.statuses[0].rule.is_none() {
                self.buckets.remove(&key);
                self.rlqs.shares.leave([&key], self.id);
                let (backend, ttl) = (engine.backend(), self.rlqs.settings.assignment_ttl);
                self.rlqs.fleet.leave(backend, [&key], self.id, ttl).await;
                self.rlqs.metrics.action(Kind::Abandon);
                actions.push(assignment::abandon(&key));
            }
        }
        actions
    }
}
