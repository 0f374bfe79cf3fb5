//! The answer: one status per descriptor, in order, and the overall code.

use std::sync::Arc;
use std::time::Duration;

use floodgate::Decision;

use crate::backend::Fallback;
use crate::compile::{PolicySet, RuleId};
use crate::spec::Reported;

/// Envoy's response codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Code {
    /// Within the limits.
    #[default]
    Ok,
    /// Over a limit.
    OverLimit,
}

/// What the current limit is reported as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Requests per unit and unit.
    pub reported: Reported,
    /// The rule's name, if any.
    pub name: Option<std::sync::Arc<str>>,
}

/// Why a descriptor got its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reason {
    /// No rule matched (or the domain is unknown, or the rule is disabled).
    #[default]
    NoMatch,
    /// A rule matched and was evaluated.
    Limited,
    /// The matched rule is `unlimited`, or an entry is on the allow list.
    Unlimited,
    /// The matched rule was replaced by another matched rule.
    Replaced,
    /// The matched rule blocks every request (`requests_per_unit: 0`).
    Blocked,
    /// An entry is on the deny list.
    Denied,
    /// Enforcement is switched off (the global kill switch).
    Disabled,
}

/// The status of one descriptor.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Status {
    /// OK or over the limit (after shadow mode).
    pub code: Code,
    /// The limit reported, if a counting rule matched.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left (0 when over, `u32::MAX` when unlimited).
    pub limit_remaining: u32,
    /// Time until the limit resets.
    pub duration_until_reset: Duration,
    /// The full decision of the narrowest limit (retry-after, delay, ...).
    pub decision: Option<Decision>,
    /// The rule that matched.
    pub rule: Option<RuleId>,
    /// Why.
    pub reason: Reason,
    /// The rule is in shadow mode (its verdict is reported, not enforced).
    pub shadow: bool,
    /// The rule is in quota mode (over its limit, it fails the request only
    /// when every quota descriptor of the request is over).
    pub quota: bool,
    /// The hits charged (before the rule's cost multiplier).
    pub hits: u64,
    /// The hits were given back instead of charged (negative hits): the
    /// counters fell by them, and the status is OK with what remains.
    pub negative: bool,
}

impl Status {
    /// [`duration_until_reset`](Self::duration_until_reset) as the RLS
    /// protocol reports it: whole seconds, rounded up, so a limit not fully
    /// back is never reported as reset. For a fixed window of a unit
    /// (every envoyproxy/ratelimit limit) this is exactly that service's
    /// `unit − now mod unit`, in [1, unit].
    pub fn reset_seconds(&self) -> u64 {
        let d = self.duration_until_reset;
        d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
    }

    /// Whether the RLS protocol reports a `duration_until_reset`: with a
    /// limit, as envoyproxy/ratelimit does.
    pub fn reports_reset(&self) -> bool {
        self.current_limit.is_some() || !self.duration_until_reset.is_zero()
    }
}

/// A full response; reusable from one request to the next (its buffers are
/// kept, so a steady stream of requests allocates nothing).
#[derive(Debug, Default)]
pub struct Response {
    /// Over the limit if any enforced descriptor is.
    pub overall: Code,
    /// One per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// Global shadow mode turned an over-limit answer into OK.
    pub shadowed: bool,
    /// The [generation](crate::PolicySet::generation) of the policy the
    /// response was decided under (0: none yet).
    pub(crate) generation: u64,
    /// Some rule limited the request: a denial, a shaper's delay or a
    /// shadow-mode hit (what an observer records).
    pub(crate) limited: bool,
    /// Who decided in the store's place, if anyone (see [`fallback`](Self::fallback)).
    pub(crate) fallback: Option<Fallback>,
    pub(crate) scratch: super::scratch::Scratch,
    /// The policy to decide under in place of the engine's current one
    /// (see [`pin`](Self::pin)).
    pub(crate) pinned: Option<Arc<PolicySet>>,
}

impl Response {
    /// The decision to report to a client: the narrowest of all the
    /// enforced statuses (the most restrictive).
    pub fn narrowest(&self) -> Option<Decision> {
        self.statuses
            .iter()
            .filter(|s| !s.shadow)
            .filter_map(|s| s.decision)
            .reduce(Decision::narrowest)
    }

    /// `None` when the store decided every enforced counter of the
    /// request; else what decided in its place while it could not (a
    /// Redis outage: its failure policy), the greatest over the request's
    /// batches ([`Fallback`]'s order). Shadow-mode counters do not count:
    /// they change no answer.
    pub fn fallback(&self) -> Option<Fallback> {
        self.fallback
    }

    /// The [generation](crate::PolicySet::generation) of the policy it was
    /// decided under (0: none yet).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Decides the next requests with this response under `policy` rather
    /// than the engine's current policy, until pinned to another: a
    /// frontend whose own configuration was built with `policy` (the
    /// status it answers with, the descriptors it builds) stays consistent
    /// with it while a reload swaps both. Pinning to the policy already
    /// pinned is a pointer comparison.
    pub fn pin(&mut self, policy: &Arc<PolicySet>) {
        if !self.pinned.as_ref().is_some_and(|p| Arc::ptr_eq(p, policy)) {
            self.pinned = Some(Arc::clone(policy));
        }
    }

    /// Decides the next requests with this response under the engine's
    /// current policy again.
    pub fn unpin(&mut self) {
        self.pinned = None;
    }
}
