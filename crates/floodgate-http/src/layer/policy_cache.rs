//! `RateLimit-Policy` values rendered once per rule: a request whose
//! policy lines all come from one rule (the common case) reuses the value
//! rendered for the first request of that rule. The cache belongs to one
//! policy set: when the engine's policy is replaced, it starts over.

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use floodgate_policy::compile::PolicySet;
use http::HeaderValue;

use crate::contract::{Contract, Report};

/// The values of one policy set, by rule id (none: not rendered yet, or
/// not representable as a field value).
struct Values {
    policy: Arc<PolicySet>,
    rules: Box<[OnceLock<Option<HeaderValue>>]>,
}

/// The cache of a layer.
#[derive(Default)]
pub(crate) struct PolicyCache {
    current: ArcSwapOption<Values>,
}

impl PolicyCache {
    /// `RateLimit-Policy` for `report`, filled from `policy` under
    /// `contract`, when its lines are one rule's; none otherwise (render
    /// it).
    pub fn get(
        &self,
        policy: &Arc<PolicySet>,
        report: &Report,
        contract: &Contract,
    ) -> Option<HeaderValue> {
        let rule = report.single_rule()? as usize;
        let render = || contract.policy_value(report);
        {
            let guard = self.current.load();
            if let Some(v) = guard.as_ref().filter(|v| Arc::ptr_eq(&v.policy, policy)) {
                return v.rules.get(rule)?.get_or_init(render).clone();
            }
        }
        // A new policy set: start over (concurrent requests may each build
        // one; the last one stays, all are correct).
        let fresh = Arc::new(Values {
            policy: policy.clone(),
            rules: (0..policy.rules().len()).map(|_| OnceLock::new()).collect(),
        });
        self.current.store(Some(fresh.clone()));
        fresh.rules.get(rule)?.get_or_init(render).clone()
    }
}
