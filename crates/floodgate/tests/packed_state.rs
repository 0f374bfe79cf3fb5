//! [`PackedState`], the 16-byte form of [`AnyState`] that the policy's
//! in-memory store keeps: every state of every kind packs and unpacks
//! exactly, at the extremes of each field; inline exactly up to the
//! documented bounds and boxed beyond; a [`Packed`] limit decides as its
//! limit does on the unpacked state (decisions, states, idle instants),
//! blocks, penalties and leases included; a boxed state is cloned deeply
//! and unboxed as soon as it fits again.

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{
    AnyLimit, AnyState, Concurrency, FixedWindow, Gcra, GcraState, HeldBy, NginxRate, Packed,
    PackedState, Shaper, ShaperDelay, SlidingLog, SlidingWindow, SlidingWindowState,
    SubWindowCounter, WindowState,
};
use floodgate::{Algorithm, Apply, Timestamp};
use proptest::prelude::*;

/// A value anywhere in `u64`, with weight on both ends and on the
/// thresholds of the inline layout (2^28, 2^56).
fn word() -> impl Strategy<Value = u64> {
    let near = |b: u32| (1u64 << b) - 2..=(1u64 << b) + 1;
    prop_oneof![
        0..=3u64,
        near(28),
        near(56),
        u64::MAX - 3..=u64::MAX,
        any::<u64>(),
    ]
}

fn count32() -> impl Strategy<Value = u32> {
    prop_oneof![
        0..=3u32,
        (1u32 << 28) - 2..=(1u32 << 28) + 1,
        u32::MAX - 1..=u32::MAX,
        any::<u32>()
    ]
}

fn ticks() -> impl Strategy<Value = u128> {
    prop_oneof![
        word().prop_map(u128::from),
        (word(), word()).prop_map(|(hi, lo)| u128::from(hi) << 64 | u128::from(lo)),
        ((1u128 << 120) - 2..=(1u128 << 120) + 1),
        u128::MAX - 1..=u128::MAX,
    ]
}

/// A state of every kind the inline layout holds, anywhere in its range;
/// the boxed kinds are the decisions' (below).
fn state() -> impl Strategy<Value = AnyState> {
    let at = |n: u64| Timestamp::from_nanos(n);
    prop_oneof![
        Just(AnyState::Fresh),
        ticks().prop_map(|t| AnyState::Gcra(GcraState::from_ticks(t))),
        (word(), word()).prop_map(move |(s, c)| AnyState::FixedWindow(WindowState::new(at(s), c))),
        (word(), count32(), count32()).prop_map(move |(s, p, c)| {
            AnyState::SlidingWindow(SlidingWindowState::new(at(s), p, c))
        }),
        word().prop_map(AnyState::Concurrency),
        word().prop_map(AnyState::Blocked),
    ]
}

/// Whether `state` exceeds the inline layout (see `PackedState`'s docs).
fn too_large(state: &AnyState) -> bool {
    match state {
        AnyState::Gcra(s) => s.ticks() >> 120 != 0,
        AnyState::FixedWindow(s) => s.count() >> 56 != 0,
        AnyState::SlidingWindow(s) => s.counts().iter().any(|c| c >> 28 != 0),
        _ => false,
    }
}

proptest! {
    #![proptest_config(config(2_000))]

    /// Every state packs and unpacks to itself, inline within the bounds.
    #[test]
    fn every_state_round_trips_exactly(s in state()) {
        let packed = PackedState::from(s.clone());
        prop_assert_eq!(packed.is_boxed(), too_large(&s), "{:?}", s);
        prop_assert_eq!(&packed, &PackedState::from(s.clone()));
        prop_assert_eq!(AnyState::from(packed.clone()), s.clone());
        packed.view(|v| assert_eq!(v, &s));
    }
}

/// A shaper's state (its fields are private: reached by deciding).
#[test]
fn shaper_states_round_trip_from_no_node_to_the_end_of_time() {
    let shaper = Shaper::new(NginxRate::PerSecond(1), 5, ShaperDelay::NoDelay).unwrap();
    let fresh = AnyState::Shaper(shaper.fresh());
    let packed = PackedState::from(fresh.clone());
    assert!(!packed.is_boxed());
    assert_eq!(AnyState::from(packed), fresh);
    for now in [0, 1_700_000_000 * SEC, u64::MAX - 1, u64::MAX] {
        let mut s = shaper.fresh();
        shaper.decide(&mut s, Timestamp::from_nanos(now), 3, Apply::Commit);
        let state = AnyState::Shaper(s);
        let packed = PackedState::from(state.clone());
        // The last instant in ms: below 2^56 for every nanosecond instant.
        assert!(!packed.is_boxed(), "{state:?}");
        assert_eq!(AnyState::from(packed), state);
    }
}

/// One limit of any kind: small, possibly in penalty mode or blocking.
fn any_limit() -> impl Strategy<Value = AnyLimit> {
    let w = prop_oneof![Just(SEC), Just(7u64), 1..=2 * SEC].prop_map(Duration::from_nanos);
    let n = 1..=6u64;
    let kind = prop_oneof![
        (n.clone(), w.clone(), n.clone())
            .prop_map(|(c, p, b)| AnyLimit::from(Gcra::new(c, p, b).unwrap())),
        (n.clone(), w.clone()).prop_map(|(l, w)| AnyLimit::from(FixedWindow::new(l, w).unwrap())),
        (n.clone(), w.clone()).prop_map(|(l, w)| AnyLimit::from(SlidingWindow::new(l, w).unwrap())),
        (n.clone(), w.clone(), 1..=4u32)
            .prop_map(|(l, w, k)| { AnyLimit::from(SubWindowCounter::new(l, w * k, k).unwrap()) }),
        (n.clone(), w.clone()).prop_map(|(l, w)| AnyLimit::from(SlidingLog::new(l, w).unwrap())),
        (1..=20u64, 0..=5u64).prop_map(|(r, b)| {
            let s = Shaper::new(NginxRate::PerSecond(r), b, ShaperDelay::NoDelay).unwrap();
            AnyLimit::from(s)
        }),
        n.clone()
            .prop_map(|m| AnyLimit::from(Concurrency::new(m).unwrap())),
        (n, w.clone()).prop_map(|(m, l)| AnyLimit::from(Concurrency::leased(m, l).unwrap())),
    ];
    (
        kind,
        prop::bool::weighted(0.25),
        prop_oneof![3 => Just(0u64), 1 => 1..=3 * SEC],
    )
        .prop_map(|(l, penalty, block)| {
            l.with_penalty(penalty)
                .with_block(Duration::from_nanos(block))
        })
}

/// Steps forward in time: gaps, costs (some past every inline bound) and
/// apply modes, and the holder of a leased limit's units.
fn steps() -> impl Strategy<Value = Vec<(u64, u64, Apply, u64)>> {
    let cost =
        prop_oneof![6 => 0..=3u64, 1 => Just(1 << 56), 1 => Just(1 << 28), 1 => any::<u64>()];
    let apply = prop_oneof![
        4 => Just(Apply::Commit),
        1 => Just(Apply::Check),
        1 => Just(Apply::Force),
        1 => Just(Apply::Rejected),
        1 => Just(Apply::Refund),
    ];
    let gap = prop_oneof![0..=10u64, 0..=3 * SEC];
    prop::collection::vec((gap, cost, apply, 0..3u64), 1..40)
}

/// Decides `steps` on an `AnyState` and on a `PackedState`: the same
/// decisions, states and idle instants; copies for a batch the same.
fn decide_alike(limit: &AnyLimit, start: u64, steps: &[(u64, u64, Apply, u64)]) {
    let mut state = limit.fresh();
    let mut packed = Packed(limit).fresh();
    let mut now = start;
    for &(gap, cost, apply, holder) in steps {
        now = now.saturating_add(gap);
        let t = Timestamp::from_nanos(now);
        let held = HeldBy::new(limit, holder);
        let expected = held.decide_idle(&mut state, t, cost, apply);
        let copy = Packed(held).snapshot(&packed).unwrap();
        assert_eq!(
            Packed(held).decide_idle(&mut packed, t, cost, apply),
            expected
        );
        assert_eq!(AnyState::from(packed.clone()), state);
        assert_eq!(
            packed.is_boxed(),
            PackedState::from(state.clone()).is_boxed()
        );
        assert_eq!(Packed(held).idle_at(&packed, t), limit.idle_at(&state, t));
        // The copy taken before the decision is untouched by it.
        let mut again = copy.clone();
        assert_eq!(
            Packed(held).decide_idle(&mut again, t, cost, apply),
            expected
        );
    }
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn packed_limits_decide_as_their_limit(
        limit in any_limit(),
        start in prop_oneof![0..=10 * SEC, 1_700_000_000 * SEC..=1_700_000_010 * SEC],
        steps in steps(),
    ) {
        decide_alike(&limit, start, &steps);
    }
}

/// A sliding log's state is boxed; its copy is deep: deciding on the copy
/// leaves the original as it was.
#[test]
fn a_boxed_state_is_cloned_deeply() {
    let limit = AnyLimit::from(SlidingLog::new(2, Duration::from_secs(1)).unwrap());
    let packed_limit = Packed(&limit);
    let mut s = packed_limit.fresh();
    let t = Timestamp::from_secs(5);
    assert!(
        packed_limit
            .decide(&mut s, t, 1, Apply::Commit)
            .is_allowed()
    );
    assert!(s.is_boxed());
    let mut copy = s.clone();
    assert!(
        packed_limit
            .decide(&mut copy, t, 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        packed_limit
            .decide(&mut copy, t, 1, Apply::Commit)
            .is_denied()
    );
    // The original still has room for one.
    assert!(
        packed_limit
            .decide(&mut s, t, 1, Apply::Commit)
            .is_allowed()
    );
    assert_ne!(s, PackedState::default());
    drop(copy);
    assert!(packed_limit.decide(&mut s, t, 1, Apply::Commit).is_denied());
}

/// A fixed window forced past 2^56 is boxed, and inline again in the next
/// window; a sliding log blocked is inline (the block) and boxed again
/// once the block ends.
#[test]
fn a_state_is_unboxed_as_soon_as_it_fits() {
    let second = Duration::from_secs(1);
    let fixed = AnyLimit::from(FixedWindow::new(5, second).unwrap());
    let mut s = Packed(&fixed).fresh();
    Packed(&fixed).decide(&mut s, Timestamp::from_secs(1), 1 << 60, Apply::Force);
    assert!(s.is_boxed());
    assert!(
        Packed(&fixed)
            .decide(&mut s, Timestamp::from_secs(2), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(!s.is_boxed());
    assert_eq!(
        AnyState::from(s),
        AnyState::FixedWindow(WindowState::new(Timestamp::from_secs(2), 1))
    );

    let log = AnyLimit::from(SlidingLog::new(1, second).unwrap()).with_block(second * 10);
    let mut s = Packed(&log).fresh();
    Packed(&log).decide(&mut s, Timestamp::from_secs(1), 1, Apply::Commit);
    assert!(s.is_boxed());
    assert!(
        Packed(&log)
            .decide(&mut s, Timestamp::from_secs(1), 1, Apply::Commit)
            .is_denied()
    );
    assert!(!s.is_boxed(), "{s:?}");
    assert!(matches!(AnyState::from(s.clone()), AnyState::Blocked(_)));
    assert!(
        Packed(&log)
            .decide(&mut s, Timestamp::from_secs(20), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(s.is_boxed());
}
