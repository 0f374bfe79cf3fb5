//! Deciding a request's counters through the backend: the enforced ones in
//! one atomic batch, the shadow-mode ones in another, the ones given back
//! (negative hits) in a third, quota rules each on their own — through the
//! backend's future, or synchronously when the backend needs no IO.

use floodgate::{Apply, Decision, Timestamp};
use smallvec::SmallVec;

use crate::backend::{Backend, Fallback, SyncBackend};
use crate::compile::PolicySet;

use super::errors::EngineError;
use super::response::Response;
use super::scratch::Batch;
use super::{Engine, PLACEHOLDER, item};

/// The decision loop, written once for both paths: `$decide` decides the
/// group of items `$items` into `$out` with `$apply` (the request's own,
/// or [`Apply::Refund`] for negative hits), awaiting the backend's future, or
/// calling it synchronously) and says who decided (`None`: the store); the
/// response keeps the greatest [`Fallback`] of its enforced batches. A macro, not a function taking a closure, so
/// that the futures path can await inside it.
macro_rules! decide_groups {
    ($policy:expr, $response:expr, $request:expr, |$items:ident, $out:ident, $apply:ident| $decide:expr) => {{
        let policy: &PolicySet = $policy;
        let scratch = &mut $response.scratch;
        let n = scratch.slots.len();
        scratch.decisions.resize(n, PLACEHOLDER);
        let batches: &[Batch] = if scratch.refunds {
            &[Batch::Enforced, Batch::Shadow, Batch::Refund]
        } else {
            &[Batch::Enforced, Batch::Shadow]
        };
        for &batch in batches {
            let $apply = refund_or($request, batch);
            let mut $items: SmallVec<[_; 16]> = SmallVec::new();
            let mut at: SmallVec<[u32; 16]> = SmallVec::new();
            for (k, slot) in scratch.slots.iter().enumerate() {
                if slot.batch == batch {
                    $items.push(item(
                        policy,
                        &scratch.keys,
                        &scratch.overrides,
                        scratch.permit,
                        slot,
                    ));
                    at.push(k as u32);
                }
            }
            if $items.is_empty() {
                continue;
            }
            let mut $out: SmallVec<[Decision; 16]> = SmallVec::from_elem(PLACEHOLDER, $items.len());
            let by: Option<Fallback> = $decide;
            if batch == Batch::Enforced {
                $response.fallback = $response.fallback.max(by);
            }
            for (d, &k) in $out.iter().zip(&at) {
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
                let $apply = $request;
                let $items: SmallVec<[_; 4]> = scratch.slots[k..end]
                    .iter()
                    .map(|s| item(policy, &scratch.keys, &scratch.overrides, scratch.permit, s))
                    .collect();
                let mut $out: SmallVec<[Decision; 4]> =
                    SmallVec::from_elem(PLACEHOLDER, $items.len());
                let by: Option<Fallback> = $decide;
                $response.fallback = $response.fallback.max(by);
                scratch.decisions[k..end].copy_from_slice(&$out);
            }
            k = end;
        }
    }};
}

/// How the counters of `batch` are decided in a request decided with
/// `apply`: given back for negative hits (checked only in a dry run).
fn refund_or(apply: Apply, batch: Batch) -> Apply {
    if batch == Batch::Refund && apply != Apply::Check {
        Apply::Refund
    } else {
        apply
    }
}

impl<B: Backend, C: floodgate::Clock> Engine<B, C> {
    /// Decides the counters: the enforced ones in one atomic batch, the
    /// shadow-mode ones in another (as if enforced, like nginx's dry run),
    /// each quota rule on its own.
    pub(super) async fn decide(
        &self,
        policy: &PolicySet,
        now: Timestamp,
        apply: Apply,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        decide_groups!(policy, response, apply, |items, out, how| self
            .backend
            .decide_by(&items, now, how, &mut out)
            .await?
            .fallback);
        Ok(())
    }

    /// [`decide`](Self::decide) on a backend that needs no IO.
    pub(super) fn decide_sync(
        &self,
        backend: &dyn SyncBackend,
        policy: &PolicySet,
        now: Timestamp,
        apply: Apply,
        response: &mut Response,
    ) {
        decide_groups!(policy, response, apply, |items, out, how| {
            backend.decide_now(&items, now, how, &mut out);
            None
        });
    }
}
