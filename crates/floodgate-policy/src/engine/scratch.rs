//! Per-request working memory, kept inside a [`Response`](super::Response)
//! and reused, so that steady traffic allocates nothing.

use std::sync::Arc;

use floodgate::Decision;
use floodgate::algorithms::AnyLimit;

use crate::backend::Released;
use crate::compile::{Path, PolicySet, RuleId};
use crate::permit::Permit;

use super::errors::ErrorCode;

/// Which batch a counter is decided in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// The request's enforced limits, all decided atomically together.
    Enforced,
    /// The request's shadow-mode limits, decided atomically together as if
    /// they were enforced (nginx's dry run), apart from the enforced ones.
    Shadow,
    /// A quota-mode rule, decided on its own.
    Own,
    /// The counters of descriptors whose hits are given back (negative
    /// hits), together: each gives its units back whatever the others and
    /// the request's other limits decide, in any mode.
    Refund,
}

/// Where a counter's limit comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LimitRef {
    /// Limit `index` of a configured rule.
    Rule(RuleId, u8),
    /// A limit override sent with the descriptor.
    Override(u32),
}

/// One counter of the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub descriptor: u32,
    pub key: (u32, u32),
    pub limit: LimitRef,
    pub cost: u64,
    pub batch: Batch,
    /// Who holds the units of a leased concurrency limit: the hash of the
    /// descriptor's holder entry (a rule with `holder: true`), else
    /// [`ANONYMOUS`](floodgate::algorithms::ANONYMOUS).
    pub holder: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Every counter key, back to back.
    pub keys: Vec<u8>,
    pub slots: Vec<Slot>,
    pub overrides: Vec<AnyLimit>,
    pub decisions: Vec<Decision>,
    pub path: Path,
    /// The request's permit if it holds a concurrency limit.
    pub permit: Permit,
    /// Some counter is in [`Batch::Refund`] (negative hits): most
    /// requests have none, and skip that batch.
    pub refunds: bool,
    /// What a [`release_request`](super::Engine::release_request) did to
    /// each slot (empty after a decision).
    pub released: Vec<Option<Result<Released, ErrorCode>>>,
    /// The policy decided under, kept while the request holds a permit:
    /// its release must find the same rules after a reload.
    pub policy: Option<Arc<PolicySet>>,
}

impl Scratch {
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.slots.clear();
        self.overrides.clear();
        self.decisions.clear();
        self.released.clear();
        self.permit = Permit::NONE;
        self.refunds = false;
        self.policy = None;
    }
}
