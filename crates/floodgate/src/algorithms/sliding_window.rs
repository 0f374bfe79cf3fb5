//! Sliding window counter: the weighted estimate of the last `window` from
//! fixed sub-window counts (Cloudflare's two-window approximation, and an
//! N-sub-window variant for tighter accuracy).
//!
//! With `N` sub-windows of length `S = window / N`, the state is the count of
//! the current sub-window and of the `N` before it. At `e` into the current
//! sub-window the window `[now − window, now]` covers the current and `N − 1`
//! previous sub-windows fully and the oldest for `(S − e)/S` of its length:
//!
//! `estimate = oldest · (S − e)/S + (sum of the other counts)`.
//!
//! A request of cost `n` is admitted iff `estimate + n ≤ limit`. `N = 1` is
//! the classic `previous · (W − e)/W + current`. All comparisons are exact
//! integer arithmetic (the estimate is never rounded), `remaining` is the
//! estimate's headroom rounded down, and `retry_after` solves the inequality
//! exactly for the earliest instant at which it holds.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::error::{ConfigError, check_count, check_period};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape, per_window};

/// The weighted two-window estimate (Cloudflare): `limit` per `window`.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::SlidingWindow;
/// use std::time::Duration;
///
/// // Cloudflare's example: 50 per minute; 42 in the previous minute,
/// // 18 in the current one that started 15 s ago: 42·45/60 + 18 = 49.5.
/// let sw = SlidingWindow::new(50, Duration::from_secs(60)).unwrap();
/// let mut s = sw.fresh();
/// assert!(sw.decide(&mut s, Timestamp::from_secs(0), 42, Apply::Commit).is_allowed());
/// let d = sw.decide(&mut s, Timestamp::from_secs(75), 18, Apply::Commit);
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining, 0); // 50 − 49.5, rounded down
/// // One more would make 50.5: denied until the estimate has decayed by 0.5,
/// // i.e. 0.5/42 of a minute later.
/// let d = sw.decide(&mut s, Timestamp::from_secs(75), 1, Apply::Commit);
/// assert_eq!(d.retry_after, Some(Duration::from_nanos(714_285_715)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window: u64,
}

/// Start of the current window (ns) and the counts `[previous, current]`
/// (32-bit, so that a key costs 16 bytes of state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    start: u64,
    counts: [u32; 2],
}

/// The sliding window counter over `N` sub-windows: `limit` per `window`,
/// estimated from `N + 1` sub-window counts. Accuracy improves with `N`;
/// memory is `8 · (N + 2)` bytes per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubWindowCounter {
    limit: u64,
    window: u64,
    sub: u64,
    n: usize,
}

/// Start of the current sub-window (ns) and the `N + 1` counts, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubWindowState {
    start: u64,
    counts: Box<[u64]>,
}

impl SlidingWindowState {
    /// The state of a window starting at `start`, with the counts of the
    /// previous window and of this one (for a backend that keeps the state
    /// elsewhere and decides a copy here).
    pub fn new(start: Timestamp, previous: u32, current: u32) -> Self {
        SlidingWindowState {
            start: start.as_nanos(),
            counts: [previous, current],
        }
    }

    /// The start of the current window.
    pub fn start(&self) -> Timestamp {
        Timestamp::from_nanos(self.start)
    }

    /// The counts of the previous window and of the current one.
    pub fn counts(&self) -> [u32; 2] {
        self.counts
    }
}

impl SubWindowState {
    /// The state of a sub-window starting at `start`, with the `N + 1`
    /// counts, oldest first (a state of another length decides as a fresh
    /// one).
    pub fn new(start: Timestamp, counts: Box<[u64]>) -> Self {
        SubWindowState {
            start: start.as_nanos(),
            counts,
        }
    }

    /// The start of the current sub-window.
    pub fn start(&self) -> Timestamp {
        Timestamp::from_nanos(self.start)
    }

    /// The counts, oldest first.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The counts, taken (to build another state without allocating).
    pub fn into_counts(self) -> Box<[u64]> {
        self.counts
    }
}

impl SlidingWindow {
    /// `limit` per sliding `window`. The limit is at most 4 294 967 295 (its
    /// counts are 32-bit); [`SubWindowCounter`] with one sub-window has the
    /// same semantics with 64-bit counts.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        let limit = check_count("limit", limit)?;
        if limit > u64::from(u32::MAX) {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "must be at most {} for the two-window counter (got {limit}); use sub-windows for larger limits",
                    u32::MAX
                ),
            ));
        }
        Ok(SlidingWindow {
            limit,
            window: check_period("window", window)?,
        })
    }

    /// The count per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }
}

impl SubWindowCounter {
    /// `limit` per sliding `window`, counted in `sub_windows` equal parts
    /// (between 1 and 1024; the window must divide evenly in nanoseconds).
    pub fn new(limit: u64, window: Duration, sub_windows: u32) -> Result<Self, ConfigError> {
        let limit = check_count("limit", limit)?;
        let window = check_period("window", window)?;
        if sub_windows == 0 || sub_windows > 1024 {
            return Err(ConfigError::new(
                "sub_windows",
                format!("must be between 1 and 1024 (got {sub_windows})"),
            ));
        }
        if window % u64::from(sub_windows) != 0 {
            return Err(ConfigError::new(
                "sub_windows",
                format!("the window ({window} ns) must divide evenly into {sub_windows} parts"),
            ));
        }
        Ok(SubWindowCounter {
            limit,
            window,
            sub: window / u64::from(sub_windows),
            n: sub_windows as usize,
        })
    }

    /// The count per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The number of sub-windows.
    pub fn sub_windows(&self) -> u32 {
        self.n as u32
    }
}

impl Shape for SlidingWindow {
    fn name(&self) -> &'static str {
        "sliding_window"
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit,
            window: Some(self.window()),
        }
    }

    /// The previous and the current window, each as long as the limit's.
    fn counting_window(&self) -> Option<Duration> {
        Some(self.window())
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        per_window(f, self.limit, self.window())
    }
}

impl Shape for SubWindowCounter {
    fn name(&self) -> &'static str {
        "sliding_window"
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.limit,
            window: Some(self.window()),
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        Some(Duration::from_nanos(self.sub))
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        per_window(f, self.limit, self.window())
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn fresh(&self) -> SlidingWindowState {
        SlidingWindowState::default()
    }

    #[inline]
    fn decide(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision {
        decide_two(s, self.window, self.limit, now.as_nanos(), cost, apply)
    }

    fn idle_at(&self, s: &SlidingWindowState, now: Timestamp) -> Timestamp {
        idle_at(s.start, &s.counts.map(u64::from), self.window, now)
    }
}

impl Algorithm for SubWindowCounter {
    type State = SubWindowState;

    fn fresh(&self) -> SubWindowState {
        SubWindowState {
            start: 0,
            counts: vec![0; self.n + 1].into_boxed_slice(),
        }
    }

    fn decide(&self, s: &mut SubWindowState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        if s.counts.len() != self.n + 1 {
            *s = self.fresh();
        }
        decide(
            &mut s.start,
            &mut s.counts,
            self.sub,
            self.limit,
            now.as_nanos(),
            cost,
            apply,
        )
    }

    fn idle_at(&self, s: &SubWindowState, now: Timestamp) -> Timestamp {
        idle_at(s.start, &s.counts, self.sub, now)
    }
}

/// The two-window counter, on scalars: the same arithmetic as [`decide`]
/// with `N = 1`, without slices (the common case, kept fast).
#[inline]
fn decide_two(
    s: &mut SlidingWindowState,
    window: u64,
    limit: u64,
    now: u64,
    cost: u64,
    apply: Apply,
) -> Decision {
    let (start, prev, curr) = seen_two(s, window, now, cost, apply);
    let e = now.max(start) - start;
    let w = u128::from(window);
    let cap = u128::from(limit) * w;
    let aged = u128::from(prev) * u128::from(window - e);
    let estimate = |curr: u64| aged + u128::from(curr) * w;
    let (outcome, charge) = if apply == Apply::Refund {
        (Outcome::Allowed, false)
    } else if cost > limit {
        (Outcome::Never, false)
    } else if cost == 0 || estimate(curr + cost) <= cap {
        (Outcome::Allowed, apply.charge_if_allowed())
    } else {
        (Outcome::Denied, apply.charge_if_denied())
    };
    let curr = if charge && cost > 0 {
        let c = curr.saturating_add(cost).min(u64::from(u32::MAX));
        *s = SlidingWindowState {
            start,
            counts: [prev as u32, c as u32],
        };
        c
    } else {
        curr
    };
    let retry_after =
        (outcome == Outcome::Denied).then(|| retry(&[prev, curr], e, window, limit, cost));
    let remaining = crate::arith::div(cap.saturating_sub(estimate(curr)), window) as u64;
    let reset_after = if curr > 0 {
        Duration::from_nanos(2 * window - e)
    } else if prev > 0 {
        Duration::from_nanos(window - e)
    } else {
        Duration::ZERO
    };
    Decision {
        outcome,
        limit,
        remaining,
        reset_after,
        retry_after,
    }
}

/// The two counts as seen at `now` (the window's start, the previous count
/// and the current one); only a charge stores them, or a refund, which
/// gives `cost` back first.
#[inline]
fn seen_two(
    s: &mut SlidingWindowState,
    window: u64,
    now: u64,
    cost: u64,
    apply: Apply,
) -> (u64, u64, u64) {
    let current = now - now % window;
    let (start, prev, curr) = if current <= s.start {
        (s.start, u64::from(s.counts[0]), u64::from(s.counts[1]))
    } else if current - s.start == window {
        (current, u64::from(s.counts[1]), 0)
    } else {
        (current, 0, 0)
    };
    if apply != Apply::Refund || cost == 0 || (prev | curr) == 0 {
        return (start, prev, curr);
    }
    let mut c = [prev, curr];
    give_back(&mut c, cost);
    *s = SlidingWindowState {
        start,
        counts: [c[0] as u32, c[1] as u32],
    };
    (start, c[0], c[1])
}

/// When every count has left the window: the end of the sub-window after the
/// newest non-zero count's window.
fn idle_at(start: u64, counts: &[u64], sub: u64, now: Timestamp) -> Timestamp {
    match counts.iter().rposition(|&c| c != 0) {
        Some(j) => Timestamp::from_nanos(start.saturating_add((j as u64 + 1).saturating_mul(sub))),
        None => now,
    }
}

/// Gives `cost` units back (negative hits): the newest counts first, none
/// below 0.
fn give_back(counts: &mut [u64], cost: u64) {
    let mut left = cost;
    for c in counts.iter_mut().rev() {
        let take = left.min(*c);
        *c -= take;
        left -= take;
    }
}

/// Moves the counts forward so that the last one is the sub-window holding
/// `now`. A clock behind `start` moves nothing.
fn roll(start: &mut u64, counts: &mut [u64], sub: u64, now: u64) {
    let current = now - now % sub;
    if current <= *start {
        return;
    }
    let shift = (current - *start) / sub;
    if shift >= counts.len() as u64 {
        counts.fill(0);
    } else {
        let shift = shift as usize;
        counts.rotate_left(shift);
        let len = counts.len();
        counts[len - shift..].fill(0);
    }
    *start = current;
}

/// `estimate · sub` with the counts shifted `k` sub-windows into the future
/// at `e` into that sub-window, plus `extra` units in the newest.
fn scaled_estimate(counts: &[u64], k: usize, e: u64, sub: u64, extra: u64) -> u128 {
    let shifted = counts.get(k..).unwrap_or(&[]);
    let (oldest, rest) = match shifted.split_first() {
        Some((o, r)) => (*o, r),
        None => (0, &[][..]),
    };
    let rest = sum(rest).saturating_add(u128::from(extra));
    (u128::from(oldest) * u128::from(sub - e)).saturating_add(rest.saturating_mul(u128::from(sub)))
}

fn sum(counts: &[u64]) -> u128 {
    counts.iter().map(|&c| u128::from(c)).sum()
}

/// How many counts have left the window at `now`, and the start of the
/// sub-window holding `now` (a clock behind `start` counts as `start`).
fn view(start: u64, len: usize, sub: u64, now: u64) -> (usize, u64) {
    let current = now - now % sub;
    if current <= start {
        return (0, start);
    }
    let shift = (current - start) / sub;
    (shift.min(len as u64) as usize, current)
}

fn decide(
    start: &mut u64,
    counts: &mut [u64],
    sub: u64,
    limit: u64,
    now: u64,
    cost: u64,
    apply: Apply,
) -> Decision {
    // The counts as seen at `now` are `counts[gone..]` followed by `gone`
    // zeros; only a charge actually moves them.
    let (mut gone, current) = view(*start, counts.len(), sub, now);
    if apply == Apply::Refund && cost > 0 && counts[gone..].iter().any(|&c| c > 0) {
        roll(start, counts, sub, now);
        gone = 0;
        give_back(counts, cost);
    }
    let e = now.max(current) - current;
    let cap = u128::from(limit) * u128::from(sub);
    let (outcome, charge) = if apply == Apply::Refund {
        (Outcome::Allowed, false)
    } else if cost > limit {
        (Outcome::Never, false)
    } else if cost == 0 || scaled_estimate(&counts[gone..], 0, e, sub, cost) <= cap {
        (Outcome::Allowed, apply.charge_if_allowed())
    } else {
        (Outcome::Denied, apply.charge_if_denied())
    };
    if charge && cost > 0 {
        roll(start, counts, sub, now);
        gone = 0;
        let last = counts.len() - 1;
        counts[last] = counts[last].saturating_add(cost);
    }
    let counts = &counts[gone..];
    let retry_after = (outcome == Outcome::Denied).then(|| retry(counts, e, sub, limit, cost));
    let used = scaled_estimate(counts, 0, e, sub, 0);
    let remaining = (cap.saturating_sub(used) / u128::from(sub)) as u64;
    // Every count has left the window once the newest non-zero one has.
    let reset_after = match counts.iter().rposition(|&c| c != 0) {
        Some(j) => Duration::from_nanos((j as u64 + 1).saturating_mul(sub) - e),
        None => Duration::ZERO,
    };
    Decision {
        outcome,
        limit,
        remaining,
        reset_after,
        retry_after,
    }
}

/// The exact wait until `estimate + cost ≤ limit`, at `e` into the current
/// sub-window. The estimate only falls as time passes, so the first solution
/// found walking forward is the earliest.
fn retry(counts: &[u64], e: u64, sub: u64, limit: u64, cost: u64) -> Duration {
    let cap = u128::from(limit) * u128::from(sub);
    for k in 0..=counts.len() {
        let shifted = counts.get(k..).unwrap_or(&[]);
        let (oldest, rest) = match shifted.split_first() {
            Some((o, r)) => (u128::from(*o), r),
            None => (0, &[][..]),
        };
        let rest_scaled = sum(rest)
            .saturating_add(u128::from(cost))
            .saturating_mul(u128::from(sub));
        if rest_scaled > cap {
            continue;
        }
        // Need oldest · (sub − x) ≤ cap − rest·sub; the smallest such x.
        let x = match (cap - rest_scaled).checked_div(oldest) {
            None => 0,
            Some(room) => u128::from(sub).saturating_sub(room) as u64,
        };
        let x = if k == 0 { x.max(e) } else { x };
        if x < sub {
            let at = k as u64 * sub + x;
            return Duration::from_nanos(at - e);
        }
    }
    // Unreachable while cost ≤ limit: with every count gone the request fits.
    Duration::from_nanos((counts.len() as u64 + 1) * sub - e)
}
