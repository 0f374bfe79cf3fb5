//! Bad input never panics: every constructor, over the whole range of its
//! parameters, returns a limit or a `ConfigError` naming the parameter at
//! fault; and every valid limit decides on any time and any cost (overflow
//! checks are on in the test profile, so an overflow would panic).

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, LimitKind, Limits, NginxRate, Shaper, ShaperDelay,
    SlidingLog, SlidingWindow, SubWindowCounter,
};
use floodgate::{
    Algorithm, Apply, ConfigError, MAX_COUNT, MAX_PERIOD_NANOS, Outcome, Penalize, Store,
    StoreConfig, Timestamp,
};
use proptest::prelude::*;

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(MAX_COUNT),
        Just(MAX_COUNT + 1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(1_000_000u64),
        Just(1_000_001u64),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        0..=100u64,
        any::<u64>(),
        (0..64u32).prop_map(|b| 1u64 << b),
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_nanos(MAX_PERIOD_NANOS)),
        Just(Duration::from_nanos(MAX_PERIOD_NANOS + 1)),
        Just(Duration::from_nanos(u64::MAX)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        any::<u64>().prop_map(Duration::from_nanos),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (1..=1_000u64).prop_map(Duration::from_secs),
    ]
}

fn count_ok(v: u64) -> bool {
    (1..=MAX_COUNT).contains(&v)
}

fn period_ok(d: Duration) -> bool {
    (1..=u128::from(MAX_PERIOD_NANOS)).contains(&d.as_nanos())
}

/// `result` is `Ok` iff every parameter is valid, and otherwise names one
/// that is not. `params` lists `(field, valid)`.
fn judged<T>(
    result: Result<T, ConfigError>,
    params: &[(&str, bool)],
) -> Result<Option<T>, TestCaseError> {
    let all_valid = params.iter().all(|&(_, ok)| ok);
    match result {
        Ok(t) => {
            prop_assert!(all_valid, "accepted an invalid parameter: {:?}", params);
            Ok(Some(t))
        }
        Err(e) => {
            prop_assert!(
                params.iter().any(|&(f, ok)| f == e.field() && !ok),
                "error {:?} does not name an invalid parameter of {:?}",
                e,
                params
            );
            prop_assert!(e.to_string().contains(e.field()));
            Ok(None)
        }
    }
}

// ---------------------------------------------------------------------------
// Valid limits with extreme parameters, and any input
// ---------------------------------------------------------------------------

fn extreme_count() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1u64), Just(MAX_COUNT), 1..=MAX_COUNT, 1..=10u64]
}

fn extreme_period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(MAX_PERIOD_NANOS),
        1..=MAX_PERIOD_NANOS,
        Just(SEC)
    ]
}

fn extreme_limit() -> impl Strategy<Value = AnyLimit> {
    let rate = prop_oneof![
        extreme_count().prop_map(NginxRate::PerSecond),
        extreme_count().prop_map(NginxRate::PerMinute),
    ];
    let delay = prop_oneof![
        Just(ShaperDelay::Queue),
        Just(ShaperDelay::NoDelay),
        prop_oneof![Just(0u64), Just(MAX_COUNT), 0..=MAX_COUNT].prop_map(ShaperDelay::After),
    ];
    prop_oneof![
        (extreme_count(), extreme_period(), extreme_count()).prop_map(|(c, p, b)| Gcra::new(
            c,
            Duration::from_nanos(p),
            b
        )
        .unwrap()
        .into()),
        (extreme_count(), extreme_period()).prop_map(|(l, w)| FixedWindow::new(
            l,
            Duration::from_nanos(w)
        )
        .unwrap()
        .into()),
        (
            prop_oneof![Just(1u64), Just(1_000u64), Just(1_000_000u64), 1..=1_000u64],
            extreme_period()
        )
            .prop_map(|(l, w)| SlidingLog::new(l, Duration::from_nanos(w)).unwrap().into()),
        (
            prop_oneof![
                Just(1u64),
                Just(u64::from(u32::MAX)),
                1..=u64::from(u32::MAX)
            ],
            extreme_period()
        )
            .prop_map(|(l, w)| SlidingWindow::new(l, Duration::from_nanos(w))
                .unwrap()
                .into()),
        (
            extreme_count(),
            prop_oneof![Just(1u32), Just(1024u32), 1..=1024u32],
            extreme_period()
        )
            .prop_map(|(l, n, w)| {
                let sub = (w / u64::from(n)).max(1);
                SubWindowCounter::new(l, Duration::from_nanos(sub * u64::from(n)), n)
                    .unwrap()
                    .into()
            }),
        (
            rate,
            prop_oneof![Just(0u64), Just(MAX_COUNT), 0..=MAX_COUNT],
            delay
        )
            .prop_map(|(r, b, d)| Shaper::new(r, b, d).unwrap().into()),
        extreme_count().prop_map(|m| Concurrency::new(m).unwrap().into()),
    ]
    .prop_flat_map(|l: AnyLimit| {
        (Just(l.clone()), Just(l.with_penalty(true))).prop_map(|(a, b)| (a, b))
    })
    .prop_flat_map(|(a, b)| prop_oneof![Just(a), Just(b)])
}

fn any_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(MAX_PERIOD_NANOS),
        any::<u64>(),
        (0..64u32).prop_map(|b| 1u64 << b),
    ]
}

fn any_request() -> impl Strategy<Value = (u64, u64, Apply)> {
    let cost = prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        Just(MAX_COUNT),
        Just(1_000_000u64),
        any::<u64>(),
        1..=1_000u64,
    ];
    (any_time(), cost, apply())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn gcra_constructors(count in any_u64(), period in any_duration(), burst in any_u64()) {
        let (c, p, b) = (count_ok(count), period_ok(period), count_ok(burst));
        judged(Gcra::new(count, period, burst), &[("count", c), ("period", p), ("burst", b)])?;
        judged(Gcra::token_bucket(burst, count, period), &[("capacity", b), ("refill", c), ("per", p)])?;
        judged(Gcra::leaky_meter(burst, count, period), &[("capacity", b), ("leak", c), ("per", p)])?;
        judged(Gcra::per_second(count), &[("count", c)])?;
        judged(Gcra::per_minute(count), &[("count", c)])?;
        judged(Gcra::per_hour(count), &[("count", c)])?;
        if let Ok(g) = Gcra::new(1, Duration::from_secs(1), 1) {
            judged(g.with_burst(burst), &[("burst", b)])?;
        }
    }

    #[test]
    fn window_constructors(limit in any_u64(), window in any_duration(), n in prop_oneof![Just(0u32), Just(1u32), Just(1024u32), Just(1025u32), Just(u32::MAX), any::<u32>(), 1..=16u32]) {
        let (l, w) = (count_ok(limit), period_ok(window));
        judged(FixedWindow::new(limit, window), &[("limit", l), ("window", w)])?;
        judged(SlidingLog::new(limit, window), &[("limit", l && limit <= 1_000_000), ("window", w)])?;
        // The two-window counter may also cap its limit lower (32-bit counts).
        match SlidingWindow::new(limit, window) {
            Err(e) if e.field() == "limit" && l && limit > u64::from(u32::MAX) => {}
            other => { judged(other, &[("limit", l), ("window", w)])?; }
        }
        let divides = window.as_nanos() % u128::from(n.max(1)) == 0;
        judged(
            SubWindowCounter::new(limit, window, n),
            &[("limit", l), ("window", w), ("sub_windows", (1..=1024).contains(&n) && divides)],
        )?;
    }

    #[test]
    fn shaper_concurrency_and_set_constructors(
        n in any_u64(),
        per_minute in any::<bool>(),
        burst in any_u64(),
        delay in prop_oneof![Just(ShaperDelay::Queue), Just(ShaperDelay::NoDelay), any_u64().prop_map(ShaperDelay::After)],
        members in 0..3usize,
    ) {
        let rate = if per_minute { NginxRate::PerMinute(n) } else { NginxRate::PerSecond(n) };
        let delay_ok = match delay { ShaperDelay::After(d) => d <= MAX_COUNT, _ => true };
        judged(
            Shaper::new(rate, burst, delay),
            &[("rate", count_ok(n)), ("burst", burst <= MAX_COUNT), ("delay", delay_ok)],
        )?;
        judged(Concurrency::new(n), &[("max", count_ok(n))])?;
        let set = vec![FixedWindow::new(1, Duration::from_secs(1)).unwrap(); members];
        judged(Limits::new(set), &[("limits", members > 0)])?;
    }

    /// Capacities up to 2^63 (see `store_constructor_full_range`).
    #[test]
    fn store_constructor(
        capacity in prop_oneof![Just(0usize), Just(1usize), Just(1usize << 63), 0..=1usize << 63, 0..=10_000usize],
        shards in prop_oneof![Just(0usize), Just(1usize), Just(1usize << 16), Just((1usize << 16) + 1), Just(usize::MAX), (0..64u32).prop_map(|b| 1usize << b), 0..=100usize],
    ) {
        judged(
            Store::<String, u128>::new(StoreConfig { capacity, shards, ..StoreConfig::default() }),
            &[("capacity", capacity > 0), ("shards", shards.is_power_of_two() && shards <= 1 << 16)],
        )?;
    }

    /// Any valid limit, any time (back and forth, up to `u64::MAX`), any
    /// cost, any apply: no panic, and a consistent answer.
    #[test]
    fn decide_never_panics(limit in extreme_limit(), requests in prop::collection::vec(any_request(), 1..24)) {
        let mut s = limit.fresh();
        for (now, cost, apply) in requests {
            let now = Timestamp::from_nanos(now);
            let d = limit.decide(&mut s, now, cost, apply);
            prop_assert_eq!(cost > d.limit, d.outcome == Outcome::Never);
            // A check is allowed, except on a fixed window or a bucket that
            // a forced charge took past its limit (debt).
            let counts_over = matches!(limit.kind(), LimitKind::FixedWindow(_) | LimitKind::Gcra(_));
            if cost == 0 && !counts_over {
                prop_assert_eq!(d.outcome, Outcome::Allowed);
            }
            let _ = limit.idle_at(&s, now);
            if limit.is_concurrency() && apply != Apply::Check {
                limit.release(&mut s, cost);
            }
        }
    }

    /// The same through the wrappers and sets.
    #[test]
    fn sets_never_panic(
        a in extreme_limit(),
        b in extreme_limit(),
        requests in prop::collection::vec(any_request(), 1..16),
    ) {
        let pair = (a.clone(), Penalize(b.clone()));
        let set = Limits::new(vec![a, b]).unwrap();
        let (mut s, mut t) = (pair.fresh(), set.fresh());
        for (now, cost, apply) in requests {
            let now = Timestamp::from_nanos(now);
            pair.decide(&mut s, now, cost, apply);
            set.decide(&mut t, now, cost, apply);
            let _ = (pair.idle_at(&s, now), set.idle_at(&t, now));
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// A key's state built under one limit and then decided under another
    /// (a limit reconfigured while the store keeps its keys): no panic.
    #[test]
    fn foreign_states_never_panic(
        old in extreme_limit(),
        new in extreme_limit(),
        before in prop::collection::vec(any_request(), 1..12),
        after in prop::collection::vec(any_request(), 1..12),
    ) {
        let mut s = old.fresh();
        for (now, cost, apply) in before {
            old.decide(&mut s, Timestamp::from_nanos(now), cost, apply);
        }
        for (now, cost, apply) in after {
            let now = Timestamp::from_nanos(now);
            let d = new.decide(&mut s, now, cost, apply);
            prop_assert_eq!(cost > d.limit, d.outcome == Outcome::Never);
            let _ = new.idle_at(&s, now);
        }
    }
}

/// `Store::new` over the whole `usize` range, including capacities above
/// 2^63 (whose next power of two does not exist): the shards' capacities
/// add up to `capacity`.
#[test]
fn store_constructor_full_range() {
    for capacity in [(1usize << 63) + 1, usize::MAX - 1, usize::MAX] {
        let store = Store::<String, u128>::new(StoreConfig {
            capacity,
            shards: 64,
            ..StoreConfig::default()
        })
        .unwrap();
        assert!(store.capacity() >= capacity);
    }
}

/// A concurrency state held near `u64::MAX` (only a hand-made one can be):
/// a decision on it denies, never overflows.
#[test]
fn a_concurrency_state_near_the_top_denies() {
    use floodgate::Algorithm;
    use floodgate::algorithms::Concurrency;
    let limit = Concurrency::new(10).unwrap();
    let mut held = u64::MAX - 1;
    let d = limit.decide(&mut held, Timestamp::ZERO, 5, Apply::Commit);
    assert_eq!(d.outcome, floodgate::Outcome::Denied);
    assert_eq!(held, u64::MAX - 1);
}
