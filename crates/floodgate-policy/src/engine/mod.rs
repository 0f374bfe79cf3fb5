//! The engine: a request's descriptors, matched against the current
//! [`PolicySet`], decided atomically by a [`Backend`], answered with one
//! status per descriptor — envoyproxy/ratelimit's semantics, plus
//! Floodgate's algorithms, layers, lists and switches.
//!
//! A descriptor whose hits are negative
//! ([`Descriptor::is_negative_hits`]) gives them back instead: its
//! counters are decided apart, with [`Apply::Refund`], after the others,
//! and its status is OK with what remains ([`Status::negative`]).
//! [`RequestLimits::negative_hits`] says whether callers may. A
//! concurrency limit with a lease takes an increment's units for the
//! descriptor's holder (its last entry, for a rule with `holder: true`;
//! nobody's otherwise) and gives a negative hit back that holder's own.

mod batches;
mod direct;
mod errors;
mod finish;
mod keys;
mod limits;
mod matching;
mod release;
mod request;
mod reset;
mod response;
mod scratch;
mod undelayed;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use floodgate::algorithms::AnyLimit;
use floodgate::{Apply, Clock, Decision, SystemClock, Timestamp};

use crate::backend::{Backend, Item, Released, SyncBackend};
use crate::compile::{PolicySet, Rule};
use crate::failure::OnFailure;
use crate::observe::LimitedKeys;
use crate::permit::Permit;
use crate::spec::Reported;
use crate::sync_mode::SyncMode;

pub use direct::DirectPlan;
pub use errors::{EngineError, ErrorCode};
pub use limits::LimitEntry;
pub use release::ReleaseReport;
pub use request::{Descriptor, LimitOverride, OwnedDescriptor};
pub use response::{Code, CurrentLimit, Reason, Response, Status};

use scratch::{Batch, LimitRef, Slot};

/// What [`Engine::begin`] hands to the decision: the policy the request
/// was matched against and the time to decide at.
type Begun = (Current, Timestamp);

/// The policy a request is decided under: the engine's current one, or
/// the one its response was [pinned](Response::pin) to (moved out of the
/// response for the decision and [given back](Current::give_back) after).
enum Current {
    Loaded(arc_swap::Guard<Arc<PolicySet>>),
    Pinned(Arc<PolicySet>),
}

impl Current {
    /// The pinned policy of `response`, else the engine's `policy`.
    #[inline]
    fn of(policy: &ArcSwap<PolicySet>, response: &mut Response) -> Self {
        match response.pinned.take() {
            Some(p) => Current::Pinned(p),
            None => Current::Loaded(policy.load()),
        }
    }

    /// Pins `response` again to the policy it was pinned to.
    #[inline]
    fn give_back(self, response: &mut Response) {
        if let Current::Pinned(p) = self {
            response.pinned = Some(p);
        }
    }
}

impl std::ops::Deref for Current {
    type Target = Arc<PolicySet>;

    #[inline]
    fn deref(&self) -> &Arc<PolicySet> {
        match self {
            Current::Loaded(g) => g,
            Current::Pinned(p) => p,
        }
    }
}

/// Bounds on a request, so hostile input costs bounded work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_entries: usize,
    /// Longest key or value of an entry, in bytes.
    pub max_entry_bytes: usize,
    /// What a descriptor's own `limit` (a caller's override of the
    /// configured limit) does.
    pub overrides: Honour,
    /// What a descriptor's `is_negative_hits` (hits given back) does.
    pub negative_hits: Honour,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_descriptors: 256,
            max_entries: crate::compile::MAX_DEPTH,
            max_entry_bytes: 16 * 1024,
            overrides: Honour::Allow,
            negative_hits: Honour::Allow,
        }
    }
}

/// What a descriptor field that loosens limits does when a caller sends
/// it. Envoy's protocol lets every caller replace the configured limit of a
/// descriptor with its own (`limit`), and give hits back
/// (`is_negative_hits`), and envoyproxy/ratelimit honours both: a caller
/// can lift its own limit, or free units of a counter it shares with
/// others. Where callers are not trusted, ignore or refuse them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Honour {
    /// The field does what it says: the override replaces the configured
    /// limit, the hits are given back (envoyproxy/ratelimit's behaviour).
    #[default]
    Allow,
    /// The field is ignored: the configured limit decides; nothing is given
    /// back (the descriptor is answered as a refund of no hits).
    Ignore,
    /// A request with the field is refused as an invalid argument.
    Refuse,
}

/// Decides requests against a hot-swappable policy.
pub struct Engine<B, C = SystemClock> {
    policy: ArcSwap<PolicySet>,
    /// The current policy's generation, read without loading the policy.
    generation: std::sync::atomic::AtomicU64,
    backend: B,
    clock: C,
    limits: RequestLimits,
    /// Where limited decisions are recorded, if anywhere.
    observer: Option<Arc<LimitedKeys>>,
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
            generation: std::sync::atomic::AtomicU64::new(policy.generation()),
            policy: ArcSwap::from_pointee(policy),
            backend,
            clock,
            limits: RequestLimits::default(),
            observer: None,
        }
    }

    /// Recording every limited decision (a denial, a shaper's delay, a
    /// shadow-mode rule's would-be denial) in `keys`: the keys limited
    /// most right now, for a live view.
    pub fn with_observer(mut self, keys: Arc<LimitedKeys>) -> Self {
        self.observer = Some(keys);
        self
    }

    /// Where limited decisions are recorded, if anywhere.
    pub fn observer(&self) -> Option<&Arc<LimitedKeys>> {
        self.observer.as_ref()
    }

    /// Records `response`'s limited statuses, when observed.
    #[inline]
    fn observe<D: Descriptor>(
        &self,
        policy: &PolicySet,
        now: Timestamp,
        descriptors: &[D],
        response: &Response,
    ) {
        if let Some(keys) = &self.observer
            && response.limited
        {
            crate::observe::record(keys, policy, now, descriptors, response);
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

    /// The policy `response` was decided under (its statuses' rule ids
    /// index its rules), or `None` when that policy has been replaced
    /// since (a reload between the decision and this call) or nothing was
    /// decided.
    pub fn policy_of(&self, response: &Response) -> Option<Arc<PolicySet>> {
        if let Some(p) = &response.scratch.policy {
            return Some(Arc::clone(p));
        }
        if let Some(p) = response
            .pinned
            .as_ref()
            .filter(|p| p.generation() == response.generation)
        {
            return Some(Arc::clone(p));
        }
        let current = self.policy.load_full();
        (response.generation != 0 && current.generation() == response.generation).then_some(current)
    }

    /// Swaps in a new policy atomically (requests in flight finish on the
    /// old one); returns the old one. Counters of unchanged rules carry over
    /// (their keys are equal).
    pub fn replace_policy(&self, policy: impl Into<Arc<PolicySet>>) -> Arc<PolicySet> {
        let policy = policy.into();
        let generation = policy.generation();
        let old = self.policy.swap(Arc::clone(&policy));
        self.generation
            .store(generation, std::sync::atomic::Ordering::Release);
        self.backend.keep_zones(&policy);
        old
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
        if let Some(backend) = self.backend.as_sync() {
            return self.evaluate_sync(backend, domain, descriptors, hits_addend, apply, response);
        }
        let Some((policy, now)) = self.begin(domain, descriptors, hits_addend, response)? else {
            return Ok(());
        };
        self.decide(&policy, now, apply, response).await?;
        finish::finish(&policy, now, response);
        self.observe(&policy, now, descriptors, response);
        policy.give_back(response);
        Ok(())
    }

    /// [`evaluate_with`](Self::evaluate_with) decided synchronously, when the
    /// backend needs no IO (the in-memory store; `None` otherwise): the
    /// same answer without building the futures, for callers that can then
    /// skip awaiting one.
    ///
    /// ```
    /// use floodgate::{Apply, StoreConfig};
    /// use floodgate_policy::read::{LoadOptions, load_str};
    /// use floodgate_policy::{Code, Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};
    ///
    /// let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 2, unit: minute}\n";
    /// let spec = load_str("api.yaml", yaml, &LoadOptions::default())?;
    /// let policy = PolicySet::compile(&spec)?;
    /// let engine = Engine::new(policy, MemoryBackend::new(StoreConfig::default())?);
    ///
    /// let request = [OwnedDescriptor::new([("user", "alice")])];
    /// let mut response = Response::default();
    /// for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
    ///     let decided = engine.evaluate_now("api", &request, 1, Apply::Commit, &mut response);
    ///     // In memory there is always an answer right away.
    ///     decided.expect("the in-memory store decides synchronously")?;
    ///     assert_eq!(response.overall, expected);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evaluate_now<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        apply: Apply,
        response: &mut Response,
    ) -> Option<Result<(), EngineError>> {
        let backend = self.backend.as_sync()?;
        Some(self.evaluate_sync(backend, domain, descriptors, hits_addend, apply, response))
    }

    #[inline]
    fn evaluate_sync<D: Descriptor>(
        &self,
        backend: &dyn SyncBackend,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        apply: Apply,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        let Some((policy, now)) = self.begin(domain, descriptors, hits_addend, response)? else {
            return Ok(());
        };
        self.decide_sync(backend, &policy, now, apply, response);
        finish::finish(&policy, now, response);
        self.observe(&policy, now, descriptors, response);
        policy.give_back(response);
        Ok(())
    }

    /// Validates the request, resets `response` and matches the
    /// descriptors; the policy and the time to decide at, or `None` when
    /// there is nothing to decide (limiting disabled, unknown domain).
    #[inline]
    fn begin<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Result<Option<Begun>, EngineError> {
        self.validate(domain, descriptors)?;
        let policy = Current::of(&self.policy, response);
        response.overall = Code::Ok;
        response.shadowed = false;
        response.limited = false;
        response.fallback = None;
        response.generation = 0;
        response.statuses.clear();
        response
            .statuses
            .resize(descriptors.len(), Status::default());
        response.scratch.clear();
        if !policy.settings.enforce {
            for s in &mut response.statuses {
                s.reason = Reason::Disabled;
            }
            policy.give_back(response);
            return Ok(None);
        }
        let Some(dom) = policy.domain(domain) else {
            metrics::counter!("floodgate_domain_not_found_total").increment(1);
            policy.give_back(response);
            return Ok(None);
        };
        let now = self.clock.now();
        response.generation = policy.generation();
        self.match_descriptors(&policy, dom, descriptors, hits_addend, now, response);
        if !response.scratch.permit.is_none() {
            response.scratch.policy = Some(Arc::clone(&policy));
        }
        Ok(Some((policy, now)))
    }

    /// Gives back the concurrency units a response holds (call when the
    /// request completes; the gateway and the tower layer do), and says
    /// what became of them. A response gives back at most what its permit
    /// holds: released twice, the second time gives back nothing
    /// ([`ReleaseReport::not_held`]).
    pub async fn release(&self, response: &Response) -> ReleaseReport {
        let mut report = ReleaseReport::default();
        self.release_slots(response, |_, r| report.add(r)).await;
        report
    }

    /// Releases every concurrency limit `response` was admitted by, in slot
    /// order, telling `each` the slot and what its backend answered.
    async fn release_slots(
        &self,
        response: &Response,
        mut each: impl FnMut(usize, Result<Released, crate::BackendError>),
    ) {
        let scratch = &response.scratch;
        // A response holding units keeps the policy it was decided under;
        // one without has nothing to give back.
        let Some(policy) = scratch.policy.as_deref() else {
            return;
        };
        let now = self.clock.now();
        // A batch is charged only when every one of its limits admits it:
        // the request's enforced limits together, its shadow ones together,
        // each quota rule's (one descriptor's slots, which are contiguous)
        // on its own.
        let decisions = &scratch.decisions;
        let allowed = |k: usize| decisions.get(k).is_some_and(Decision::is_allowed);
        let mut together = [true; 2];
        for (k, s) in scratch.slots.iter().enumerate() {
            match s.batch {
                Batch::Enforced => together[0] &= allowed(k),
                Batch::Shadow => together[1] &= allowed(k),
                Batch::Own | Batch::Refund => {}
            }
        }
        let slots = &scratch.slots;
        let admitted = |k: usize| match slots[k].batch {
            Batch::Enforced => together[0],
            Batch::Shadow => together[1],
            // Negative hits took nothing to give back.
            Batch::Refund => false,
            Batch::Own => {
                let of = |j: &usize| slots[*j].descriptor == slots[k].descriptor;
                let start = (0..k).rev().take_while(of).last().unwrap_or(k);
                (start..slots.len()).take_while(of).all(allowed)
            }
        };
        for (k, slot) in scratch.slots.iter().enumerate() {
            let item = item(
                policy,
                &scratch.keys,
                &scratch.overrides,
                scratch.permit,
                slot,
            );
            if item.limit.is_concurrency() && slot.cost > 0 && admitted(k) {
                each(k, self.backend.release(item, slot.cost, now).await);
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
        // A descriptor without entries, or with an empty key, matches no
        // rule (as in envoyproxy/ratelimit): it is answered, not refused.
        for (i, d) in descriptors.iter().enumerate() {
            if let Some(ov) = d.limit_override()
                && ov.unit().is_none()
            {
                return Err(EngineError::InvalidArgument(format!(
                    "descriptor {i}: the limit override has an unknown unit ({})",
                    ov.unit_number
                )));
            }
            if l.overrides == Honour::Refuse && d.limit_override().is_some() {
                return Err(EngineError::InvalidArgument(format!(
                    "descriptor {i}: limit overrides are not accepted here"
                )));
            }
            if l.negative_hits == Honour::Refuse && d.is_negative_hits() {
                return Err(EngineError::InvalidArgument(format!(
                    "descriptor {i}: negative hits are not accepted here"
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

/// The backend's item for `slot`: its key, limit and cost, and the
/// request's `permit` when the limit is a concurrency limit (the slot's
/// holder when it has a lease; other limits hold none).
fn item<'a>(
    policy: &'a PolicySet,
    keys: &'a [u8],
    overrides: &'a [AnyLimit],
    permit: Permit,
    slot: &Slot,
) -> Item<'a> {
    let key = &keys[slot.key.0 as usize..slot.key.1 as usize];
    let limit = limit_of(policy, overrides, slot.limit);
    Item {
        group: &key[..key.len() - 1],
        key,
        limit,
        cost: slot.cost,
        on_failure: on_failure_of(policy, slot.limit),
        sync: sync_of(policy, slot.limit),
        permit: if limit.is_leased() {
            // Leased units are their holder's, whoever asks.
            Permit::from(slot.holder)
        } else if limit.is_concurrency() {
            permit
        } else {
            Permit::NONE
        },
        zone: match slot.limit {
            LimitRef::Rule(id, idx) => policy.rule(id).limits()[idx as usize].zone,
            LimitRef::Override(_) => None,
        },
    }
}

/// The synchronisation mode of the rule a counter belongs to (limit
/// overrides sent with a request have none: the store's default).
fn sync_of(policy: &PolicySet, r: LimitRef) -> Option<SyncMode> {
    match r {
        LimitRef::Rule(id, _) => policy.rule(id).sync,
        LimitRef::Override(_) => None,
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
