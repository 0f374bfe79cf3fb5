//! The engine: a request's descriptors, matched against the current
//! [`PolicySet`], decided atomically by a [`Backend`], answered with one
//! status per descriptor — envoyproxy/ratelimit's semantics, plus
//! Floodgate's algorithms, layers, lists and switches.

mod errors;
mod keys;
mod request;
mod response;
mod scratch;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use floodgate::algorithms::{AnyLimit, FixedWindow, Penalty as CorePenalty};
use floodgate::{Apply, Clock, Decision, SystemClock, Timestamp};
use smallvec::SmallVec;

use crate::backend::{Backend, Item};
use crate::compile::{Action, Domain, PolicySet, Rule};
use crate::failure::OnFailure;
use crate::spec::{Dialect, Reported};

pub use errors::{EngineError, ErrorCode};
pub use request::{Descriptor, LimitOverride, OwnedDescriptor};
pub use response::{Code, CurrentLimit, Reason, Response, Status};

use scratch::{Batch, LimitRef, Slot};

/// Bounds on a request, so hostile input costs bounded work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_entries: usize,
    /// Longest key or value of an entry, in bytes.
    pub max_entry_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_descriptors: 256,
            max_entries: crate::compile::MAX_DEPTH,
            max_entry_bytes: 16 * 1024,
        }
    }
}

/// Decides requests against a hot-swappable policy.
pub struct Engine<B, C = SystemClock> {
    policy: ArcSwap<PolicySet>,
    backend: B,
    clock: C,
    limits: RequestLimits,
}

impl<B: Backend> Engine<B, SystemClock> {
    /// An engine on the system clock.
    pub fn new(policy: PolicySet, backend: B) -> Self {
        Self::with_clock(policy, backend, SystemClock)
    }
}

impl<B: Backend, C: Clock> Engine<B, C> {
    /// An engine on `clock`.
    pub fn with_clock(policy: PolicySet, backend: B, clock: C) -> Self {
        Engine {
            policy: ArcSwap::from_pointee(policy),
            backend,
            clock,
            limits: RequestLimits::default(),
        }
    }

    /// With other request bounds.
    pub fn with_request_limits(mut self, limits: RequestLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The current policy.
    pub fn policy(&self) -> Arc<PolicySet> {
        self.policy.load_full()
    }

    /// Swaps in a new policy atomically (requests in flight finish on the
    /// old one); returns the old one. Counters of unchanged rules carry over
    /// (their keys are equal).
    pub fn replace_policy(&self, policy: PolicySet) -> Arc<PolicySet> {
        self.policy.swap(Arc::new(policy))
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Decides one request: `descriptors` of `domain`, each charged its own
    /// hits addend or else `hits_addend` (0 meaning 1). The answer is
    /// written to `response` (reused across calls).
    pub async fn evaluate<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        self.evaluate_with(domain, descriptors, hits_addend, Apply::Commit, response)
            .await
    }

    /// Like [`evaluate`](Self::evaluate); `Apply::Check` decides without
    /// charging anything (a dry run).
    pub async fn evaluate_with<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        apply: Apply,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        self.validate(domain, descriptors)?;
        let policy = self.policy.load();
        response.overall = Code::Ok;
        response.shadowed = false;
        response.statuses.clear();
        response
            .statuses
            .resize(descriptors.len(), Status::default());
        response.scratch.clear();
        if !policy.settings.enforce {
            for s in &mut response.statuses {
                s.reason = Reason::Disabled;
            }
            return Ok(());
        }
        let Some(dom) = policy.domain(domain) else {
            metrics::counter!("floodgate_domain_not_found_total").increment(1);
            return Ok(());
        };
        let now = self.clock.now();
        self.match_descriptors(&policy, dom, descriptors, hits_addend, now, response);
        self.decide(&policy, now, apply, response).await?;
        finish(&policy, response);
        Ok(())
    }

    /// Gives back the concurrency units a response holds (call when the
    /// request completes; the gateway and the tower layer do).
    pub async fn release(&self, response: &Response) {
        let policy = self.policy.load();
        let now = self.clock.now();
        let scratch = &response.scratch;
        for (slot, d) in scratch.slots.iter().zip(&scratch.decisions) {
            let limit = limit_of(&policy, &scratch.overrides, slot.limit);
            if limit.is_concurrency() && d.is_allowed() && slot.cost > 0 {
                let key = &scratch.keys[slot.key.0 as usize..slot.key.1 as usize];
                let item = Item {
                    group: &key[..key.len() - 1],
                    key,
                    limit,
                    cost: slot.cost,
                    on_failure: on_failure_of(&policy, slot.limit),
                };
                let _ = self.backend.release(item, slot.cost, now).await;
            }
        }
    }

    fn validate<D: Descriptor>(&self, domain: &str, descriptors: &[D]) -> Result<(), EngineError> {
        if domain.is_empty() {
            return Err(EngineError::InvalidArgument(
                "rate limit domain must not be empty".into(),
            ));
        }
        if descriptors.is_empty() {
            return Err(EngineError::InvalidArgument(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        let l = &self.limits;
        if descriptors.len() > l.max_descriptors {
            return Err(EngineError::InvalidArgument(format!(
                "too many descriptors: {} (at most {})",
                descriptors.len(),
                l.max_descriptors
            )));
        }
        for (i, d) in descriptors.iter().enumerate() {
            if d.is_empty() {
                return Err(EngineError::InvalidArgument(format!(
                    "descriptor {i} has no entries"
                )));
            }
            if d.len() > l.max_entries {
                return Err(EngineError::InvalidArgument(format!(
                    "descriptor {i} has {} entries (at most {})",
                    d.len(),
                    l.max_entries
                )));
            }
            for j in 0..d.len() {
                let (k, v) = d.entry(j);
                if k.is_empty() {
                    return Err(EngineError::InvalidArgument(format!(
                        "descriptor {i} entry {j} has an empty key"
                    )));
                }
                if k.len() > l.max_entry_bytes || v.len() > l.max_entry_bytes {
                    return Err(EngineError::InvalidArgument(format!(
                        "descriptor {i} entry {j} is too long ({} bytes; keys and values are limited to {})",
                        k.len().max(v.len()),
                        l.max_entry_bytes
                    )));
                }
            }
        }
        Ok(())
    }

    /// Matches every descriptor, fills the statuses that need no counter,
    /// and lays out the counters of the others.
    fn match_descriptors<D: Descriptor>(
        &self,
        policy: &PolicySet,
        dom: &Domain,
        descriptors: &[D],
        hits_addend: u32,
        now: Timestamp,
        response: &mut Response,
    ) {
        let Response {
            statuses, scratch, ..
        } = response;
        let default_hits = (hits_addend as u64).max(1);
        let on_list = |list: &crate::compile::List, d: &D| {
            !list.is_empty()
                && (0..d.len()).any(|j| {
                    let (k, v) = d.entry(j);
                    list.contains(k, v)
                })
        };
        for (i, d) in descriptors.iter().enumerate() {
            let status = &mut statuses[i];
            let hits = d.hits_addend().unwrap_or(default_hits);
            status.hits = hits;
            if on_list(&dom.deny, d) {
                status.code = Code::OverLimit;
                status.reason = Reason::Denied;
                continue;
            }
            if on_list(&dom.allow, d) {
                status.reason = Reason::Unlimited;
                status.limit_remaining = u32::MAX;
                continue;
            }
            if let Some(ov) = d.limit_override() {
                self.layout_override(dom, d, ov, i, hits, now, policy, scratch, status);
                continue;
            }
            let entries = (0..d.len()).map(|j| d.entry(j));
            let Some(id) = dom.tree.lookup(entries, &mut scratch.path) else {
                continue;
            };
            let rule = policy.rule(id);
            if !rule.enabled {
                continue;
            }
            status.rule = Some(id);
            status.shadow = rule.shadow;
            match &rule.action {
                Action::Unlimited => {
                    status.reason = Reason::Unlimited;
                    status.limit_remaining = u32::MAX;
                }
                Action::Block { window, reported } => {
                    status.reason = Reason::Blocked;
                    status.current_limit = Some(current(rule, *reported));
                    status.duration_until_reset = until_window_end(now, *window);
                    if hits > 0 {
                        status.code = Code::OverLimit;
                    }
                }
                Action::Limit(limits) => {
                    status.reason = Reason::Limited;
                    let batch = if rule.quota {
                        Batch::Own
                    } else if rule.shadow {
                        Batch::Shadow
                    } else {
                        Batch::Enforced
                    };
                    let (start, end) = keys::group(
                        &mut scratch.keys,
                        rule.fingerprint,
                        d,
                        &scratch.path,
                        &dom.tree,
                    );
                    for idx in 0..limits.len() {
                        let key = keys::member(&mut scratch.keys, (start, end), idx as u8);
                        scratch.slots.push(Slot {
                            descriptor: i as u32,
                            key,
                            limit: LimitRef::Rule(id, idx as u8),
                            cost: hits.saturating_mul(rule.cost),
                            batch,
                        });
                    }
                }
            }
        }
        apply_replaces(policy, statuses, scratch);
    }

    #[allow(clippy::too_many_arguments)]
    fn layout_override<D: Descriptor>(
        &self,
        dom: &Domain,
        d: &D,
        ov: LimitOverride,
        i: usize,
        hits: u64,
        now: Timestamp,
        policy: &PolicySet,
        scratch: &mut scratch::Scratch,
        status: &mut Status,
    ) {
        let reported = Reported {
            requests_per_unit: ov.requests_per_unit,
            unit: ov.unit,
        };
        status.current_limit = Some(CurrentLimit {
            reported,
            name: None,
        });
        let window = ov.unit.duration();
        let Ok(limit) = FixedWindow::new(ov.requests_per_unit as u64, window) else {
            // requests_per_unit 0: every request is over.
            status.reason = Reason::Blocked;
            status.duration_until_reset = until_window_end(now, window);
            if hits > 0 {
                status.code = Code::OverLimit;
            }
            return;
        };
        let penalty = if dom.dialect == Dialect::Envoy && policy.settings.envoy_increment_all {
            CorePenalty::AllDenials
        } else {
            CorePenalty::OwnDenials
        };
        status.reason = Reason::Limited;
        let index = scratch.overrides.len() as u32;
        scratch
            .overrides
            .push(AnyLimit::from(limit).with_penalty_mode(penalty));
        let mut fp = crate::compile::StableHasher::default();
        fp.field(b"override")
            .field(dom.name.as_bytes())
            .u64(ov.requests_per_unit as u64)
            .u64(ov.unit as u64);
        let (start, end) = keys::group_plain(&mut scratch.keys, fp.finish(), d);
        let key = keys::member(&mut scratch.keys, (start, end), 0);
        scratch.slots.push(Slot {
            descriptor: i as u32,
            key,
            limit: LimitRef::Override(index),
            cost: hits,
            batch: Batch::Enforced,
        });
    }

    /// Decides the counters: the enforced ones in one atomic batch, the
    /// shadow-mode ones in another (as if enforced, like nginx's dry run),
    /// each quota rule on its own.
    async fn decide(
        &self,
        policy: &PolicySet,
        now: Timestamp,
        apply: Apply,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        let scratch = &mut response.scratch;
        let n = scratch.slots.len();
        if n == 0 {
            return Ok(());
        }
        scratch.decisions.resize(n, PLACEHOLDER);
        for batch in [Batch::Enforced, Batch::Shadow] {
            let mut items: SmallVec<[Item<'_>; 16]> = SmallVec::new();
            let mut at: SmallVec<[u32; 16]> = SmallVec::new();
            for (k, slot) in scratch.slots.iter().enumerate() {
                if slot.batch == batch {
                    items.push(item(policy, &scratch.keys, &scratch.overrides, slot));
                    at.push(k as u32);
                }
            }
            if items.is_empty() {
                continue;
            }
            let mut out: SmallVec<[Decision; 16]> = SmallVec::from_elem(PLACEHOLDER, items.len());
            self.backend.decide(&items, now, apply, &mut out).await?;
            for (d, &k) in out.iter().zip(&at) {
                scratch.decisions[k as usize] = *d;
            }
        }
        // Quota rules: each rule's limits together.
        let mut k = 0;
        while k < n {
            let slot = scratch.slots[k];
            let mut end = k + 1;
            while end < n && scratch.slots[end].descriptor == slot.descriptor {
                end += 1;
            }
            if slot.batch == Batch::Own {
                let items: SmallVec<[Item<'_>; 4]> = scratch.slots[k..end]
                    .iter()
                    .map(|s| item(policy, &scratch.keys, &scratch.overrides, s))
                    .collect();
                let mut out: SmallVec<[Decision; 4]> =
                    SmallVec::from_elem(PLACEHOLDER, items.len());
                self.backend.decide(&items, now, apply, &mut out).await?;
                scratch.decisions[k..end].copy_from_slice(&out);
            }
            k = end;
        }
        Ok(())
    }
}

const PLACEHOLDER: Decision = Decision {
    outcome: floodgate::Outcome::Allowed,
    limit: 0,
    remaining: 0,
    reset_after: Duration::ZERO,
    retry_after: None,
};

fn limit_of<'a>(policy: &'a PolicySet, overrides: &'a [AnyLimit], r: LimitRef) -> &'a AnyLimit {
    match r {
        LimitRef::Rule(id, idx) => &policy.rule(id).limits()[idx as usize].limit,
        LimitRef::Override(i) => &overrides[i as usize],
    }
}

fn item<'a>(
    policy: &'a PolicySet,
    keys: &'a [u8],
    overrides: &'a [AnyLimit],
    slot: &Slot,
) -> Item<'a> {
    let key = &keys[slot.key.0 as usize..slot.key.1 as usize];
    Item {
        group: &key[..key.len() - 1],
        key,
        limit: limit_of(policy, overrides, slot.limit),
        cost: slot.cost,
        on_failure: on_failure_of(policy, slot.limit),
    }
}

/// The failure policy of the rule a counter belongs to (limit overrides
/// sent with a request have none).
fn on_failure_of(policy: &PolicySet, r: LimitRef) -> Option<OnFailure> {
    match r {
        LimitRef::Rule(id, _) => policy.rule(id).on_failure,
        LimitRef::Override(_) => None,
    }
}

fn current(rule: &Rule, reported: Reported) -> CurrentLimit {
    CurrentLimit {
        reported,
        name: rule.name.clone(),
    }
}

/// Time to the end of the epoch-aligned window containing `now`.
fn until_window_end(now: Timestamp, window: Duration) -> Duration {
    let w = window.as_nanos().max(1) as u64;
    Duration::from_nanos(w - now.as_nanos() % w)
}

/// Which of `decisions` [`Decision::narrowest`] takes its numbers from: the
/// denying one with the least remaining if any denies, else the one with the
/// least remaining (ties: the smaller limit, then the first).
fn narrowest_index(decisions: &[Decision]) -> usize {
    let any_denied = decisions.iter().any(Decision::is_denied);
    decisions
        .iter()
        .enumerate()
        .filter(|(_, d)| !any_denied || d.is_denied())
        .min_by_key(|(_, d)| (d.remaining, d.limit))
        .map_or(0, |(i, _)| i)
}

/// Drops the counters of rules replaced by another matched rule.
fn apply_replaces(policy: &PolicySet, statuses: &mut [Status], scratch: &mut scratch::Scratch) {
    let replaces_any = statuses
        .iter()
        .filter_map(|s| s.rule)
        .any(|id| !policy.rule(id).replaces.is_empty());
    if !replaces_any {
        return;
    }
    let replaced = |name: &str| {
        statuses
            .iter()
            .filter_map(|s| s.rule)
            .any(|id| policy.rule(id).replaces.iter().any(|r| &**r == name))
    };
    let mut drop_desc: SmallVec<[bool; 16]> = SmallVec::from_elem(false, statuses.len());
    for (i, s) in statuses.iter().enumerate() {
        if let Some(name) = s.rule.and_then(|id| policy.rule(id).name.as_deref()) {
            drop_desc[i] = replaced(name);
        }
    }
    for (i, s) in statuses.iter_mut().enumerate() {
        if drop_desc[i] {
            *s = Status {
                reason: Reason::Replaced,
                hits: s.hits,
                ..Status::default()
            };
        }
    }
    scratch
        .slots
        .retain(|slot| !drop_desc[slot.descriptor as usize]);
}

/// Turns the decisions into statuses, the overall code and metrics.
fn finish(policy: &PolicySet, response: &mut Response) {
    let Response {
        statuses,
        scratch,
        overall,
        shadowed,
    } = response;
    let ratio = policy.settings.near_limit_ratio;
    let mut k = 0;
    let slots = &scratch.slots;
    while k < slots.len() {
        let desc = slots[k].descriptor as usize;
        let mut end = k + 1;
        while end < slots.len() && slots[end].descriptor as usize == desc {
            end += 1;
        }
        let decisions = &scratch.decisions[k..end];
        let narrowest = decisions
            .iter()
            .copied()
            .reduce(Decision::narrowest)
            .unwrap_or(PLACEHOLDER);
        let pick = k + narrowest_index(decisions);
        let status = &mut statuses[desc];
        let reported = match slots[pick].limit {
            LimitRef::Rule(id, idx) => {
                let rule = policy.rule(id);
                let r = rule.limits()[idx as usize].reported;
                status.current_limit = Some(current(rule, r));
                Some(rule)
            }
            LimitRef::Override(_) => None,
        };
        let over = narrowest.is_denied();
        status.decision = Some(narrowest);
        status.duration_until_reset = narrowest.reset_after;
        status.limit_remaining = if over {
            0
        } else {
            narrowest.remaining.min(u32::MAX as u64) as u32
        };
        if let Some(rule) = reported {
            rule.metrics
                .hits
                .increment(status.hits.saturating_mul(rule.cost));
            if over {
                if status.shadow {
                    rule.metrics.shadow_mode.increment(1);
                } else {
                    rule.metrics.over_limit.increment(1);
                }
            } else {
                let used = narrowest.limit.saturating_sub(narrowest.remaining);
                if used as f64 > (narrowest.limit as f64 * ratio).floor() {
                    rule.metrics.near_limit.increment(1);
                }
                rule.metrics.within_limit.increment(1);
            }
        }
        if over && !status.shadow {
            status.code = Code::OverLimit;
        }
        k = end;
    }
    // Blocked rules count as over-limit decisions too.
    for s in statuses.iter() {
        if s.reason == Reason::Blocked && s.code == Code::OverLimit {
            if let Some(id) = s.rule {
                policy.rule(id).metrics.over_limit.increment(1);
            }
        }
    }
    // Overall: any enforced over-limit descriptor, or every quota one.
    let quota = |s: &Status| s.rule.is_some_and(|id| policy.rule(id).quota);
    let hard_over = statuses
        .iter()
        .any(|s| s.code == Code::OverLimit && !quota(s));
    let mut quotas = statuses.iter().filter(|s| quota(s)).peekable();
    let quota_over = quotas.peek().is_some() && quotas.all(|s| s.code == Code::OverLimit);
    if hard_over || quota_over {
        if policy.settings.shadow_mode {
            *shadowed = true;
            metrics::counter!("floodgate_global_shadow_mode_total").increment(1);
        } else {
            *overall = Code::OverLimit;
        }
    }
}
