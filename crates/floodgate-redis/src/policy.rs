//! The failure policies applied to a batch Redis could not decide: each
//! item's own (its rule's `on_failure`) or else the backend's.
//!
//! Items that fail open are admitted unevaluated, items that fail closed
//! are denied, and the `local` ones are decided together, atomically, by
//! the local fallback store. The batch's answer is the narrowest decision,
//! as always: one fail-closed item denies the request. A denied request
//! charges nothing locally (penalty-mode limits excepted), exactly as a
//! batch denied by one of its limits.

use std::time::Duration;

use floodgate::{Apply, Decision, Outcome, Timestamp};
use floodgate_policy::{Decided, Fallback, Item, OnFailure};

use crate::FailurePolicy;
use crate::backend::unevaluated;
use crate::encode::Params;
use crate::fallback::LocalFallback;
use crate::stats::ResilienceStats;

/// What happens to one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemPolicy {
    Open,
    Closed,
    Local,
}

impl ItemPolicy {
    /// The item's own policy, else the backend's `default`.
    pub(crate) fn of(item: &Item<'_>, default: FailurePolicy) -> ItemPolicy {
        match (item.on_failure, default) {
            (Some(OnFailure::FailOpen), _) | (None, FailurePolicy::FailOpen) => ItemPolicy::Open,
            (Some(OnFailure::FailClosed), _) | (None, FailurePolicy::FailClosed) => {
                ItemPolicy::Closed
            }
            (Some(OnFailure::Local), _) | (None, FailurePolicy::Local { .. }) => ItemPolicy::Local,
        }
    }
}

/// Decides `items` without Redis. Writes each item's decision to `out` and
/// returns the narrowest, and which policy it answers for (see
/// [`Fallback`]); counts each policy used once per decision.
pub(crate) fn decide(
    local: &LocalFallback,
    stats: &ResilienceStats,
    items: &[Item<'_>],
    now: Timestamp,
    apply: Apply,
    out: &mut [Decision],
    default: FailurePolicy,
) -> Decided {
    stats.decisions.inc();
    let first = ItemPolicy::of(&items[0], default);
    let uniform = items.iter().all(|i| ItemPolicy::of(i, default) == first);
    if uniform && first == ItemPolicy::Local {
        // The common case: one policy for the whole batch.
        stats.local_fallbacks.inc();
        return Decided {
            decision: local.decide(items, now, apply, out),
            fallback: Some(Fallback::Local),
        };
    }
    let (mut open, mut closed, mut locals) = (false, false, Vec::new());
    for (i, item) in items.iter().enumerate() {
        match ItemPolicy::of(item, default) {
            ItemPolicy::Open => {
                open = true;
                out[i] = unevaluated(quota(item));
            }
            ItemPolicy::Closed => {
                closed = true;
                out[i] = denied(quota(item));
            }
            ItemPolicy::Local => locals.push(i),
        }
    }
    if !locals.is_empty() {
        stats.local_fallbacks.inc();
        decide_locals(local, items, &locals, now, apply, closed, out);
    }
    if open {
        stats.fail_open.inc();
    }
    if closed {
        stats.fail_closed.inc();
    }
    let mut combined = out[0];
    for d in &out[1..items.len()] {
        combined = combined.narrowest(*d);
    }
    Decided {
        decision: combined,
        fallback: Some(answered_by(open, closed, combined)),
    }
}

/// Decides the items at `locals` together on the local store, writing
/// their decisions to `out`. A fail-closed item (`closed`) denies the
/// request: the local limits then charge nothing, as when one limit of a
/// batch denies it.
fn decide_locals(
    local: &LocalFallback,
    items: &[Item<'_>],
    locals: &[usize],
    now: Timestamp,
    apply: Apply,
    closed: bool,
    out: &mut [Decision],
) {
    let local_apply = match apply {
        Apply::Commit if closed => Apply::Rejected,
        other => other,
    };
    let batch: Vec<Item<'_>> = locals.iter().map(|&i| items[i]).collect();
    let mut decided = vec![unevaluated(0); batch.len()];
    local.decide(&batch, now, local_apply, &mut decided);
    for (&i, d) in locals.iter().zip(decided) {
        out[i] = d;
    }
}

/// Which policy a batch's answer stands for: a fail-closed item denies
/// it; items failing open admit it unless a local decision denied it.
fn answered_by(open: bool, closed: bool, combined: Decision) -> Fallback {
    if closed {
        Fallback::FailedClosed
    } else if open && combined.is_allowed() {
        Fallback::FailedOpen
    } else {
        Fallback::Local
    }
}

fn quota(item: &Item<'_>) -> u64 {
    Params::of(item.limit).map_or(0, |p| p.quota())
}

fn denied(quota: u64) -> Decision {
    Decision {
        outcome: Outcome::Denied,
        limit: quota,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    }
}
