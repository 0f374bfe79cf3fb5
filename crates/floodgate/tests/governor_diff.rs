//! GCRA against governor 0.10.4, the reference implementation in Rust: a
//! direct (unkeyed) governor limiter on its fake clock and our GCRA see the
//! same schedule; every allow/deny, every "can never fit", and every wait
//! must agree to the nanosecond.

use crate::common;

use std::num::NonZeroU32;
use std::time::Duration;

use common::*;
use floodgate::algorithms::Gcra;
use floodgate::{Algorithm, Apply, Decision, Outcome, Timestamp};
use governor::clock::{Clock, FakeRelativeClock};
use governor::{Quota, RateLimiter};
use proptest::prelude::*;

/// What governor said, in our terms.
#[derive(Debug, PartialEq)]
enum Said {
    Allowed,
    Denied(Duration),
    InsufficientCapacity,
}

fn ours(d: &Decision) -> Said {
    match d.outcome {
        Outcome::Allowed => Said::Allowed,
        Outcome::Denied => Said::Denied(d.retry_after.expect("a denial has a retry_after")),
        Outcome::Never => Said::InsufficientCapacity,
        Outcome::Delayed(_) => unreachable!("GCRA never delays"),
    }
}

/// Runs `steps` (gap in ns, cost, use `check` rather than `check_n(1)`)
/// through both limiters.
fn compare(quota: Quota, gcra: &Gcra, steps: &[(u64, u32, bool)]) -> Result<(), TestCaseError> {
    let clock = FakeRelativeClock::default();
    let gov = RateLimiter::direct_with_clock(quota, clock.clone());
    let mut tat = gcra.fresh();
    let mut now = 0u64;
    for &(gap, cost, single) in steps {
        clock.advance(Duration::from_nanos(gap));
        now += gap;
        let at = clock.now();
        let said = if cost == 1 && single {
            match gov.check() {
                Ok(()) => Said::Allowed,
                Err(not_until) => Said::Denied(not_until.wait_time_from(at)),
            }
        } else {
            match gov.check_n(NonZeroU32::new(cost).unwrap()) {
                Ok(Ok(())) => Said::Allowed,
                Ok(Err(not_until)) => Said::Denied(not_until.wait_time_from(at)),
                Err(_) => Said::InsufficientCapacity,
            }
        };
        let d = gcra.decide(
            &mut tat,
            Timestamp::from_nanos(now),
            u64::from(cost),
            Apply::Commit,
        );
        prop_assert_eq!(ours(&d), said, "at {} ns, cost {}: {:?}", now, cost, d);
    }
    Ok(())
}

fn steps(t: u64, burst: u32) -> impl Strategy<Value = Vec<(u64, u32, bool)>> {
    let gap = gap(t, t.saturating_mul(u64::from(burst))).prop_map(|g| g.min(1 << 44));
    let cost = prop_oneof![
        6 => Just(1u32),
        3 => 1..=burst,
        1 => burst..=burst.saturating_mul(2).max(burst + 1),
    ];
    prop::collection::vec((gap, cost, any::<bool>()), 1..80)
}

proptest! {
    #![proptest_config(config(256))]

    /// `Quota::with_period(T).allow_burst(B)` is `Gcra::new(1, T, B)`.
    #[test]
    fn gcra_matches_governor(
        (t, burst, steps) in (
            prop_oneof![1..=1_000u64, 1..=10 * MS, 1..=10 * SEC, Just(SEC), Just(3u64)],
            prop_oneof![1..=10u32, 1..=1_000u32],
        ).prop_flat_map(|(t, b)| (Just(t), Just(b), steps(t, b)))
    ) {
        let quota = Quota::with_period(Duration::from_nanos(t))
            .unwrap()
            .allow_burst(NonZeroU32::new(burst).unwrap());
        let gcra = Gcra::new(1, Duration::from_nanos(t), u64::from(burst)).unwrap();
        compare(quota, &gcra, &steps)?;
    }

    /// `Quota::per_second(n)` is `Gcra::per_second(n)` whenever 1 s is a
    /// whole number of nanoseconds per request (governor truncates the
    /// interval to whole nanoseconds; we keep it exact).
    #[test]
    fn per_second_matches_governor(
        (n, steps) in prop::sample::select(vec![1u32, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100, 125, 1000])
            .prop_flat_map(|n| (Just(n), steps((SEC / u64::from(n)).max(1), n)))
    ) {
        let quota = Quota::per_second(NonZeroU32::new(n).unwrap());
        compare(quota, &Gcra::per_second(u64::from(n)).unwrap(), &steps)?;
    }
}

#[test]
fn governor_and_gcra_agree_on_a_simple_burst() {
    let quota = Quota::with_period(Duration::from_millis(100))
        .unwrap()
        .allow_burst(NonZeroU32::new(3).unwrap());
    let gcra = Gcra::new(1, Duration::from_millis(100), 3).unwrap();
    let steps = [
        (0, 1, true),
        (0, 1, true),
        (0, 1, true),
        (0, 1, true),
        (50 * MS, 1, true),
        (50 * MS, 2, false),
        (100 * MS, 4, false),
    ];
    compare(quota, &gcra, &steps).unwrap();
}
