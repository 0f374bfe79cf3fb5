//! What a layer works out once per policy set, and works out again when
//! the engine's policy is replaced:
//!
//! * the engine plan: when every request's one descriptor selects a rule
//!   known in advance (an engine [`DirectPlan`]), it is decided by that
//!   rule directly, without the engine's lookup. The plan is made for the
//!   descriptor's shape by the first request of the policy set;
//! * rate-limit header pieces rendered once per rule: a request whose
//!   policy lines all come from one rule (the common case) reuses the
//!   `RateLimit-Policy` value rendered for the first request of that rule,
//!   and — for a request decided by the plan — the start of its
//!   `RateLimit` value. They belong to one layer (one contract).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use floodgate::{Apply, Clock};
use floodgate_policy::compile::{PolicySet, RuleId};
use floodgate_policy::{Backend, Descriptor, DirectPlan, Engine};
use http::HeaderValue;

use super::shared::Scratch;
use crate::contract::{Contract, HeaderForm, Report, ceil_secs, push_position, push_string};

/// What is rendered once for a rule.
struct Rendered {
    /// `RateLimit-Policy` (none: not representable as a field value).
    policy: Option<HeaderValue>,
    /// `"name"`, the rule's policy name as it starts its `RateLimit`
    /// value, when the rule reports exactly one line and `RateLimit-Policy`
    /// and `RateLimit` are the only headers of an admitted response under
    /// the contract.
    current_name: Option<Box<str>>,
}

impl Rendered {
    fn of(report: &Report, contract: &Contract) -> Self {
        let one_line = report.policies().len() == 1 && report.current().len() == 1;
        let ietf_only = contract.forms == [HeaderForm::Ietf];
        let policy = contract.policy_value(report);
        let current_name = (one_line
            && ietf_only
            && contract.on_success
            && !contract.hide_headers
            && policy.is_some())
        .then(|| {
            let mut s = String::new();
            push_string(&mut s, report.name(0));
            s.into_boxed_str()
        });
        Rendered {
            policy,
            current_name,
        }
    }
}

/// What is worked out for one policy set.
struct Values {
    /// The generation of the policy set (not the set itself: a cache never
    /// keeps a replaced policy alive).
    generation: u64,
    /// The plan for the layer's descriptor shape, made by the first request
    /// (none inside: no rule for it can be decided directly).
    plan: OnceLock<Option<DirectPlan>>,
    /// The rendered pieces, by rule id (none: not rendered yet).
    rules: Box<[OnceLock<Rendered>]>,
}

/// The cache of a layer.
#[derive(Default)]
pub(crate) struct PolicyCache {
    current: ArcSwapOption<Values>,
}

impl PolicyCache {
    /// New values for the policy set `policy`, replacing the cached ones
    /// (concurrent requests may each build some; the last stay, all are
    /// correct).
    fn fresh(&self, policy: &PolicySet) -> Arc<Values> {
        let fresh = Arc::new(Values {
            generation: policy.generation(),
            plan: OnceLock::new(),
            rules: (0..policy.rules().len()).map(|_| OnceLock::new()).collect(),
        });
        self.current.store(Some(fresh.clone()));
        fresh
    }

    /// `RateLimit-Policy` for `report`, filled from `policy` under
    /// `contract`, when its lines are one rule's; none otherwise (render
    /// it).
    pub(super) fn get(
        &self,
        policy: &Arc<PolicySet>,
        report: &Report,
        contract: &Contract,
    ) -> Option<HeaderValue> {
        let rule = report.single_rule()? as usize;
        let render = || Rendered::of(report, contract);
        let guard = self.current.load();
        let values = match guard.as_ref() {
            Some(v) if v.generation == policy.generation() => v,
            _ => &self.fresh(policy),
        };
        values.rules.get(rule)?.get_or_init(render).policy.clone()
    }

    /// The headers of an admitted request whose one line is rule `rule`'s
    /// (of the policy set of generation `generation`), with `remaining`
    /// left and whole again in `reset`: `RateLimit` written into `text`
    /// and `RateLimit-Policy` returned — exactly what the contract writes
    /// from a filled report — when the rule's pieces are rendered already
    /// and the rule qualifies (see [`Rendered::current_name`]); none
    /// otherwise (fill the report).
    pub(super) fn admitted(
        &self,
        generation: u64,
        rule: RuleId,
        remaining: u64,
        reset: Duration,
        text: &mut String,
    ) -> Option<HeaderValue> {
        let guard = self.current.load();
        let values = guard.as_ref().filter(|v| v.generation == generation)?;
        let rendered = values.rules.get(rule as usize)?.get()?;
        let name = rendered.current_name.as_deref()?;
        text.clear();
        text.push_str(name);
        push_position(text, remaining, Some(ceil_secs(reset)));
        rendered.policy.clone()
    }

    /// Decides the request's one descriptor (in `s`) by the plan if it
    /// applies; `false`: decide it with the engine's lookup.
    pub(super) fn decide<B: Backend, C: Clock>(
        &self,
        engine: &Engine<B, C>,
        domain: &str,
        apply: Apply,
        s: &mut Scratch,
    ) -> bool {
        let [d] = s.out.as_slice() else {
            return false;
        };
        let guard = self.current.load();
        if let Some(v) = guard.as_deref()
            && let Some(plan) = v.plan.get()
        {
            // The engine refuses the plan of a policy replaced since.
            let hits = s.out.hits_addend();
            if let Some(plan) = plan
                && engine
                    .evaluate_direct(plan, d, hits, apply, &mut s.response)
                    .is_some()
            {
                return true;
            }
            if v.generation == engine.generation() {
                // Current, and this request is not of the planned shape.
                return false;
            }
        }
        // The first request of a policy set: plan (for this request's
        // shape); this one is decided by the lookup.
        let keys: Vec<&str> = (0..d.len()).map(|i| d.entry(i).0).collect();
        let plan = || engine.direct_plan(domain, &keys);
        match guard.as_deref() {
            Some(v) if v.generation == engine.generation() => v.plan.get_or_init(plan),
            _ => self.fresh(&engine.policy()).plan.get_or_init(plan),
        };
        false
    }
}
