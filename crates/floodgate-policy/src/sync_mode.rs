//! How a rule's counters are shared between the instances of a fleet
//! through a shared store (Redis): the `sync:` key of a Floodgate
//! `rate_limit` (and of the store's settings, as the default), carried on
//! every backend [`Item`](crate::Item) of the rule.

use std::fmt;
use std::time::Duration;

/// A synchronisation mode. Backends that count in this process only (the
/// in-memory store) ignore it; the Redis backend decides each item by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// Every decision is one round trip to the shared store.
    Exact,
    /// Decisions are made in memory against units leased from the shared
    /// store, which grants each lease atomically out of the key's remaining
    /// quota: the fleet never admits more than the limit.
    Lease {
        /// How long a lease may be used before its unused units go back
        /// (never past the end of the window it was granted for).
        duration: Duration,
    },
    /// Decisions are made in memory on a view of the key (the last global
    /// state plus this instance's own hits), pushed and refreshed every
    /// `interval`: the fleet may admit more than the limit, by at most a
    /// bound computed from the configuration (see `docs/redis.md`).
    Sync {
        /// How often the dirty keys are pushed and their global state
        /// pulled.
        interval: Duration,
    },
}

impl SyncMode {
    /// The lease duration of `sync: lease`.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(1);
    /// The interval of `sync: sync`.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
    /// The shortest lease duration or interval accepted.
    pub const MIN_PERIOD: Duration = Duration::from_millis(1);
    /// The longest lease duration or interval accepted.
    pub const MAX_PERIOD: Duration = Duration::from_secs(3600);

    /// The names accepted in configuration files, in order.
    pub const NAMES: &'static [&'static str] = &["exact", "lease", "sync"];

    /// A mode by name, with its default period.
    ///
    /// ```
    /// use floodgate_policy::SyncMode;
    /// assert_eq!(SyncMode::parse("exact"), Some(SyncMode::Exact));
    /// assert!(matches!(SyncMode::parse("lease"), Some(SyncMode::Lease { .. })));
    /// assert_eq!(SyncMode::parse("eventual"), None);
    /// ```
    pub fn parse(name: &str) -> Option<SyncMode> {
        match name {
            "exact" => Some(SyncMode::Exact),
            "lease" => Some(SyncMode::Lease {
                duration: Self::DEFAULT_LEASE,
            }),
            "sync" => Some(SyncMode::Sync {
                interval: Self::DEFAULT_INTERVAL,
            }),
            _ => None,
        }
    }

    /// [`parse`](Self::parse), with an error naming the modes.
    pub fn read(name: &str) -> Result<SyncMode, String> {
        SyncMode::parse(name).ok_or_else(|| {
            format!(
                "unknown sync mode `{}` (expected one of: {})",
                crate::yaml::excerpt(name),
                SyncMode::NAMES.join(", ")
            )
        })
    }

    /// Reads a lease duration or a sync interval: a duration from
    /// [`MIN_PERIOD`](Self::MIN_PERIOD) to [`MAX_PERIOD`](Self::MAX_PERIOD).
    pub fn read_period(text: &str) -> Result<Duration, String> {
        let d = crate::unit::read_duration(text, false)?;
        if d < Self::MIN_PERIOD || d > Self::MAX_PERIOD {
            let found = crate::yaml::excerpt(text.trim());
            return Err(format!("expected 1ms to 1h, found `{found}`"));
        }
        Ok(d)
    }

    /// The mode's name (`exact`, `lease` or `sync`).
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Exact => "exact",
            SyncMode::Lease { .. } => "lease",
            SyncMode::Sync { .. } => "sync",
        }
    }

    /// Whether decisions are made in this process (`lease`, `sync`).
    pub fn is_local(self) -> bool {
        !matches!(self, SyncMode::Exact)
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncMode::Exact => f.write_str("exact"),
            SyncMode::Lease { duration } => write!(f, "lease ({duration:?})"),
            SyncMode::Sync { interval } => write!(f, "sync (every {interval:?})"),
        }
    }
}

/// What an instance holds locally for one counter decided in memory (see
/// [`Backend::held`](crate::Backend::held)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The mode that decides the counter here.
    pub mode: SyncMode,
    /// Units of a lease not used yet (`lease`; for an in-flight limit, the
    /// permits leased and not taken).
    pub leased: u64,
    /// Units admitted here and not yet pushed to the shared store (`sync`).
    pub unsynced: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in SyncMode::NAMES {
            assert_eq!(SyncMode::parse(name).map(SyncMode::name), Some(*name));
        }
        assert_eq!(SyncMode::parse("Lease"), None);
        assert!(SyncMode::parse("lease").unwrap().is_local());
        assert!(!SyncMode::Exact.is_local());
    }
}
