//! The sliding window counter (Cloudflare's two windows, and N sub-windows)
//! against a model that keeps the full history of counted requests bucketed
//! by epoch-aligned sub-window and recomputes the estimate from it at every
//! instant, exactly (every quantity over the common denominator `S`, the
//! sub-window length).
//!
//! Invariants, over the admitted requests:
//! * the estimate including each admitted request was at most `limit` when
//!   it was admitted (recomputed from the admissions alone);
//! * every run of `N` consecutive aligned sub-windows (a window-length
//!   interval aligned to sub-windows) holds at most `limit`;
//! * any interval of one window's length holds at most `2·limit`. It covers
//!   at most `N + 1` sub-windows: `N` aligned ones (≤ `limit`) and one more
//!   (≤ `limit`). For `N = 1` this is the classic bound of the two-window
//!   approximation: e.g. `limit` at the very end of one window, and nearly
//!   `limit` more before the end of the next one's first window length.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyState, SlidingWindow, SlidingWindowState, SubWindowCounter};
use floodgate::{Algorithm, Apply, MAX_COUNT, MAX_PERIOD_NANOS, Outcome, Timestamp};
use proptest::prelude::*;

/// The counted history: total cost per sub-window index (`t / sub`).
#[derive(Clone, Debug)]
struct History {
    limit: u64,
    sub: u128,
    n: u128,
    counts: BTreeMap<u128, u128>,
}

impl History {
    fn new(limit: u64, sub: u64, n: u64) -> Self {
        History {
            limit,
            sub: u128::from(sub),
            n: u128::from(n),
            counts: BTreeMap::new(),
        }
    }

    fn count(&self, index: u128) -> u128 {
        self.counts.get(&index).copied().unwrap_or(0)
    }

    /// `estimate · S` at `t`: the window `[t − N·S, t]` covers the `N`
    /// newest sub-windows fully and the one before for `(S − e)/S`.
    fn scaled_estimate(&self, t: u128) -> u128 {
        let current = t / self.sub;
        let e = t % self.sub;
        let first_full = current.saturating_sub(self.n - 1);
        let full: u128 = self
            .counts
            .range(first_full..=current)
            .map(|(_, c)| c)
            .sum();
        let oldest = match current.checked_sub(self.n) {
            Some(i) => self.count(i),
            None => 0,
        };
        oldest * (self.sub - e) + full * self.sub
    }
}

impl Model for History {
    fn limit(&self) -> u64 {
        self.limit
    }
    fn remaining_at(&self, t: u128) -> u64 {
        let cap = u128::from(self.limit) * self.sub;
        (cap.saturating_sub(self.scaled_estimate(t)) / self.sub) as u64
    }
    fn admits_at(&self, t: u128, cost: u64) -> bool {
        self.scaled_estimate(t) + u128::from(cost) * self.sub <= u128::from(self.limit) * self.sub
    }
    fn charge(&mut self, t: u128, cost: u64) {
        *self.counts.entry(t / self.sub).or_default() += u128::from(cost);
    }
}

/// The largest limit the two-window tests use.
const TWO_WINDOW_LIMIT: u64 = 1 << 26;

/// `(limit, sub-window ns, N)`, the window being `N · sub`.
fn params() -> impl Strategy<Value = (u64, u64, u64)> {
    let limit = prop_oneof![6 => 1..=12u64, 2 => 1..=1_000u64, 1 => Just(MAX_COUNT)];
    let sub = prop_oneof![
        2 => Just(SEC),
        4 => 1..=10 * SEC,
        1 => 1..=100u64,
        1 => Just(MAX_PERIOD_NANOS),
    ];
    let n = prop_oneof![4 => Just(1u64), 4 => 2..=8u64, 1 => Just(1024u64)];
    (limit, sub, n).prop_map(|(limit, sub, n)| (limit, sub.min(MAX_PERIOD_NANOS / n), n))
}

fn case() -> impl Strategy<Value = ((u64, u64, u64), Vec<Step>)> {
    params().prop_flat_map(|(limit, sub, n)| {
        let window = sub * n;
        let small = sub / (limit.min(64) + 1);
        (Just((limit, sub, n)), schedule(small, window, limit, 40))
    })
}

fn invariants(admitted: &[(u64, u64)], limit: u64, sub: u64, n: u64) -> Result<(), TestCaseError> {
    // Each admission fitted the estimate recomputed from the admissions alone.
    let mut replay = History::new(limit, sub, n);
    for &(t, c) in admitted {
        prop_assert!(
            replay.admits_at(u128::from(t), c),
            "over-admitted {} at {}",
            c,
            t
        );
        replay.charge(u128::from(t), c);
    }
    // N consecutive aligned sub-windows hold at most `limit`.
    let per = &replay.counts;
    for &i in per.keys() {
        let group: u128 = per.range(i..i + u128::from(n)).map(|(_, c)| c).sum();
        prop_assert!(
            group <= u128::from(limit),
            "{} in sub-windows {}..{}",
            group,
            i,
            i + u128::from(n)
        );
    }
    // Any window-length interval holds at most 2·limit.
    let max = max_in_any_interval(admitted, sub * n);
    prop_assert!(
        max <= 2 * u128::from(limit),
        "{} in one window length, limit {}",
        max,
        limit
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    /// The two-window counter equals the N = 1 model, in every mode. (Its
    /// limit stays below 2^32 / 64, so that even penalty counts of a whole
    /// schedule fit its 32-bit counters.)
    #[test]
    fn sliding_window_matches_model(((limit, sub, _), steps) in case()) {
        let limit = limit.min(TWO_WINDOW_LIMIT);
        let sw = SlidingWindow::new(limit, Duration::from_nanos(sub)).unwrap();
        let model = History::new(limit, sub, 1);
        let (admitted, admitted_pen) = check_all_modes(
            &sw, &model, &steps, AnyState::SlidingWindow(SlidingWindowState::default()),
        )?;
        invariants(&admitted, limit, sub, 1)?;
        invariants(&admitted_pen, limit, sub, 1)?;
    }

    /// The N-sub-window counter equals the model, in every mode.
    #[test]
    fn sub_window_counter_matches_model(((limit, sub, n), steps) in case()) {
        let sw = SubWindowCounter::new(limit, Duration::from_nanos(sub * n), n as u32).unwrap();
        let model = History::new(limit, sub, n);
        let fresh = AnyState::SubWindows(Box::new(sw.fresh()));
        let (admitted, admitted_pen) = check_all_modes(&sw, &model, &steps, fresh)?;
        invariants(&admitted, limit, sub, n)?;
        invariants(&admitted_pen, limit, sub, n)?;
    }

    /// A clock going backwards never makes counts decay early.
    #[test]
    fn sliding_window_clock_backwards(((limit, sub, n), steps) in params().prop_flat_map(|(l, s, n)| {
        (Just((l, s, n)), backwards_schedule(s / (l.min(64) + 1), s * n, l, 40))
    })) {
        let sw = SubWindowCounter::new(limit, Duration::from_nanos(sub * n), n as u32).unwrap();
        check_backwards(&sw, &steps, |a| invariants(a, limit, sub, n))?;
        if n == 1 {
            let limit = limit.min(TWO_WINDOW_LIMIT);
            let sw = SlidingWindow::new(limit, Duration::from_nanos(sub)).unwrap();
            check_backwards(&sw, &steps, |a| invariants(a, limit, sub, 1))?;
        }
    }
}

#[test]
fn doc_example_cloudflare() {
    let sw = SlidingWindow::new(50, Duration::from_secs(60)).unwrap();
    let mut s = sw.fresh();
    assert!(
        sw.decide(&mut s, Timestamp::from_secs(0), 42, Apply::Commit)
            .is_allowed()
    );
    let d = sw.decide(&mut s, Timestamp::from_secs(75), 18, Apply::Commit);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 0));
    // The newest count (18, in [60, 120)) is gone at 180 s.
    assert_eq!(d.reset_after, Duration::from_secs(105));
    let d = sw.decide(&mut s, Timestamp::from_secs(75), 1, Apply::Commit);
    assert_eq!(d.retry_after, Some(Duration::from_nanos(714_285_715)));
}

#[test]
fn two_windows_can_admit_almost_twice_the_limit() {
    // The documented weakness of N = 1: 10 at the end of a window, then 9
    // more within one window length.
    let sw = SlidingWindow::new(10, Duration::from_secs(10)).unwrap();
    let mut s = sw.fresh();
    assert!(
        sw.decide(&mut s, Timestamp::from_millis(9_999), 10, Apply::Commit)
            .is_allowed()
    );
    let mut admitted = 10;
    for ms in 10_000..19_999 {
        if sw
            .decide(&mut s, Timestamp::from_millis(ms), 1, Apply::Commit)
            .is_allowed()
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 19);
}

/// A refund (negative hits) gives back the newest counts first, never
/// below 0, on both counters: what remains rises by what was given back,
/// as far as the counts go.
#[test]
fn refunds_give_back_the_newest_counts_first() {
    let w = SlidingWindow::new(10, Duration::from_secs(60)).unwrap();
    let n = SubWindowCounter::new(10, Duration::from_secs(60), 3).unwrap();
    let at = Timestamp::from_secs;
    let mut sw = w.fresh();
    let mut sn = n.fresh();
    // A fresh key has nothing to give back, and keeps no state.
    assert!(w.decide(&mut sw, at(0), 4, Apply::Refund).is_allowed());
    assert_eq!(w.decide(&mut sw, at(0), 0, Apply::Check).remaining, 10);
    // 6 in the first window, 4 in the second: at 90 s, half of the first
    // counts (3) and all of the second (4).
    assert!(w.decide(&mut sw, at(0), 6, Apply::Commit).is_allowed());
    assert!(w.decide(&mut sw, at(60), 4, Apply::Commit).is_allowed());
    assert_eq!(w.decide(&mut sw, at(90), 0, Apply::Check).remaining, 3);
    // 5 back: the second window's 4, then 1 of the first (5 left, half of
    // which counts).
    let d = w.decide(&mut sw, at(90), 5, Apply::Refund);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 7));
    let d = w.decide(&mut sw, at(90), 100, Apply::Refund);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 10));
    // Sub-windows of 20 s: 3, then 4, then 2; 5 back leaves the 3 less 1.
    for (t, c) in [(0, 3), (20, 4), (40, 2)] {
        assert!(n.decide(&mut sn, at(t), c, Apply::Commit).is_allowed());
    }
    let d = n.decide(&mut sn, at(45), 7, Apply::Refund);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 8));
    // What is left (2, of the first sub-window) slides out by 80 s.
    assert_eq!(n.decide(&mut sn, at(60), 0, Apply::Check).remaining, 8);
    assert_eq!(n.decide(&mut sn, at(80), 0, Apply::Check).remaining, 10);
}
