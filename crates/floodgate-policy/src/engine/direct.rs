//! Deciding a descriptor whose rule is known before it arrives.
//!
//! When every descriptor with given entry keys selects the same rule,
//! whatever its values (a `key: user` rule with no `value:` siblings, the
//! common shape of a per-client limit), matching it against the tree finds
//! nothing new per request. A [`DirectPlan`] records that rule once per
//! policy; [`Engine::evaluate_direct`] then decides such a descriptor
//! without validating and matching a general request: the same counters,
//! the same statuses and metrics, the same answer as
//! [`Engine::evaluate_now`], in a fraction of the work.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use floodgate::{Apply, Clock, Decision, Timestamp};
use smallvec::SmallVec;

use crate::backend::{Backend, Item, SyncBackend};
use crate::compile::{Action, PolicySet, Rule, RuleId, RuleLimit};

use super::finish::{narrowest_index, over_limit, settle};
use super::request::Descriptor;
use super::response::{Code, Reason, Response, Status};
use super::{Engine, PLACEHOLDER, keys, reset};

/// Most limits a rule decided directly may have (more take the general
/// path).
const MAX_LIMITS: usize = 8;

/// A descriptor shape (a domain and its entry keys, in order) that selects
/// one rule whatever its values, under one policy generation. Built by
/// [`Engine::direct_plan`]; stale plans are refused, never misapplied.
#[derive(Clone, Debug)]
pub struct DirectPlan {
    /// The descriptor's entry keys, in order.
    keys: Box<[Box<str>]>,
    /// The rule they select.
    rule: RuleId,
    /// The generation of the policy it was made for. Not the policy itself:
    /// a plan cached by a caller never keeps a replaced policy alive.
    generation: u64,
}

impl DirectPlan {
    /// The generation of the policy it was made for.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Whether descriptors of `keys` in `domain` of `policy` always select the
/// same rule, and that rule can be decided directly: only limits (no
/// concurrency, which hold units until released), no list that could
/// catch a value, and nothing that makes the answer depend on other
/// descriptors.
fn plan(policy: &Arc<PolicySet>, domain: &str, keys: &[&str]) -> Option<DirectPlan> {
    if !policy.settings.enforce
        || domain.is_empty()
        || keys.is_empty()
        || keys.iter().any(|k| k.is_empty())
    {
        return None;
    }
    let dom = policy.domain(domain)?;
    if !dom.allow.is_empty() || !dom.deny.is_empty() {
        return None;
    }
    let id = dom.tree.rule_for_any_values(keys)?;
    let rule = policy.rule(id);
    let Action::Limit(limits) = &rule.action else {
        return None;
    };
    let replaces_itself = rule
        .name
        .as_deref()
        .is_some_and(|n| rule.replaces.iter().any(|r| &**r == n));
    if !rule.enabled
        || replaces_itself
        || limits.is_empty()
        || limits.len() > MAX_LIMITS
        || limits.iter().any(|l| l.limit.is_concurrency())
    {
        return None;
    }
    Some(DirectPlan {
        keys: keys.iter().map(|&k| k.into()).collect(),
        rule: id,
        generation: policy.generation(),
    })
}

impl<B: Backend, C: Clock> Engine<B, C> {
    /// A plan to decide descriptors of entry keys `keys` in `domain`
    /// directly under the current policy, when they always select the same
    /// rule and the backend decides without IO; `None` otherwise (decide
    /// them with [`evaluate_now`](Self::evaluate_now)).
    pub fn direct_plan(&self, domain: &str, keys: &[&str]) -> Option<DirectPlan> {
        self.backend.as_sync()?;
        plan(&self.policy.load_full(), domain, keys)
    }

    /// The generation of the current policy.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Decides the single descriptor `d` by `plan`: exactly what
    /// [`evaluate_now`](Self::evaluate_now) would answer for `[d]`.
    /// `Some` once decided into `response`; `None` when the plan does not
    /// apply (the policy was replaced since, `d` has other keys, a limit
    /// override, or a value the general path must refuse): decide it the
    /// general way.
    ///
    /// ```
    /// use floodgate::{Apply, StoreConfig};
    /// use floodgate_policy::read::{LoadOptions, load_str};
    /// use floodgate_policy::{Code, Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};
    ///
    /// let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 2, unit: minute}\n";
    /// let policy = PolicySet::compile(&load_str("api.yaml", yaml, &LoadOptions::default())?)?;
    /// let engine = Engine::new(policy, MemoryBackend::new(StoreConfig::default())?);
    ///
    /// let plan = engine.direct_plan("api", &["user"]).expect("any user selects one rule");
    /// let alice = OwnedDescriptor::new([("user", "alice")]);
    /// let mut response = Response::default();
    /// for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
    ///     let decided = engine.evaluate_direct(&plan, &alice, 1, Apply::Commit, &mut response);
    ///     decided.expect("the plan applies");
    ///     assert_eq!(response.overall, expected);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evaluate_direct<D: Descriptor>(
        &self,
        plan: &DirectPlan,
        d: &D,
        hits_addend: u32,
        apply: Apply,
        response: &mut Response,
    ) -> Option<()> {
        let backend = self.backend.as_sync()?;
        if !self.fits(plan, d) {
            return None;
        }
        // The plan's policy, while it is the one to decide under.
        let policy = super::Current::of(&self.policy, response);
        if policy.generation() != plan.generation {
            policy.give_back(response);
            return None;
        }
        let decided =
            self.decide_planned(backend, &policy, plan, d, (hits_addend, apply), response);
        policy.give_back(response);
        decided
    }

    /// [`evaluate_direct`](Self::evaluate_direct) under `policy`, the
    /// plan's.
    #[inline]
    fn decide_planned<D: Descriptor>(
        &self,
        backend: &dyn SyncBackend,
        policy: &PolicySet,
        plan: &DirectPlan,
        d: &D,
        (hits_addend, apply): (u32, Apply),
        response: &mut Response,
    ) -> Option<()> {
        let rule = policy.rule(plan.rule);
        let Action::Limit(limits) = &rule.action else {
            return None;
        };
        let now = self.clock.now();
        let hits = d.hits_addend().unwrap_or(u64::from(hits_addend).max(1));
        start_response(response, policy.generation(), plan.rule, rule, hits);
        let mut one = [PLACEHOLDER];
        let mut many: SmallVec<[Decision; MAX_LIMITS]> = SmallVec::new();
        let charge = Charge {
            rule,
            limits,
            cost: hits.saturating_mul(rule.cost),
            now,
            apply,
        };
        let out = decide_counters(backend, &charge, d, response, &mut one, &mut many);
        let pick = narrowest_index(out);
        let reported = limits[pick].reported;
        let status = &mut response.statuses[0];
        response.limited = settle(status, out, Some((rule, reported)), &policy.settings);
        // One descriptor: over overall exactly when it is (a quota rule
        // being every quota rule of the request).
        if status.code == Code::OverLimit {
            over_limit(policy, &mut response.overall, &mut response.shadowed);
        }
        self.observe(policy, now, std::slice::from_ref(d), response);
        Some(())
    }

    /// Whether `d` has the plan's entry keys, in order, and entries the
    /// general path would accept: no limit override, no value over the
    /// size limit, hits charged (negative hits take the general path).
    #[inline]
    fn fits<D: Descriptor>(&self, plan: &DirectPlan, d: &D) -> bool {
        if d.limit_override().is_some()
            || d.is_negative_hits()
            || d.len() != plan.keys.len()
            || d.len() > self.limits.max_entries
        {
            return false;
        }
        let max = self.limits.max_entry_bytes;
        plan.keys.iter().enumerate().all(|(j, key)| {
            let (k, v) = d.entry(j);
            k == &**key && v.len() <= max
        })
    }
}

/// What one descriptor of a directly decided rule charges, and how.
struct Charge<'p> {
    /// The rule.
    rule: &'p Rule,
    /// Its limits, one counter each.
    limits: &'p [RuleLimit],
    /// The descriptor's hits times the rule's cost.
    cost: u64,
    /// When it is decided.
    now: Timestamp,
    /// Whether it is charged.
    apply: Apply,
}

/// Resets `response` as the general path does for one descriptor of
/// `rule` (a status kept from the last request keeps its reported limit:
/// no name to copy).
#[inline]
fn start_response(response: &mut Response, generation: u64, id: RuleId, rule: &Rule, hits: u64) {
    response.overall = Code::Ok;
    response.shadowed = false;
    response.limited = false;
    response.fallback = None;
    response.generation = generation;
    response.scratch.clear();
    response.statuses.truncate(1);
    if response.statuses.is_empty() {
        response.statuses.push(Status::default());
    }
    let status = &mut response.statuses[0];
    status.code = Code::Ok;
    status.limit_remaining = 0;
    status.decision = None;
    status.rule = Some(id);
    status.reason = Reason::Limited;
    status.shadow = rule.shadow;
    status.quota = rule.quota;
    status.hits = hits;
    status.negative = false;
}

/// Decides every limit of the rule on `d`'s counters, their keys laid out
/// in `response`'s scratch as matching lays them out; the decisions, an
/// empty reset filled in, in `one` for a single limit, else in `many`.
#[inline]
fn decide_counters<'o, D: Descriptor>(
    backend: &dyn SyncBackend,
    charge: &Charge<'_>,
    d: &D,
    response: &mut Response,
    one: &'o mut [Decision; 1],
    many: &'o mut SmallVec<[Decision; MAX_LIMITS]>,
) -> &'o mut [Decision] {
    let Charge {
        rule,
        limits,
        cost,
        now,
        apply,
    } = *charge;
    let buf = &mut response.scratch.keys;
    // Key-only nodes share no pattern: the values themselves.
    let group = keys::group_plain(buf, rule.fingerprint, d);
    let out: &mut [Decision] = if let [l] = limits {
        // One limit: its key is the group's plus its index, in place.
        buf.push(0);
        let items = [counter(&response.scratch.keys, l, cost, rule)];
        backend.decide_now(&items, now, apply, one);
        one
    } else {
        let mut ranges: SmallVec<[(u32, u32); MAX_LIMITS]> = SmallVec::new();
        for idx in 0..limits.len() {
            ranges.push(keys::member(buf, group, idx as u8));
        }
        let buf = &response.scratch.keys;
        let items: SmallVec<[Item<'_>; MAX_LIMITS]> = ranges
            .iter()
            .zip(limits.iter())
            .map(|(&(a, b), l)| counter(&buf[a as usize..b as usize], l, cost, rule))
            .collect();
        many.resize(items.len(), PLACEHOLDER);
        backend.decide_now(&items, now, apply, many);
        many
    };
    for (d, l) in out.iter_mut().zip(limits.iter()) {
        reset::fill_empty_reset(&l.limit, now, d);
    }
    out
}

/// The backend's item for a counter `key` of `rule` (its group: all but
/// the last byte).
fn counter<'a>(key: &'a [u8], limit: &'a RuleLimit, cost: u64, rule: &Rule) -> Item<'a> {
    Item {
        group: &key[..key.len() - 1],
        key,
        limit: &limit.limit,
        cost,
        on_failure: rule.on_failure,
        sync: rule.sync,
        permit: crate::Permit::NONE,
        zone: limit.zone,
    }
}
