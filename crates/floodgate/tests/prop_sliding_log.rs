//! The sliding log against a model that simply remembers every admitted (or,
//! in penalty mode, charged) request with its time and cost, forever.

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyState, SlidingLog};
use floodgate::{Algorithm, Apply, MAX_PERIOD_NANOS, Outcome, Timestamp};
use proptest::prelude::*;

/// Every counted request, oldest first. A request at `a` counts while
/// `t < a + window`.
#[derive(Clone, Debug)]
struct Log {
    limit: u64,
    window: u128,
    entries: Vec<(u128, u64)>,
}

impl Log {
    fn new(limit: u64, window: u64) -> Self {
        Log {
            limit,
            window: u128::from(window),
            entries: Vec::new(),
        }
    }

    fn count_at(&self, t: u128) -> u128 {
        self.entries
            .iter()
            .filter(|&&(a, _)| a <= t && t < a + self.window)
            .map(|&(_, c)| u128::from(c))
            .sum()
    }
}

impl Model for Log {
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
        self.entries.push((t, cost));
    }
}

fn params() -> impl Strategy<Value = (u64, u64)> {
    let limit = prop_oneof![6 => 1..=12u64, 2 => 1..=300u64, 1 => Just(1_000_000u64)];
    let window = prop_oneof![
        2 => Just(SEC),
        2 => Just(900 * SEC),
        4 => 1..=10 * SEC,
        1 => 1..=100u64,
        1 => Just(MAX_PERIOD_NANOS),
    ];
    (limit, window)
}

/// Costs are capped so that the log of a 1 000 000 limit stays small.
fn case() -> impl Strategy<Value = ((u64, u64), Vec<Step>)> {
    params().prop_flat_map(|(limit, window)| {
        let small = window / (limit.min(64) + 1);
        let costs = limit.min(1_000);
        (Just((limit, window)), schedule(small, window, costs, 40))
    })
}

/// At most `limit` admitted in every interval `[t, t + window)`.
fn per_window(admitted: &[(u64, u64)], limit: u64, window: u64) -> Result<(), TestCaseError> {
    let max = max_in_any_interval(admitted, window);
    prop_assert!(
        max <= u128::from(limit),
        "{} admitted within one window, limit {}",
        max,
        limit
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    /// Every decision equals the model's (plain, `Penalize`, `AnyLimit` with
    /// and without penalty; penalty mode keeping only the newest `limit`
    /// entries decides exactly like the full log); at most `limit` in any
    /// window.
    #[test]
    fn sliding_log_matches_model(((limit, window), steps) in case()) {
        let log = SlidingLog::new(limit, Duration::from_nanos(window)).unwrap();
        let model = Log::new(limit, window);
        let (admitted, admitted_pen) =
            check_all_modes(&log, &model, &steps, AnyState::SlidingLog(Box::default()))?;
        per_window(&admitted, limit, window)?;
        per_window(&admitted_pen, limit, window)?;
    }

    /// A clock going backwards never makes a counted request leave early.
    #[test]
    fn sliding_log_clock_backwards(((limit, window), steps) in params().prop_flat_map(|(l, w)| {
        (Just((l, w)), backwards_schedule(w / (l.min(64) + 1), w, l.min(1_000), 40))
    })) {
        let log = SlidingLog::new(limit, Duration::from_nanos(window)).unwrap();
        check_backwards(&log, &steps, |a| per_window(a, limit, window))?;
    }
}

#[test]
fn doc_example_login_attempts() {
    let log = SlidingLog::new(5, Duration::from_secs(900)).unwrap();
    let mut s = log.fresh();
    for i in 0..5 {
        assert!(
            log.decide(&mut s, Timestamp::from_secs(i * 60), 1, Apply::Commit)
                .is_allowed()
        );
    }
    let d = log.decide(&mut s, Timestamp::from_secs(300), 1, Apply::Commit);
    assert_eq!(d.retry_after, Some(Duration::from_secs(600)));
    assert_eq!(d.reset_after, Duration::from_secs(840));
    // Three more need the three oldest gone: the third left at 120 + 900.
    let d = log.decide(&mut s, Timestamp::from_secs(300), 3, Apply::Check);
    assert_eq!(d.retry_after, Some(Duration::from_secs(720)));
    assert!(
        log.decide(&mut s, Timestamp::from_secs(900), 1, Apply::Commit)
            .is_allowed()
    );
}

#[test]
fn penalty_keeps_the_newest_entries() {
    let log = floodgate::Penalize(SlidingLog::new(2, Duration::from_secs(10)).unwrap());
    let mut s = log.fresh();
    for t in [0, 1, 2, 3] {
        log.decide(&mut s, Timestamp::from_secs(t), 1, Apply::Commit);
    }
    assert_eq!(Vec::from(s.clone()), vec![2 * SEC, 3 * SEC]);
    // Denied until the request at 2 s has left, like the full log.
    let d = log.decide(&mut s, Timestamp::from_secs(4), 1, Apply::Check);
    assert_eq!(
        (d.outcome, d.retry_after),
        (Outcome::Denied, Some(Duration::from_secs(8)))
    );
}
