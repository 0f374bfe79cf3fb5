//! How far `sync` can take a fleet past a limit, from the configuration
//! alone (printed by `floodgate config check`, documented in
//! `docs/redis.md`).
//!
//! An instance admits on its own at most a *slice* of units that Redis has
//! not acknowledged (the limit's rate times the interval, at least one
//! unit; a request costing more than a slice only when none is pending):
//! beyond, it pushes, and waits for the answer before admitting more.
//! Every push adds the instance's hits to Redis and reads back the state
//! with everyone's, and every admission is checked against the instance's
//! view: Redis's state at its last push plus its own hits since. Every hit
//! admitted reaches Redis's count: an instance admits on its own in a
//! window only once a reply of Redis was dated in it (Redis counts no hits
//! of a window it has not reached). So of
//! everything the fleet admitted, only what each *other* instance admitted
//! and Redis had not acknowledged is missing from the view of the instance
//! that admits last: the fleet exceeds the limit by at most
//! `(instances − 1) × slice` units — per window for window limits, over
//! any span for token buckets (on top of the burst plus the rate times the
//! span).

use std::time::Duration;

use floodgate::algorithms::{AnyLimit, LimitKind};

/// The rate of `limit` as (units, per ns): a window's limit per window, a
/// token bucket's refill; `None` for limits `sync` does not apply to.
fn rate(limit: &AnyLimit) -> Option<(u128, u128)> {
    Some(match limit.kind() {
        LimitKind::FixedWindow(f) => (u128::from(f.limit()), f.window().as_nanos()),
        LimitKind::SlidingWindow(w) => (u128::from(w.limit()), w.window().as_nanos()),
        LimitKind::SubWindows(w) => (u128::from(w.limit()), w.window().as_nanos()),
        LimitKind::Gcra(g) => {
            let (count, period) = g.rate();
            (u128::from(count), period.as_nanos())
        }
        LimitKind::SlidingLog(_) | LimitKind::Shaper(_) | LimitKind::Concurrency(_) => {
            return None;
        }
    })
}

/// The units an instance admits on its own between two pushes of a key:
/// the limit's rate times `interval`, rounded up, at least 1.
pub(crate) fn slice(limit: &AnyLimit, interval: Duration) -> u64 {
    match rate(limit) {
        Some((units, per)) => {
            let s = (units * interval.as_nanos()).div_ceil(per.max(1));
            u64::try_from(s).unwrap_or(u64::MAX).max(1)
        }
        None => 1,
    }
}

/// The worst case of `sync` for one limit (see [`over_admission`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverAdmission {
    /// The units an instance admits on its own between two pushes.
    pub slice: u64,
    /// The most units the fleet admits past the limit: `(instances − 1)`
    /// slices (or costs, when a request costs more than a slice).
    pub units: u64,
    /// The limit's quota (a window's limit, a bucket's burst), to compare.
    pub quota: u64,
}

/// The most `instances` instances deciding `limit` in `sync` mode with
/// `interval` admit past the limit, requests costing `cost`: in any window
/// (window limits), or over any span on top of the burst plus the rate
/// times the span (token buckets). `None` for limits `sync` does not apply
/// to.
///
/// ```
/// use std::time::Duration;
/// use floodgate::algorithms::{AnyLimit, FixedWindow};
/// use floodgate_redis::over_admission;
///
/// // 1000 per minute, pushed every 100 ms, by 4 instances.
/// let limit = AnyLimit::from(FixedWindow::new(1000, Duration::from_secs(60)).unwrap());
/// let worst = over_admission(&limit, Duration::from_millis(100), 1, 4).unwrap();
/// assert_eq!((worst.slice, worst.units), (2, 6));
/// ```
pub fn over_admission(
    limit: &AnyLimit,
    interval: Duration,
    cost: u64,
    instances: u32,
) -> Option<OverAdmission> {
    let (_, _) = rate(limit)?;
    let quota = limit.quota().limit;
    let slice = slice(limit, interval);
    Some(OverAdmission {
        slice,
        units: u64::from(instances.saturating_sub(1)).saturating_mul(slice.max(cost)),
        quota,
    })
}
