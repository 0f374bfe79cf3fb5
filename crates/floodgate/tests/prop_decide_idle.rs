//! `decide_idle`, which the store calls on every decision, against its
//! definition: `decide` followed by `idle_at` on the resulting state. GCRA
//! and the shaper compute the idle instant together with the decision (and
//! GCRA takes a 64-bit path when every quantity fits), so both are driven
//! across their whole ranges: huge bursts, timestamps near the end of time,
//! states past 64 bits, costs of 0 and above the burst, every apply mode.

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{Gcra, GcraState, NginxRate, Shaper, ShaperDelay};
use floodgate::{Algorithm, Apply, MAX_COUNT, MAX_PERIOD_NANOS, Timestamp};
use proptest::prelude::*;

fn apply_any() -> impl Strategy<Value = Apply> {
    prop_oneof![
        Just(Apply::Check),
        Just(Apply::Commit),
        Just(Apply::Force),
        Just(Apply::Rejected),
    ]
}

/// Timestamps anywhere, with weight near 0 and near `u64::MAX`.
fn instant() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0..=100 * SEC,
        2 => 1_700_000_000 * SEC..=1_700_000_100 * SEC,
        1 => u64::MAX - 100 * SEC..=u64::MAX,
        1 => any::<u64>(),
    ]
}

fn cost_any() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..=3u64,
        1 => 0..=2_000u64,
        1 => Just(MAX_COUNT),
        1 => any::<u64>(),
    ]
}

fn steps() -> impl Strategy<Value = Vec<(u64, u64, Apply)>> {
    prop::collection::vec((instant(), cost_any(), apply_any()), 1..40)
}

/// Runs `steps` through `decide_idle` and through `decide` + `idle_at` from
/// the same state: same decisions, same states, same idle instants.
fn same<A: Algorithm>(
    alg: &A,
    mut s: A::State,
    steps: &[(u64, u64, Apply)],
) -> Result<(), TestCaseError>
where
    A::State: Clone + PartialEq + std::fmt::Debug,
{
    let mut r = s.clone();
    for &(now, cost, apply) in steps {
        let now = Timestamp::from_nanos(now);
        let (d, idle) = alg.decide_idle(&mut s, now, cost, apply);
        let e = alg.decide(&mut r, now, cost, apply);
        prop_assert_eq!(d, e, "at {:?} cost {} {:?}", now, cost, apply);
        prop_assert_eq!(&s, &r);
        prop_assert_eq!(idle, alg.idle_at(&r, now), "at {:?} state {:?}", now, r);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn gcra_decide_idle_is_decide_then_idle_at(
        count in prop_oneof![3 => 1..=12u64, 1 => 1..=MAX_COUNT, 1 => Just(MAX_COUNT)],
        period in prop_oneof![
            2 => Just(SEC), 1 => Just(1u64), 1 => Just(3u64), 2 => 1..=10 * SEC,
            1 => Just(MAX_PERIOD_NANOS),
        ],
        burst in prop_oneof![3 => 1..=12u64, 1 => 1..=MAX_COUNT, 1 => Just(MAX_COUNT)],
        tat in prop_oneof![
            2 => Just(0u128),
            2 => 0..=u128::from(u64::MAX),
            1 => u128::from(u64::MAX) - 1_000..=u128::from(u64::MAX) + 1_000,
            1 => any::<u128>(),
        ],
        steps in steps(),
    ) {
        let gcra = Gcra::new(count, Duration::from_nanos(period), burst).unwrap();
        same(&gcra, GcraState::from_ticks(tat), &steps)?;
    }

    #[test]
    fn shaper_decide_idle_is_decide_then_idle_at(
        rate in prop_oneof![
            2 => (1..=1_000u64).prop_map(NginxRate::PerSecond),
            1 => (1..=1_000u64).prop_map(NginxRate::PerMinute),
            1 => Just(NginxRate::PerSecond(MAX_COUNT)),
        ],
        burst in prop_oneof![3 => 0..=20u64, 1 => 0..=MAX_COUNT],
        delay in prop_oneof![
            Just(ShaperDelay::Queue),
            Just(ShaperDelay::NoDelay),
            (0..=20u64).prop_map(ShaperDelay::After),
        ],
        steps in steps(),
    ) {
        let shaper = Shaper::new(rate, burst, delay).unwrap();
        same(&shaper, shaper.fresh(), &steps)?;
    }
}
