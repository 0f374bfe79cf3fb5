//! What a full store does with a new key: the [`WhenFull`] rule.
//!
//! A full store holds only states that still restrict their keys (every
//! state equal to a fresh key's has been dropped first). Evicting one of
//! them would give its key its quota back, so by default none is: a new
//! key is decided as a fresh key and admitted without keeping its state
//! until a restriction lapses and makes room (see the module docs of
//! [`store`](super) for what each rule costs an attacker).

use std::time::Duration;

use crate::{Decision, Outcome};

/// What a full store does with a key it holds no state for, when every
/// state it holds still restricts its key (see the [module docs](super)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WhenFull {
    /// Decide the request as a fresh key's and keep no state (the
    /// default): no held restriction is erased and no new key is locked
    /// out, but a key without state is decided afresh at each request
    /// until the store has room again.
    #[default]
    Admit,
    /// Deny the request (retry after a second, when the full store next
    /// looks for room): no held restriction is erased, but new keys are
    /// locked out while the store stays full.
    Deny,
    /// Evict the least recently used states that hold no concurrency
    /// permits (an eighth of the shard), restrictions included, and keep
    /// the new key's: a flood of new keys gives its victims' quotas back.
    /// When only keys holding permits are left, the new key is admitted
    /// without state, as with [`Admit`](WhenFull::Admit).
    Evict,
}

impl WhenFull {
    /// The setting's name in configuration files (`admit`, `deny`,
    /// `evict`).
    pub fn name(self) -> &'static str {
        match self {
            WhenFull::Admit => "admit",
            WhenFull::Deny => "deny",
            WhenFull::Evict => "evict",
        }
    }
}

/// How long a new key denied by a full store is told to wait: the store
/// looks for room again once a second.
const RETRY_FULL: Duration = Duration::from_secs(1);

/// The decision for a new key that a full store has no room for, from the
/// decision `fresh` its fresh state got: under [`WhenFull::Deny`], a
/// request `fresh` admits is denied instead; otherwise `fresh` stands.
#[inline]
pub(crate) fn without_room(when_full: WhenFull, fresh: Decision) -> Decision {
    if when_full != WhenFull::Deny || !fresh.is_allowed() {
        return fresh;
    }
    Decision {
        outcome: Outcome::Denied,
        remaining: 0,
        retry_after: Some(RETRY_FULL),
        reset_after: fresh.reset_after.max(RETRY_FULL),
        ..fresh
    }
}
