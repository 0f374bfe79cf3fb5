//! Several limits checked atomically: tuples, `Limits`, and
//! `Store::decide_many` across keys.
//!
//! The reference for a set is its members decided one by one: a set admits
//! iff every member admits; then every member is charged exactly as if it had
//! been decided alone, otherwise no member changes at all (penalty-mode
//! members excepted: they charge as they would alone in penalty mode, unless
//! in flight). The decision is the narrowest of the members'; when denied,
//! its `retry_after` is the longest wait among the members that deny the
//! same request once the penalties are charged.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use floodgate::algorithms::{
    AnyLimit, AnyState, Concurrency, FixedWindow, Gcra, GcraState, Limits, NginxRate, Shaper,
    ShaperDelay, SlidingLog, SlidingWindow, SubWindowCounter,
};
use floodgate::store::Item;
use floodgate::{Algorithm, Apply, Decision, Outcome, Penalize, Store, StoreConfig, Timestamp};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Random limits
// ---------------------------------------------------------------------------

/// A small limit of any kind, possibly in penalty mode, with the state a fresh
/// key of that kind has.
fn any_limit() -> impl Strategy<Value = (AnyLimit, AnyState)> {
    let period = prop_oneof![Just(SEC), Just(100 * MS), Just(7u64), 1..=2 * SEC];
    let n = 1..=6u64;
    let kind = prop_oneof![
        (n.clone(), period.clone(), n.clone()).prop_map(|(c, p, b)| {
            let g = Gcra::new(c, Duration::from_nanos(p), b).unwrap();
            (AnyLimit::from(g), AnyState::Gcra(GcraState::default()))
        }),
        (n.clone(), period.clone()).prop_map(|(l, w)| {
            let f = FixedWindow::new(l, Duration::from_nanos(w)).unwrap();
            (AnyLimit::from(f.clone()), AnyState::FixedWindow(f.fresh()))
        }),
        (n.clone(), period.clone()).prop_map(|(l, w)| {
            let s = SlidingWindow::new(l, Duration::from_nanos(w)).unwrap();
            (
                AnyLimit::from(s.clone()),
                AnyState::SlidingWindow(s.fresh()),
            )
        }),
        (n.clone(), period.clone(), 1..=4u32).prop_map(|(l, w, k)| {
            let s = SubWindowCounter::new(l, Duration::from_nanos(w * u64::from(k)), k).unwrap();
            (
                AnyLimit::from(s.clone()),
                AnyState::SubWindows(Box::new(s.fresh())),
            )
        }),
        (n.clone(), period).prop_map(|(l, w)| {
            let s = SlidingLog::new(l, Duration::from_nanos(w)).unwrap();
            (AnyLimit::from(s), AnyState::SlidingLog(Default::default()))
        }),
        (1..=20u64, 0..=5u64, 0..3u8).prop_map(|(r, b, d)| {
            let delay = [
                ShaperDelay::Queue,
                ShaperDelay::NoDelay,
                ShaperDelay::After(2),
            ][d as usize];
            let s = Shaper::new(NginxRate::PerSecond(r), b, delay).unwrap();
            (AnyLimit::from(s.clone()), AnyState::Shaper(s.fresh()))
        }),
        n.prop_map(|m| {
            let c = Concurrency::new(m).unwrap();
            (AnyLimit::from(c), AnyState::Concurrency(0))
        }),
    ];
    (kind, prop::bool::weighted(0.25))
        .prop_map(|((limit, fresh), penalty)| (limit.with_penalty(penalty), fresh))
}

/// Requests for a set: small costs, mostly `Commit`.
fn requests() -> impl Strategy<Value = Vec<(u64, u64, Apply)>> {
    let step = (gap(20 * MS, SEC), 0..=8u64, apply());
    (0..=u64::MAX >> 8, prop::collection::vec(step, 1..50)).prop_map(|(start, v)| {
        let mut at = start;
        v.into_iter()
            .map(|(g, c, a)| {
                at = at.saturating_add(g);
                (at, c, a)
            })
            .collect()
    })
}

// ---------------------------------------------------------------------------
// The reference check, for any set
// ---------------------------------------------------------------------------

/// Decides for one member, on the set's state.
type MemberDecide<'a, St> = Box<dyn Fn(&mut St, Timestamp, u64, Apply) -> Decision + 'a>;
/// Whether one member's state is the same in two set states.
type MemberSame<'a, St> = Box<dyn Fn(&St, &St) -> bool + 'a>;

/// One member of a set, seen from the set's state.
struct Member<'a, St> {
    penalty: bool,
    in_flight: bool,
    decide: MemberDecide<'a, St>,
    same: MemberSame<'a, St>,
}

/// Decides one request on a set and checks it against its members.
fn check_set_step<A: Algorithm>(
    set: &A,
    members: &[Member<'_, A::State>],
    state: &mut A::State,
    now: Timestamp,
    cost: u64,
    apply: Apply,
) -> Result<(), TestCaseError>
where
    A::State: Clone + std::fmt::Debug,
{
    let before = state.clone();
    let d = set.decide(state, now, cost, apply);

    let alone: Vec<Decision> = members
        .iter()
        .map(|m| (m.decide)(&mut before.clone(), now, cost, Apply::Check))
        .collect();
    let all = alone.iter().all(Decision::is_allowed);
    let mode = match apply {
        Apply::Commit | Apply::Force if all => apply,
        Apply::Force => Apply::Force,
        Apply::Commit => Apply::Rejected,
        other => other,
    };
    let rejected = mode == Apply::Rejected || (apply == Apply::Force && !all);
    if matches!(apply, Apply::Commit | Apply::Force) {
        prop_assert_eq!(d.is_allowed(), all, "the set admits iff every member does");
    }
    // A forced charge of a rejected request spares in-flight members.
    let mode_of = |m: &Member<'_, A::State>| {
        if rejected && m.in_flight {
            Apply::Rejected
        } else {
            mode
        }
    };
    let mut expected_state = before.clone();
    let mut expected = members
        .iter()
        .map(|m| (m.decide)(&mut expected_state, now, cost, mode_of(m)))
        .reduce(Decision::narrowest)
        .unwrap();
    if rejected && expected.outcome == Outcome::Denied {
        // The longest wait among the members that deny it now.
        let mut charged = expected_state.clone();
        expected.retry_after = members
            .iter()
            .map(|m| (m.decide)(&mut charged, now, cost, Apply::Check))
            .filter(|d| d.outcome == Outcome::Denied)
            .map(|d| d.retry_after)
            .reduce(|a, b| Some(a?.max(b?)))
            .unwrap();
    }
    prop_assert_eq!(d, expected, "the narrowest of the members' decisions");
    for (i, m) in members.iter().enumerate() {
        prop_assert!(
            (m.same)(state, &expected_state),
            "member {} state: {:?}, expected {:?}",
            i,
            state,
            expected_state
        );
        if mode_of(m) == Apply::Rejected && (!m.penalty || m.in_flight) {
            prop_assert!(
                (m.same)(state, &before),
                "denied, yet member {} changed: {:?} -> {:?}",
                i,
                before,
                state
            );
        }
        if mode == Apply::Commit {
            // Charged exactly as if it had been decided alone.
            let mut alone = before.clone();
            (m.decide)(&mut alone, now, cost, Apply::Commit);
            prop_assert!((m.same)(state, &alone), "member {} not charged as alone", i);
        }
    }
    Ok(())
}

fn any_eq(fresh: &AnyState) -> impl Fn(&AnyState, &AnyState) -> bool + '_ {
    move |a, b| a == b || (any_fresh(a, fresh) && any_fresh(b, fresh))
}

// ---------------------------------------------------------------------------
// `Decision::narrowest` against its documentation
// ---------------------------------------------------------------------------

fn decision() -> impl Strategy<Value = Decision> {
    let outcome = prop_oneof![
        Just(Outcome::Allowed),
        (0..4u64).prop_map(|ms| Outcome::Delayed(Duration::from_millis(ms))),
        Just(Outcome::Denied),
        Just(Outcome::Never),
    ];
    let retry = prop::option::weighted(0.8, (1..5u64).prop_map(Duration::from_secs));
    (outcome, 1..4u64, 0..4u64, 0..4u64, retry).prop_map(
        |(outcome, limit, remaining, reset, retry)| Decision {
            outcome,
            limit,
            remaining: remaining.min(limit),
            reset_after: Duration::from_secs(reset),
            retry_after: if outcome == Outcome::Denied {
                retry
            } else {
                None
            },
        },
    )
}

fn severity(d: &Decision) -> u8 {
    match d.outcome {
        Outcome::Allowed => 0,
        Outcome::Delayed(_) => 1,
        Outcome::Denied => 2,
        Outcome::Never => 3,
    }
}

/// What the docs of `narrowest` say a client should be told.
fn told(ds: &[Decision]) -> Decision {
    let worst = ds.iter().map(severity).max().unwrap();
    let outcome = match worst {
        0 => Outcome::Allowed,
        1 => Outcome::Delayed(ds.iter().map(Decision::delay).max().unwrap()),
        2 => Outcome::Denied,
        _ => Outcome::Never,
    };
    let retry_after = if outcome == Outcome::Denied {
        let waits: Option<Vec<Duration>> = ds
            .iter()
            .filter(|d| d.outcome == Outcome::Denied)
            .map(|d| d.retry_after)
            .collect();
        waits.map(|w| w.into_iter().max().unwrap())
    } else {
        None
    };
    let pool: Vec<&Decision> = ds
        .iter()
        .filter(|d| worst < 2 || severity(d) >= 2)
        .collect();
    let base = pool.iter().min_by_key(|d| (d.remaining, d.limit)).unwrap();
    Decision {
        outcome,
        retry_after,
        ..**base
    }
}

proptest! {
    #![proptest_config(config(200))]

    /// The fold of `narrowest` is what its documentation describes.
    #[test]
    fn narrowest_is_as_documented(ds in prop::collection::vec(decision(), 1..6)) {
        let folded = ds.iter().copied().reduce(Decision::narrowest).unwrap();
        prop_assert_eq!(folded, told(&ds));
    }

    /// `Limits` of any kinds, some in penalty mode.
    #[test]
    fn limits_are_atomic(members in prop::collection::vec(any_limit(), 1..5), reqs in requests()) {
        let (limits, fresh): (Vec<AnyLimit>, Vec<AnyState>) = members.into_iter().unzip();
        let set = Limits::new(limits.clone()).unwrap();
        let eqs: Vec<_> = fresh.iter().map(any_eq).collect();
        let ms: Vec<Member<'_, Box<[AnyState]>>> = limits
            .iter()
            .zip(&eqs)
            .enumerate()
            .map(|(i, (l, eq))| Member::<Box<[AnyState]>> {
                penalty: l.penalty(),
                in_flight: l.in_flight(),
                decide: Box::new(move |s, now, cost, apply| l.decide(&mut s[i], now, cost, apply)),
                same: Box::new(move |a, b| eq(&a[i], &b[i])),
            })
            .collect();
        let mut state = set.fresh();
        for (at, cost, apply) in reqs {
            check_set_step(&set, &ms, &mut state, Timestamp::from_nanos(at), cost, apply)?;
        }
    }

    /// A pair: GCRA and a fixed window.
    #[test]
    fn pairs_are_atomic(c in 1..=5u64, b in 1..=5u64, l in 1..=8u64, reqs in requests()) {
        let set = (
            Gcra::new(c, Duration::from_secs(1), b).unwrap(),
            FixedWindow::new(l, Duration::from_millis(700)).unwrap(),
        );
        let ms = vec![
            Member::<(GcraState, _)> {
                penalty: false,
                in_flight: false,
                decide: Box::new(|s, now, cost, a| set.0.decide(&mut s.0, now, cost, a)),
                same: Box::new(|x, y| x.0 == y.0),
            },
            Member {
                penalty: false,
                in_flight: false,
                decide: Box::new(|s, now, cost, a| set.1.decide(&mut s.1, now, cost, a)),
                same: Box::new(|x, y| x.1 == y.1),
            },
        ];
        let mut state = set.fresh();
        for (at, cost, apply) in reqs {
            check_set_step(&set, &ms, &mut state, Timestamp::from_nanos(at), cost, apply)?;
        }
    }

    /// A triple with a penalty-mode member and an in-flight limit.
    #[test]
    fn triples_are_atomic(l in 1..=6u64, p in 1..=6u64, m in 1..=12u64, reqs in requests()) {
        let set = (
            SlidingLog::new(l, Duration::from_millis(900)).unwrap(),
            Penalize(SubWindowCounter::new(p, Duration::from_secs(2), 4).unwrap()),
            Concurrency::new(m).unwrap(),
        );
        let ms = vec![
            Member::<(_, _, u64)> {
                penalty: false,
                in_flight: false,
                decide: Box::new(|s, now, cost, a| set.0.decide(&mut s.0, now, cost, a)),
                same: Box::new(|x, y| x.0 == y.0),
            },
            Member {
                penalty: true,
                in_flight: false,
                decide: Box::new(|s, now, cost, a| set.1.decide(&mut s.1, now, cost, a)),
                same: Box::new(|x, y| x.1 == y.1),
            },
            Member {
                penalty: false,
                in_flight: true,
                decide: Box::new(|s, now, cost, a| set.2.decide(&mut s.2, now, cost, a)),
                same: Box::new(|x, y| x.2 == y.2),
            },
        ];
        let mut state = set.fresh();
        for (at, cost, apply) in reqs {
            check_set_step(&set, &ms, &mut state, Timestamp::from_nanos(at), cost, apply)?;
        }
    }

    /// `Store::decide_many` across keys: all-or-nothing, equal keys share a
    /// state and are decided in order, each item gets its own decision, and
    /// the result is their narrowest.
    #[test]
    fn decide_many_is_atomic_across_keys(
        limits in prop::collection::vec(any_limit(), 4),
        batches in prop::collection::vec(
            (gap(20 * MS, SEC), prop::collection::vec((0..4usize, 0..=4u64), 1..6), prop::bool::weighted(0.85)),
            1..30,
        ),
    ) {
        let keys = ["a", "b", "c", "d"];
        let store: Store<String, AnyState> = Store::new(StoreConfig { capacity: 64, shards: 4, ..StoreConfig::default() }).unwrap();
        let mut reference: HashMap<usize, AnyState> = HashMap::new();
        let mut now = 1_000 * SEC;
        for (g, items, commit) in batches {
            now += g;
            let t = Timestamp::from_nanos(now);
            let apply = if commit { Apply::Commit } else { Apply::Check };
            let batch: Vec<Item<'_, str, AnyLimit>> = items
                .iter()
                .map(|&(k, cost)| Item { key: keys[k], limit: &limits[k].0, cost })
                .collect();
            let mut out = vec![Decision { outcome: Outcome::Never, limit: 0, remaining: 0, reset_after: Duration::ZERO, retry_after: None }; batch.len()];
            let d = store.decide_many(&batch, t, apply, &mut out);

            // Reference: equal keys share a state and are decided in order
            // (keys in order of first appearance).
            let mut order: Vec<usize> = Vec::new();
            let mut members: HashMap<usize, Vec<(usize, u64)>> = HashMap::new();
            for (i, &(k, cost)) in items.iter().enumerate() {
                if !members.contains_key(&k) {
                    order.push(k);
                }
                members.entry(k).or_default().push((i, cost));
            }
            let all = order.iter().all(|k| {
                let mut s = reference.get(k).cloned().unwrap_or_default();
                match members[k].as_slice() {
                    [(_, cost)] => limits[*k].0.decide(&mut s, t, *cost, Apply::Check).is_allowed(),
                    many => many
                        .iter()
                        .all(|(_, cost)| limits[*k].0.decide(&mut s, t, *cost, Apply::Commit).is_allowed()),
                }
            });
            let mode = match apply {
                Apply::Commit if !all => Apply::Rejected,
                a => a,
            };
            let mut per_item: HashMap<usize, Decision> = HashMap::new();
            for &k in &order {
                let limit = &limits[k].0;
                let s = reference.entry(k).or_default();
                match members[&k].as_slice() {
                    [(i, cost)] => {
                        per_item.insert(*i, limit.decide(s, t, *cost, mode));
                    }
                    many if mode == Apply::Commit => {
                        for (i, cost) in many {
                            per_item.insert(*i, limit.decide(s, t, *cost, mode));
                        }
                    }
                    many => {
                        let mut view = s.clone();
                        for (i, cost) in many {
                            per_item.insert(*i, limit.decide(&mut view.clone(), t, *cost, mode));
                            limit.decide(&mut view, t, *cost, Apply::Force);
                        }
                        if mode == Apply::Rejected {
                            let sum = many.iter().map(|(_, c)| c).sum();
                            limit.decide(s, t, sum, mode);
                        }
                    }
                }
            }
            let expected_out: Vec<Decision> = (0..items.len()).map(|i| per_item[&i]).collect();
            prop_assert_eq!(&out, &expected_out);
            prop_assert_eq!(d, expected_out.iter().copied().reduce(Decision::narrowest).unwrap());
            if apply == Apply::Commit {
                prop_assert_eq!(d.is_allowed(), all);
            }
            // Every key's state, as the store holds it, decides like the reference.
            for (k, key) in keys.iter().enumerate() {
                for cost in [0, 1, 3] {
                    let held = store.decide(&limits[k].0, *key, t, cost, Apply::Check);
                    let mut s = reference.get(&k).cloned().unwrap_or_default();
                    prop_assert_eq!(held, limits[k].0.decide(&mut s, t, cost, Apply::Check), "key {}", key);
                }
            }
        }
    }
}

#[test]
fn limits_doc_example() {
    let limits = Limits::new(vec![
        FixedWindow::new(10, Duration::from_secs(1)).unwrap(),
        FixedWindow::new(15, Duration::from_secs(3600)).unwrap(),
    ])
    .unwrap();
    let mut s = limits.fresh();
    let t = Timestamp::from_secs(7200);
    assert!(limits.decide(&mut s, t, 10, Apply::Commit).is_allowed());
    let before = s.clone();
    // Both deny: told the narrowest limit, and the longer wait.
    let d = limits.decide(&mut s, t, 10, Apply::Commit);
    assert_eq!(
        (d.outcome, d.limit, d.retry_after),
        (Outcome::Denied, 10, Some(Duration::from_secs(3600)))
    );
    assert_eq!(s, before);
    // Only the per-second limit denies 5 more.
    let d = limits.decide(&mut s, t, 5, Apply::Commit);
    assert_eq!(
        (d.outcome, d.limit, d.retry_after),
        (Outcome::Denied, 10, Some(Duration::from_secs(1)))
    );
    assert_eq!(s, before);
    let d = limits.decide(&mut s, Timestamp::from_secs(7201), 5, Apply::Commit);
    assert_eq!((d.limit, d.remaining), (15, 0));
}

#[test]
fn a_penalty_member_charges_when_another_denies() {
    let set = (
        FixedWindow::new(1, Duration::from_secs(10)).unwrap(),
        Penalize(FixedWindow::new(5, Duration::from_secs(10)).unwrap()),
    );
    let mut s = set.fresh();
    let t = Timestamp::from_secs(100);
    assert!(set.decide(&mut s, t, 1, Apply::Commit).is_allowed());
    for _ in 0..3 {
        assert!(set.decide(&mut s, t, 1, Apply::Commit).is_denied());
    }
    assert_eq!((s.0.count(), s.1.count()), (1, 4));
}

/// A penalty member charged for a request another member denied may deny
/// it once charged: the set's `retry_after` waits for it too, so it is
/// exact (denied 1 ns before, admitted at it).
#[test]
fn retry_after_counts_the_penalties_charged() {
    let set = (
        Penalize(Gcra::new(1, Duration::from_secs(10), 2).unwrap()),
        FixedWindow::new(1, Duration::from_secs(1)).unwrap(),
    );
    let mut s = set.fresh();
    let t = Timestamp::from_secs(100);
    assert!(set.decide(&mut s, t, 1, Apply::Commit).is_allowed());
    let d = set.decide(&mut s, t, 1, Apply::Commit);
    let retry = Duration::from_secs(10);
    assert_eq!((d.outcome, d.retry_after), (Outcome::Denied, Some(retry)));
    let almost = t + retry - Duration::from_nanos(1);
    assert!(
        set.decide(&mut s.clone(), almost, 1, Apply::Check)
            .is_denied()
    );
    assert!(set.decide(&mut s, t + retry, 1, Apply::Commit).is_allowed());

    let limits = Limits::new(vec![
        AnyLimit::from(Gcra::new(1, Duration::from_secs(10), 2).unwrap()).with_penalty(true),
        AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap()),
    ])
    .unwrap();
    let mut s = limits.fresh();
    assert!(limits.decide(&mut s, t, 1, Apply::Commit).is_allowed());
    let d = limits.decide(&mut s, t, 1, Apply::Commit);
    assert_eq!((d.outcome, d.retry_after), (Outcome::Denied, Some(retry)));
}
