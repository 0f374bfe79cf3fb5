//! Deciding a request's counters through the backend: the enforced ones in
//! one atomic batch, the shadow-mode ones in another, quota rules each on
//! their own — through the backend's future, or synchronously when the
//! backend needs no IO.

use floodgate::{Apply, Decision, Timestamp};
use smallvec::SmallVec;

use crate::backend::{Backend, Item, SyncBackend};
use crate::compile::PolicySet;

use super::errors::EngineError;
use super::response::Response;
use super::scratch::{Batch, Scratch, Slot};
use super::{Engine, PLACEHOLDER, item};

/// One atomic decision of a request: the enforced counters, the
/// shadow-mode ones, or one quota rule's (slots `start..end`).
#[derive(Clone, Copy)]
enum Group {
    Batch(Batch),
    Own(usize, usize),
}

/// A group's items, the slots they came from, and room for their decisions.
struct Prepared<'a> {
    items: SmallVec<[Item<'a>; 16]>,
    at: SmallVec<[u32; 16]>,
    out: SmallVec<[Decision; 16]>,
}

/// The request's groups, in the order they are decided.
fn groups(slots: &[Slot]) -> SmallVec<[Group; 4]> {
    let mut groups: SmallVec<[Group; 4]> = SmallVec::new();
    for batch in [Batch::Enforced, Batch::Shadow] {
        if slots.iter().any(|s| s.batch == batch) {
            groups.push(Group::Batch(batch));
        }
    }
    // Quota rules: each rule's limits together.
    let mut k = 0;
    while k < slots.len() {
        let mut end = k + 1;
        while end < slots.len() && slots[end].descriptor == slots[k].descriptor {
            end += 1;
        }
        if slots[k].batch == Batch::Own {
            groups.push(Group::Own(k, end));
        }
        k = end;
    }
    groups
}

fn prepare<'a>(policy: &'a PolicySet, scratch: &'a Scratch, group: Group) -> Prepared<'a> {
    let mut items = SmallVec::new();
    let mut at = SmallVec::new();
    let mut add = |k: usize, slot: &Slot| {
        items.push(item(policy, &scratch.keys, &scratch.overrides, slot));
        at.push(k as u32);
    };
    match group {
        Group::Batch(batch) => {
            for (k, slot) in scratch.slots.iter().enumerate() {
                if slot.batch == batch {
                    add(k, slot);
                }
            }
        }
        Group::Own(start, end) => {
            for (k, slot) in scratch.slots[start..end].iter().enumerate() {
                add(start + k, slot);
            }
        }
    }
    let out = SmallVec::from_elem(PLACEHOLDER, items.len());
    Prepared { items, at, out }
}

fn record(decisions: &mut [Decision], at: &[u32], out: &[Decision]) {
    for (d, &k) in out.iter().zip(at) {
        decisions[k as usize] = *d;
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
        let scratch = &mut response.scratch;
        let mut decisions = std::mem::take(&mut scratch.decisions);
        decisions.resize(scratch.slots.len(), PLACEHOLDER);
        let mut result = Ok(());
        for group in groups(&scratch.slots) {
            let mut p = prepare(policy, scratch, group);
            if let Err(e) = self.backend.decide(&p.items, now, apply, &mut p.out).await {
                result = Err(e.into());
                break;
            }
            record(&mut decisions, &p.at, &p.out);
        }
        scratch.decisions = decisions;
        result
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
        let scratch = &mut response.scratch;
        let mut decisions = std::mem::take(&mut scratch.decisions);
        decisions.resize(scratch.slots.len(), PLACEHOLDER);
        for group in groups(&scratch.slots) {
            let mut p = prepare(policy, scratch, group);
            backend.decide_now(&p.items, now, apply, &mut p.out);
            record(&mut decisions, &p.at, &p.out);
        }
        scratch.decisions = decisions;
    }
}
