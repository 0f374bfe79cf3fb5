//! What a rule asks for when its shared store (Redis) cannot decide: the
//! `on_failure` key of a Floodgate `rate_limit`, carried on every backend
//! [`Item`](crate::Item) of the rule.

use std::fmt;

/// A rule's failure policy. Backends that always decide (the in-memory
/// store) ignore it; the Redis backend applies it to the rule's items when
/// Redis fails, times out or its circuit breaker is open, instead of the
/// store's global policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnFailure {
    /// Admit: availability over enforcement.
    FailOpen,
    /// Deny: enforcement over availability (e.g. login or payment limits).
    FailClosed,
    /// Decide on an in-process store with the same limits (divided by the
    /// store's expected number of instances).
    Local,
}

impl OnFailure {
    /// The names accepted in configuration files, in order.
    pub const NAMES: &'static [&'static str] = &["fail_open", "fail_closed", "local"];

    /// Parses a configuration name (`fail_open`, `fail_closed`, `local`);
    /// `None` for anything else.
    ///
    /// ```
    /// use floodgate_policy::OnFailure;
    /// assert_eq!(OnFailure::parse("fail_closed"), Some(OnFailure::FailClosed));
    /// assert_eq!(OnFailure::parse("closed"), None);
    /// ```
    pub fn parse(name: &str) -> Option<OnFailure> {
        match name {
            "fail_open" => Some(OnFailure::FailOpen),
            "fail_closed" => Some(OnFailure::FailClosed),
            "local" => Some(OnFailure::Local),
            _ => None,
        }
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            OnFailure::FailOpen => "fail_open",
            OnFailure::FailClosed => "fail_closed",
            OnFailure::Local => "local",
        }
    }
}

impl fmt::Display for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in OnFailure::NAMES {
            assert_eq!(OnFailure::parse(name).map(OnFailure::name), Some(*name));
        }
        assert_eq!(OnFailure::parse("FAIL_OPEN"), None);
        assert_eq!(OnFailure::parse(""), None);
    }
}
