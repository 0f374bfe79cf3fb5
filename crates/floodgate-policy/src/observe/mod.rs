//! Watching decisions: which keys are limited most, in bounded memory —
//! over a whole stream ([`TopKeys`]), or right now, fed by the engine
//! ([`LimitedKeys`]).

mod limited;
mod top_keys;

pub use limited::{Limited, LimitedKey, LimitedKeys};
pub use top_keys::{TopKey, TopKeys};

use floodgate::{Outcome, Timestamp};

use crate::compile::PolicySet;
use crate::engine::{Code, Descriptor, Reason, Response};

/// Records the limited statuses of `response` (decided at `now` under
/// `policy` for `descriptors`) in `keys`; the engine calls it only for a
/// response it marked as limited.
pub(crate) fn record<D: Descriptor>(
    keys: &LimitedKeys,
    policy: &PolicySet,
    now: Timestamp,
    descriptors: &[D],
    response: &Response,
) {
    for (s, d) in response.statuses.iter().zip(descriptors) {
        let Some(id) = s.rule else { continue };
        let outcome = s.decision.map(|d| d.outcome);
        let would_deny = s.code == Code::OverLimit
            || matches!(outcome, Some(Outcome::Denied | Outcome::Never))
            || s.reason == Reason::Blocked;
        // Global shadow mode leaves a denying status over the limit, and
        // enforces nothing.
        let how = if would_deny && (s.shadow || response.shadowed) {
            Limited::Shadow
        } else if s.code == Code::OverLimit {
            Limited::Denied
        } else if matches!(outcome, Some(Outcome::Delayed(x)) if !x.is_zero()) && !s.shadow {
            Limited::Delayed
        } else {
            continue;
        };
        keys.record(now, policy.rule(id).label(), how, d);
    }
}
