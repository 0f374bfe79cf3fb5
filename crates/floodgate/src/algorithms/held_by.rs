//! [`HeldBy`]: a limit decided for one holder of its units.

use crate::algorithm::{Algorithm, Apply};
use crate::{Decision, Timestamp};

use super::{AnyLimit, AnyState, Holder};

/// An [`AnyLimit`] decided for `holder`: the units a leased concurrency
/// limit ([`Concurrency::leased`](super::Concurrency::leased)) admits are
/// recorded as `holder`'s, and [`Apply::Refund`] gives back `holder`'s own
/// units only. Any other limit decides as the [`AnyLimit`] itself.
/// Holder [`ANONYMOUS`](super::ANONYMOUS) is everyone who names none.
#[derive(Clone, Copy, Debug)]
pub struct HeldBy<'a> {
    limit: &'a AnyLimit,
    holder: Holder<'a>,
}

impl<'a> HeldBy<'a> {
    /// `limit`, decided for holder `id`.
    pub fn new(limit: &'a AnyLimit, id: u64) -> Self {
        HeldBy::holding(limit, Holder::new(id))
    }

    /// `limit`, decided for `holder` (who may count the units whose lease
    /// ended).
    pub fn holding(limit: &'a AnyLimit, holder: Holder<'a>) -> Self {
        HeldBy { limit, holder }
    }

    /// [`Algorithm::decide`], callable without the trait in scope.
    pub fn decide(
        &self,
        state: &mut AnyState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision {
        self.limit.decide_held(state, now, cost, apply, self.holder)
    }
}

impl Algorithm for HeldBy<'_> {
    type State = AnyState;

    fn fresh(&self) -> AnyState {
        self.limit.fresh()
    }

    fn decide(&self, state: &mut AnyState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        HeldBy::decide(self, state, now, cost, apply)
    }

    fn idle_at(&self, state: &AnyState, now: Timestamp) -> Timestamp {
        self.limit.idle_at(state, now)
    }

    fn in_flight(&self) -> bool {
        self.limit.in_flight()
    }

    fn pins(&self) -> bool {
        self.limit.pins()
    }

    fn snapshot(&self, state: &AnyState) -> Option<AnyState> {
        self.limit.snapshot(state)
    }
}
