//! The in-flight limit against a plain counter, and its permits: released on
//! drop, including when the holder panics.

use crate::common;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyLimit, AnyState, Concurrency};
use floodgate::{
    Algorithm, Apply, Decision, ManualClock, Outcome, OwnedPermit, Penalize, Permit, RateLimiter,
    Timestamp,
};
use proptest::prelude::*;

/// Units in flight.
#[derive(Clone, Debug)]
struct Counter {
    max: u64,
    held: u64,
}

impl Counter {
    /// Penalty mode has no meaning here: a request it did not admit holds
    /// nothing, so only an admitted `Commit` or `Force` takes units.
    fn decide(&mut self, cost: u64, apply: Apply) -> Decision {
        let outcome = if cost > self.max {
            Outcome::Never
        } else if self.held + cost <= self.max {
            if matches!(apply, Apply::Commit | Apply::Force) {
                self.held += cost;
            }
            Outcome::Allowed
        } else {
            Outcome::Denied
        };
        Decision {
            outcome,
            limit: self.max,
            remaining: self.max - self.held,
            reset_after: Duration::ZERO,
            retry_after: None,
        }
    }

    fn release(&mut self, units: u64) {
        self.held = self.held.saturating_sub(units);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Take(u64, Apply),
    Release(u64),
}

fn ops(max: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (cost(max), apply()).prop_map(|(c, a)| Op::Take(c, a)),
        1 => prop_oneof![0..=max, Just(u64::MAX)].prop_map(Op::Release),
    ];
    prop::collection::vec(op, 1..60)
}

fn max() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 1..=10u64, 1 => 1..=1_000u64, 1 => Just(floodgate::MAX_COUNT)]
}

/// A permit of either kind, with what it holds.
enum Held<'a> {
    Borrowed(#[allow(dead_code)] Permit<'a, String, ManualClock>),
    Owned(#[allow(dead_code)] OwnedPermit<String, ManualClock>),
}

#[derive(Clone, Debug)]
enum PermitOp {
    /// Acquire and keep (owned or borrowed).
    Acquire { key: u8, units: u64, owned: bool },
    /// Drop the i-th kept permit.
    Drop(usize),
    /// Acquire, then panic while holding (unwinding drops the permit).
    PanicHolding { key: u8, units: u64 },
    /// Move an owned permit into a thread that panics.
    PanicInThread { key: u8, units: u64 },
}

fn permit_ops(max: u64) -> impl Strategy<Value = Vec<PermitOp>> {
    let key = 0..3u8;
    let units = prop_oneof![4 => 1..=max, 1 => Just(0u64), 1 => max..=max + 1];
    let op = prop_oneof![
        4 => (key.clone(), units.clone(), any::<bool>())
            .prop_map(|(key, units, owned)| PermitOp::Acquire { key, units, owned }),
        3 => any::<usize>().prop_map(PermitOp::Drop),
        1 => (key.clone(), units.clone()).prop_map(|(key, units)| PermitOp::PanicHolding { key, units }),
        1 => (key, units).prop_map(|(key, units)| PermitOp::PanicInThread { key, units }),
    ];
    prop::collection::vec(op, 1..40)
}

proptest! {
    #![proptest_config(config(256))]

    /// The algorithm (plain, `Penalize`, `AnyLimit` with and without
    /// penalty) equals the counter, step by step: penalty mode does not
    /// apply to an in-flight limit, which never charges a rejected request.
    #[test]
    fn concurrency_is_a_counter(max in max(), ops in ops(10)) {
        let ops: Vec<Op> = ops;
        let c = Concurrency::new(max).unwrap();
        let any = AnyLimit::from(c.clone());
        let any_pen = AnyLimit::from(c.clone()).with_penalty(true);
        prop_assert!(!any_pen.penalty());
        let pen = Penalize(c.clone());
        prop_assert!(c.in_flight() && pen.in_flight() && any_pen.in_flight());
        let (mut s, mut s_pen) = (c.fresh(), pen.fresh());
        let (mut s_any, mut s_any_pen) = (AnyState::Fresh, AnyState::Fresh);
        let mut model = Counter { max, held: 0 };
        let now = Timestamp::from_secs(1);
        for op in ops {
            match op {
                Op::Take(cost, apply) => {
                    let before = s;
                    let m = model.decide(cost, apply);
                    prop_assert_eq!(c.decide(&mut s, now, cost, apply), m);
                    prop_assert_eq!(any.decide(&mut s_any, now, cost, apply), m);
                    prop_assert_eq!(pen.decide(&mut s_pen, now, cost, apply), m);
                    prop_assert_eq!(any_pen.decide(&mut s_any_pen, now, cost, apply), m);
                    if cost == 0 || m.is_denied() {
                        prop_assert_eq!(s, before);
                    }
                    prop_assert_eq!(c.idle_at(&s, now) == now, s == 0);
                }
                Op::Release(units) => {
                    c.release(&mut s, units);
                    c.release(&mut s_pen, units);
                    any.release(&mut s_any, units);
                    any_pen.release(&mut s_any_pen, units);
                    model.release(units);
                }
            }
            prop_assert_eq!(s, model.held);
            prop_assert_eq!(s_pen, model.held);
        }
    }

    /// Time plays no part: a clock going backwards changes nothing, and at
    /// most `max` units are ever taken (nothing is released here).
    #[test]
    fn concurrency_clock_backwards(max in max(), steps in backwards_schedule(SEC, 10 * SEC, 10, 40)) {
        let c = Concurrency::new(max).unwrap();
        check_backwards(&c, &steps, |admitted| {
            let taken: u128 = admitted.iter().map(|&(_, units)| u128::from(units)).sum();
            prop_assert!(taken <= u128::from(max));
            Ok(())
        })?;
    }

    /// Permits give their units back when dropped: normally, while a
    /// holder's panic unwinds, and from a thread that panics.
    #[test]
    fn permits_are_released_even_on_panic(max in 1..=6u64, ops in permit_ops(6)) {
        let limiter: Arc<RateLimiter<String, Concurrency, ManualClock>> = Arc::new(
            RateLimiter::with_clock(Concurrency::new(max).unwrap(), ManualClock::new(Timestamp::from_secs(1))),
        );
        let mut model: HashMap<String, Counter> = HashMap::new();
        let mut kept: Vec<(String, u64, Held<'_>)> = Vec::new();
        for op in ops {
            match op {
                PermitOp::Acquire { key, units, owned } => {
                    let key = key.to_string();
                    let m = model.entry(key.clone()).or_insert(Counter { max, held: 0 }).decide(units, Apply::Commit);
                    let got = if owned {
                        limiter.acquire_owned(key.as_str(), units).map(|p| (*p.decision(), Held::Owned(p)))
                    } else {
                        limiter.acquire(key.as_str(), units).map(|p| (*p.decision(), Held::Borrowed(p)))
                    };
                    match got {
                        Ok((d, permit)) => {
                            prop_assert_eq!(d, m);
                            kept.push((key, units, permit));
                        }
                        Err(d) => prop_assert_eq!(d, m),
                    }
                }
                PermitOp::Drop(i) => {
                    if !kept.is_empty() {
                        let (key, units, permit) = kept.remove(i % kept.len());
                        drop(permit);
                        model.get_mut(&key).unwrap().release(units);
                    }
                }
                PermitOp::PanicHolding { key, units } => {
                    let key = key.to_string();
                    let m = model.entry(key.clone()).or_insert(Counter { max, held: 0 }).decide(units, Apply::Commit);
                    let lim = &limiter;
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        match lim.acquire(key.as_str(), units) {
                            // Unwinds without invoking the panic hook.
                            Ok(_permit) => resume_unwind(Box::new("the holder failed")),
                            Err(d) => d,
                        }
                    }));
                    match result {
                        Err(_) => {
                            prop_assert!(m.is_allowed());
                            model.get_mut(&key).unwrap().release(units);
                        }
                        Ok(d) => prop_assert_eq!(d, m),
                    }
                }
                PermitOp::PanicInThread { key, units } => {
                    let key = key.to_string();
                    let m = model.entry(key.clone()).or_insert(Counter { max, held: 0 }).decide(units, Apply::Commit);
                    match limiter.acquire_owned(key.as_str(), units) {
                        Ok(permit) => {
                            prop_assert_eq!(*permit.decision(), m);
                            let joined = std::thread::spawn(move || {
                                let _permit = permit;
                                resume_unwind(Box::new("the task failed"))
                            })
                            .join();
                            prop_assert!(joined.is_err());
                            model.get_mut(&key).unwrap().release(units);
                        }
                        Err(d) => prop_assert_eq!(d, m),
                    }
                }
            }
            // What the limiter reports matches the model for every key.
            for (key, m) in &model {
                let d = limiter.peek(key.as_str(), 0);
                prop_assert_eq!(d.remaining, max - m.held, "key {}", key);
            }
        }
        drop(kept);
        for key in ["0", "1", "2"] {
            let d = limiter.peek(key, max);
            prop_assert!(d.is_allowed());
            prop_assert_eq!(d.remaining, max);
        }
    }
}

#[test]
fn a_panicking_holder_releases_its_units() {
    let limiter: RateLimiter<String, _, _> =
        RateLimiter::with_clock(Concurrency::new(2).unwrap(), ManualClock::default());
    let kept = limiter.acquire("tenant", 1).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let _permit = limiter.acquire("tenant", 1).unwrap();
        assert!(limiter.acquire("tenant", 1).is_err());
        resume_unwind(Box::new("boom"));
    }));
    assert!(result.is_err());
    assert_eq!(limiter.peek("tenant", 0).remaining, 1);
    drop(kept);
    assert_eq!(limiter.peek("tenant", 0).remaining, 2);
    let Err(never) = limiter.acquire("tenant", 3) else {
        panic!("3 units of 2 admitted")
    };
    assert_eq!((never.outcome, never.retry_after), (Outcome::Never, None));
}

/// Penalty mode does not reach an in-flight limit: a request another limit
/// rejects takes no units, as no permit would ever give them back (in a
/// tuple, in `Limits`, under a forced charge, and across keys).
#[test]
fn a_rejected_request_holds_no_units() {
    use floodgate::algorithms::{Gcra, Limits};
    use floodgate::store::Item;
    use floodgate::{Store, StoreConfig};

    let t = Timestamp::from_secs(100);
    let gcra = Gcra::new(1, Duration::from_secs(1), 1).unwrap();
    let outcomes = |ds: [Decision; 3]| ds.map(|d| d.outcome);
    let expected = [Outcome::Allowed, Outcome::Denied, Outcome::Denied];

    let pair = (Penalize(Concurrency::new(2).unwrap()), gcra.clone());
    let mut s = pair.fresh();
    let ds = [(); 3].map(|_| pair.decide(&mut s, t, 1, Apply::Commit));
    assert_eq!(outcomes(ds), expected);
    assert_eq!(s.0, 1, "one request admitted, one unit in flight");

    let any = AnyLimit::from(Concurrency::new(2).unwrap()).with_penalty(true);
    let set = Limits::new(vec![any.clone(), AnyLimit::from(gcra.clone())]).unwrap();
    let mut s = set.fresh();
    let ds = [(); 3].map(|_| set.decide(&mut s, t, 1, Apply::Commit));
    assert_eq!(outcomes(ds), expected);
    assert_eq!(s[0], AnyState::Concurrency(1));

    // A forced charge counts the request against the rate, not in flight.
    let mut s = set.fresh();
    let ds = [(); 3].map(|_| set.decide(&mut s, t, 1, Apply::Force));
    assert_eq!(outcomes(ds), expected);
    assert_eq!(s[0], AnyState::Concurrency(1));

    let store: Store<String, AnyState> = Store::new(StoreConfig::default()).unwrap();
    let rate = AnyLimit::from(gcra).with_penalty(true);
    let items = [
        Item {
            key: "flight",
            limit: &any,
            cost: 1,
        },
        Item {
            key: "rate",
            limit: &rate,
            cost: 1,
        },
    ];
    let mut out: [Decision; 2] = crate::common::blank_decisions();
    for apply in [Apply::Commit, Apply::Commit, Apply::Force, Apply::Force] {
        store.decide_many(&items, t, apply, &mut out);
    }
    let held = store.decide(&any, "flight", t, 0, Apply::Check);
    assert_eq!(
        held.remaining, 1,
        "one request admitted, one unit in flight"
    );
}
