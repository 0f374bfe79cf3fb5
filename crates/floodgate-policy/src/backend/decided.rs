//! Who decided a batch: the store itself, or a failure policy standing in
//! for a store that could not (see [`Backend::decide_by`](super::Backend::decide_by)).

use floodgate::Decision;

/// What decided a batch in a store's place, when the store could not
/// (a shared store down, too slow, or behind an open circuit breaker).
/// Ordered by what it says about a request decided in several batches:
/// the greatest is reported (failed closed, then failed open, then local).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fallback {
    /// The local fallback store decided the batch (or decided what denied
    /// it beside items that failed open): a real decision on this
    /// instance's own counters, reported as what it decided.
    Local,
    /// Some item failed open (admitted unevaluated), and the batch was
    /// admitted.
    FailedOpen,
    /// Some item failed closed (denied unevaluated), which denies the
    /// batch.
    FailedClosed,
}

/// A batch's narrowest decision and who took it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decided {
    /// The narrowest decision of the batch (what [`Backend::decide`](super::Backend::decide) returns).
    pub decision: Decision,
    /// `None` when the store decided; else the failure policy that did.
    pub fallback: Option<Fallback>,
}

impl Decided {
    /// A decision the store took.
    #[inline]
    pub fn by_store(decision: Decision) -> Self {
        Decided {
            decision,
            fallback: None,
        }
    }
}
