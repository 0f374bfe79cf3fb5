//! Which limits each synchronisation mode applies to, and how a limit is
//! shared under it.

use std::time::Duration;

use floodgate::algorithms::{AnyLimit, LimitKind};
use floodgate_policy::SyncMode;

use super::bound;
use super::local::Share;
use crate::error::UnsupportedMode;

/// How `limit` is decided under `mode`: `None` in Redis (`exact`, or a
/// limit the mode does not apply to).
pub(crate) fn share(mode: SyncMode, limit: &AnyLimit) -> Option<Share> {
    match mode {
        SyncMode::Exact => None,
        SyncMode::Lease { duration } => supports(limit, mode).ok().map(|_| Share::Lease {
            duration: nanos(duration),
        }),
        SyncMode::Sync { interval } => supports(limit, mode).ok().map(|_| Share::Sync {
            interval: nanos(interval),
            slice: bound::slice(limit, interval),
        }),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The modes besides `exact` an algorithm can be shared under, and why
/// not when it cannot.
struct Modes {
    lease: bool,
    sync: bool,
    /// What the algorithm is, and why a mode it refuses cannot hold it.
    otherwise: &'static str,
}

/// Each algorithm's [`Modes`]: leases apply to windows, token buckets and
/// in-flight limits; sync to windows and token buckets. Sliding logs and
/// shapers are decided in Redis only: their state is the order of every
/// request, which no lease or count summarises.
fn modes(kind: LimitKind<'_>) -> Modes {
    const COUNTS: Modes = Modes {
        lease: true,
        sync: true,
        otherwise: "",
    };
    match kind {
        LimitKind::FixedWindow(_)
        | LimitKind::SlidingWindow(_)
        | LimitKind::SubWindows(_)
        | LimitKind::Gcra(_) => COUNTS,
        LimitKind::Concurrency(_) => Modes {
            lease: true,
            sync: false,
            otherwise: "an in-flight limit (use lease: permits are leased)",
        },
        LimitKind::SlidingLog(_) => Modes {
            lease: false,
            sync: false,
            otherwise: "a sliding log (every request's time is its state)",
        },
        LimitKind::Shaper(_) => Modes {
            lease: false,
            sync: false,
            otherwise: "a shaper (its delays depend on the order of every request)",
        },
    }
}

/// Whether `mode` applies to `limit` (`exact` applies to all; see
/// `docs/redis.md`, "Synchronisation modes").
pub fn supports(limit: &AnyLimit, mode: SyncMode) -> Result<(), UnsupportedMode> {
    if matches!(mode, SyncMode::Lease { .. }) && !limit.block().is_zero() {
        return Err(UnsupportedMode::new(
            "sync mode lease does not apply to a limit with block_for (a block starts the key \
             afresh, which the leases held elsewhere were granted from); use exact or sync"
                .to_owned(),
        ));
    }
    if limit.is_leased() && mode != SyncMode::Exact {
        return Err(UnsupportedMode::new(format!(
            "sync mode {} does not apply to a concurrency limit with a lease (its holders' \
             units are given back in Redis); use exact",
            mode.name()
        )));
    }
    let modes = modes(limit.kind());
    let ok = match mode {
        SyncMode::Exact => true,
        SyncMode::Lease { .. } => modes.lease,
        SyncMode::Sync { .. } => modes.sync,
    };
    if ok {
        return Ok(());
    }
    Err(UnsupportedMode::new(format!(
        "sync mode {} does not apply to {}; use exact",
        mode.name(),
        modes.otherwise
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{Params, every_algorithm};

    /// A concurrency limit with its own lease is decided in Redis only:
    /// its holders' units are given back there.
    #[test]
    fn a_leased_concurrency_limit_is_exact_only() {
        let c = floodgate::algorithms::Concurrency::leased(3, std::time::Duration::from_secs(30));
        let limit = AnyLimit::from(c.unwrap());
        assert!(supports(&limit, SyncMode::Exact).is_ok());
        for mode in ["lease", "sync"] {
            let err = supports(&limit, SyncMode::parse(mode).unwrap()).unwrap_err();
            assert!(err.to_string().contains("with a lease"), "{err}");
        }
    }

    /// The lease and sync scripts refuse, by their kind, the limits that
    /// [`modes`] says their mode does not apply to, and only those.
    #[test]
    fn the_scripts_refuse_what_a_mode_does_not_apply_to() {
        let lease = include_str!("../lua/lease_items.lua");
        let sync = include_str!("../lua/sync_items.lua");
        for limit in every_algorithm() {
            let code = Params::of(&limit).unwrap().code();
            let refused = |script: &str| script.contains(&format!("it.kind == '{code}'"));
            let m = modes(limit.kind());
            let what = limit.describe().to_string();
            assert_eq!(m.lease, !refused(lease), "lease of {what}");
            assert_eq!(m.sync, !refused(sync), "sync of {what}");
            assert_eq!(m.lease && m.sync, m.otherwise.is_empty(), "{what}");
        }
    }
}
