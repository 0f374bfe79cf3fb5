//! Every limit a response's descriptors were matched to, one by one: the
//! detail behind each status's narrowest decision.

use floodgate::Decision;

use crate::backend::Released;
use crate::compile::RuleId;

use super::errors::ErrorCode;

use super::response::Response;
use super::scratch::LimitRef;
use super::{Engine, item};
use crate::backend::Backend;
use crate::sync_mode::Held;
use floodgate::Clock;

/// One limit of a descriptor: a limit of its matched rule, or the limit
/// override sent with it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitEntry {
    /// The descriptor, by its index in the request.
    pub descriptor: usize,
    /// The rule the limit belongs to; `None` for a limit override.
    pub rule: Option<RuleId>,
    /// The limit's index in the rule's [`limits`](crate::compile::Rule::limits)
    /// (0 for an override).
    pub index: usize,
    /// The units the request puts on this limit (its hits times the rule's
    /// cost; 0 checks without charging).
    pub units: u64,
    /// This limit's own decision; `None` when the response was not decided
    /// (a [`release_request`](super::Engine::release_request)).
    pub decision: Option<Decision>,
    /// What a [`release_request`](super::Engine::release_request) did to
    /// this limit: `None` after a decision, and for limits a release does
    /// not touch (not concurrency limits, or no units); the error's class
    /// when the store could neither release nor queue it.
    pub release: Option<Result<Released, ErrorCode>>,
}

impl<B: Backend, C: Clock> Engine<B, C> {
    /// For each limit of `response` (in the order of
    /// [`Response::limits`]): the synchronisation mode its counter is
    /// decided in and what this instance holds of it
    /// ([`Backend::held`]); empty when the policy `response` was decided
    /// under has been replaced since.
    pub fn held(&self, response: &Response) -> Vec<Option<Held>> {
        let Some(policy) = self.policy_of(response) else {
            return Vec::new();
        };
        let s = &response.scratch;
        s.slots
            .iter()
            .map(|slot| {
                self.backend()
                    .held(&item(&policy, &s.keys, &s.overrides, s.permit, slot))
            })
            .collect()
    }
}

impl Response {
    /// Every limit that took part in the decision, in request order (a
    /// rule's limits in their configured order). Descriptors that needed no
    /// counter (no match, unlimited, blocked, on a list, replaced) have
    /// none.
    pub fn limits(&self) -> impl Iterator<Item = LimitEntry> + '_ {
        let s = &self.scratch;
        s.slots.iter().enumerate().map(|(k, slot)| {
            let (rule, index) = match slot.limit {
                LimitRef::Rule(id, idx) => (Some(id), idx as usize),
                LimitRef::Override(_) => (None, 0),
            };
            LimitEntry {
                descriptor: slot.descriptor as usize,
                rule,
                index,
                units: slot.cost,
                decision: s.decisions.get(k).copied(),
                release: s.released.get(k).copied().flatten(),
            }
        })
    }
}
