//! The fixed window counter against a model that keeps the count of every
//! epoch-aligned window it has seen.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyState, FixedWindow, WindowState};
use floodgate::{Algorithm, Apply, MAX_COUNT, MAX_PERIOD_NANOS, Outcome, Timestamp};
use proptest::prelude::*;

/// Counts per window index (`t / window`).
#[derive(Clone, Debug)]
struct Windows {
    limit: u64,
    window: u128,
    counts: BTreeMap<u128, u128>,
}

impl Windows {
    fn new(limit: u64, window: u64) -> Self {
        Windows {
            limit,
            window: u128::from(window),
            counts: BTreeMap::new(),
        }
    }

    fn count_at(&self, t: u128) -> u128 {
        self.counts.get(&(t / self.window)).copied().unwrap_or(0)
    }
}

impl Model for Windows {
    fn limit(&self) -> u64 {
        self.limit
    }
    fn remaining_at(&self, t: u128) -> u64 {
        u128::from(self.limit).saturating_sub(self.count_at(t)) as u64
    }
    fn admits_at(&self, t: u128, cost: u64) -> bool {
        self.count_at(t) + u128::from(cost) <= u128::from(self.limit)
    }
    fn charge(&mut self, t: u128, cost: u64) {
        *self.counts.entry(t / self.window).or_default() += u128::from(cost);
    }
    fn counts_over(&self) -> bool {
        true
    }
}

fn params() -> impl Strategy<Value = (u64, u64)> {
    let limit = prop_oneof![6 => 1..=12u64, 2 => 1..=1_000u64, 1 => Just(MAX_COUNT)];
    let window = prop_oneof![
        2 => Just(SEC),
        2 => Just(60 * SEC),
        4 => 1..=10 * SEC,
        1 => 1..=100u64,
        1 => Just(MAX_PERIOD_NANOS),
    ];
    (limit, window)
}

fn case() -> impl Strategy<Value = ((u64, u64), Vec<Step>)> {
    params().prop_flat_map(|(limit, window)| {
        let small = window / (limit.min(64) + 1);
        (Just((limit, window)), schedule(small, window, limit, 40))
    })
}

/// At most `limit` admitted in every epoch-aligned window.
fn per_window(admitted: &[(u64, u64)], limit: u64, window: u64) -> Result<(), TestCaseError> {
    let mut per: BTreeMap<u64, u128> = BTreeMap::new();
    for &(t, c) in admitted {
        *per.entry(t / window).or_default() += u128::from(c);
    }
    for (w, n) in per {
        prop_assert!(
            n <= u128::from(limit),
            "window {} admitted {} > {}",
            w,
            n,
            limit
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(160))]

    /// Every decision equals the model's (plain, `Penalize`, `AnyLimit` with
    /// and without penalty); at most `limit` per window.
    #[test]
    fn fixed_window_matches_model(((limit, window), steps) in case()) {
        let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
        let model = Windows::new(limit, window);
        let (admitted, admitted_pen) =
            check_all_modes(&fw, &model, &steps, AnyState::FixedWindow(WindowState::default()))?;
        per_window(&admitted, limit, window)?;
        per_window(&admitted_pen, limit, window)?;
    }

    /// A clock going backwards never opens a window early.
    #[test]
    fn fixed_window_clock_backwards(((limit, window), steps) in params().prop_flat_map(|(l, w)| {
        (Just((l, w)), backwards_schedule(w / (l.min(64) + 1), w, l, 40))
    })) {
        let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
        check_backwards(&fw, &steps, |a| per_window(a, limit, window))?;
    }
}

#[test]
fn doc_example_two_per_minute() {
    let fw = FixedWindow::new(2, Duration::from_secs(60)).unwrap();
    let mut s = fw.fresh();
    let t = Timestamp::from_secs(125);
    let d = fw.decide(&mut s, t, 0, Apply::Commit);
    assert_eq!(
        (d.outcome, d.remaining, d.reset_after),
        (Outcome::Allowed, 2, Duration::ZERO)
    );
    let d = fw.decide(&mut s, t, 2, Apply::Commit);
    assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(55)));
    let d = fw.decide(&mut s, t, 1, Apply::Commit);
    assert_eq!(d.retry_after, Some(Duration::from_secs(55)));
    assert!(
        fw.decide(&mut s, Timestamp::from_secs(179), 1, Apply::Commit)
            .is_denied()
    );
    assert!(
        fw.decide(&mut s, Timestamp::from_secs(180), 2, Apply::Commit)
            .is_allowed()
    );
}

#[test]
fn penalty_counts_denied_requests() {
    let fw = floodgate::Penalize(FixedWindow::new(2, Duration::from_secs(10)).unwrap());
    let mut s = fw.fresh();
    let t = Timestamp::from_secs(3);
    for _ in 0..3 {
        fw.decide(&mut s, t, 1, Apply::Commit);
    }
    assert_eq!(s.count(), 3);
    // Cost 0 peeks: over the limit until the window ends.
    let d = fw.decide(&mut s, t, 0, Apply::Commit);
    assert_eq!(
        (d.outcome, d.remaining, d.retry_after),
        (Outcome::Denied, 0, Some(Duration::from_secs(7)))
    );
    assert_eq!(s.count(), 3);
    // A cost no window admits still counts when forced.
    let d = fw.decide(&mut s, t, 5, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Never);
    assert_eq!(s.count(), 8);
    // At the limit exactly, a peek passes.
    let mut s = fw.fresh();
    fw.decide(&mut s, t, 2, Apply::Commit);
    let d = fw.decide(&mut s, t, 0, Apply::Commit);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Charges and refunds (Envoy's negative hits) against per-window
    /// counts that a refund lowers and floors at 0: the count never goes
    /// below nothing, a refund is always allowed and reports what remains,
    /// and a refund in a new window gives back nothing of the last.
    #[test]
    fn refunds_floor_the_count_at_zero(
        (limit, window) in (1..=20u64, 1..=10 * SEC),
        steps in proptest::collection::vec((0..3 * SEC, 0..30u64, any::<bool>()), 1..60),
    ) {
        let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
        let mut s = fw.fresh();
        let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
        let mut t = 0u64;
        for (dt, cost, refund) in steps {
            t += dt;
            let count = counts.entry(t / window).or_default();
            let d = if refund {
                let d = fw.decide(&mut s, Timestamp::from_nanos(t), cost, Apply::Refund);
                *count = count.saturating_sub(cost);
                prop_assert!(d.is_allowed());
                d
            } else {
                let d = fw.decide(&mut s, Timestamp::from_nanos(t), cost, Apply::Force);
                *count = count.saturating_add(cost);
                d
            };
            prop_assert_eq!(d.remaining, limit.saturating_sub(*count), "at {} ({:?})", t, d);
        }
    }
}

#[test]
fn a_refund_gives_back_units_and_never_creates_a_window() {
    let fw = FixedWindow::new(5, Duration::from_secs(60)).unwrap();
    let mut s = fw.fresh();
    let t = Timestamp::from_secs(120);
    let d = fw.decide(&mut s, t, 3, Apply::Refund);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 5));
    assert_eq!(
        s,
        WindowState::default(),
        "nothing to give back: no window stored"
    );
    assert!(fw.decide(&mut s, t, 5, Apply::Commit).is_allowed());
    assert!(fw.decide(&mut s, t, 1, Apply::Commit).is_denied());
    let d = fw.decide(&mut s, t, 2, Apply::Refund);
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 2));
    assert!(fw.decide(&mut s, t, 2, Apply::Commit).is_allowed());
    let d = fw.decide(&mut s, t, 100, Apply::Refund);
    assert_eq!((d.remaining, s.count()), (5, 0));
    // The next window's refund leaves the last window's count alone.
    assert!(fw.decide(&mut s, t, 4, Apply::Commit).is_allowed());
    let d = fw.decide(&mut s, Timestamp::from_secs(180), 1, Apply::Refund);
    assert_eq!((d.remaining, s.count()), (5, 4));
}
