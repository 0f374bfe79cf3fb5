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

/// Whether `mode` applies to `limit`: leases to windows, token buckets and
/// in-flight limits; sync to windows and token buckets; `exact` to all.
/// Sliding logs and shapers are decided in Redis only: their state is the
/// order of every request, which no lease or count summarises.
pub fn supports(limit: &AnyLimit, mode: SyncMode) -> Result<(), UnsupportedMode> {
    let kind = limit.kind();
    if matches!(mode, SyncMode::Lease { .. }) && !limit.block().is_zero() {
        return Err(UnsupportedMode::new(
            "sync mode lease does not apply to a limit with block_for (a block starts the key \
             afresh, which the leases held elsewhere were granted from); use exact or sync"
                .to_owned(),
        ));
    }
    let ok = match mode {
        SyncMode::Exact => true,
        SyncMode::Lease { .. } => !matches!(kind, LimitKind::SlidingLog(_) | LimitKind::Shaper(_)),
        SyncMode::Sync { .. } => !matches!(
            kind,
            LimitKind::SlidingLog(_) | LimitKind::Shaper(_) | LimitKind::Concurrency(_)
        ),
    };
    if ok {
        return Ok(());
    }
    let what = match kind {
        LimitKind::SlidingLog(_) => "a sliding log (every request's time is its state)",
        LimitKind::Shaper(_) => "a shaper (its delays depend on the order of every request)",
        _ => "an in-flight limit (use lease: permits are leased)",
    };
    Err(UnsupportedMode::new(format!(
        "sync mode {} does not apply to {what}; use exact",
        mode.name()
    )))
}
