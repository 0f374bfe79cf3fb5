//! Shared machinery for the property tests: random schedules, the generic
//! reference-model driver, exact `retry_after` probes, `idle_at` checks and
//! clock-going-backwards checks.
//!
//! Every algorithm file supplies an independent reference model (it never
//! calls the crate's decision code) by implementing [`Model`]; the generic
//! [`Model::decide`] turns it into full decisions: `retry_after` is the
//! earliest instant at which the model admits the same request, found by
//! search, and `reset_after` the earliest instant at which the model is back
//! to its full quota.

#![allow(dead_code)]

use std::fmt::Debug;
use std::time::Duration;

use floodgate::algorithms::{AnyLimit, AnyState};
use floodgate::{Algorithm, Apply, Decision, Outcome, Timestamp};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

pub(crate) const US: u64 = 1_000;
pub(crate) const MS: u64 = 1_000_000;
pub(crate) const SEC: u64 = 1_000_000_000;

/// One request of a schedule: at `at` (ns), of `cost`, applied as `apply`.
/// `back`, when set, sends the request back in time (see [`check_backwards`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub at: u64,
    pub cost: u64,
    pub apply: Apply,
    pub back: Option<u16>,
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// `N` decisions to be written by `decide_many` (their contents are
/// overwritten).
pub(crate) fn blank_decisions<const N: usize>() -> [Decision; N] {
    [Decision {
        outcome: Outcome::Never,
        limit: 0,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    }; N]
}

/// A gap between two requests: often none (repeats), often below `small`,
/// around `big` (typically a period or window), sometimes many `big`s, and
/// occasionally a big absolute jump.
pub(crate) fn gap(small: u64, big: u64) -> BoxedStrategy<u64> {
    let small = small.max(1);
    let big = big.max(1);
    prop_oneof![
        4 => Just(0u64),
        2 => 1..=3u64,
        4 => 0..=small,
        4 => 0..=big.saturating_mul(2),
        1 => big..=big.saturating_mul(40),
        1 => any::<u64>().prop_map(|g| g >> 24),
    ]
    .boxed()
}

/// A cost: 0, 1, anything up to the limit, just above it, or anything.
pub(crate) fn cost(limit: u64) -> BoxedStrategy<u64> {
    prop_oneof![
        2 => Just(0u64),
        6 => Just(1u64),
        5 => 1..=limit.max(1),
        1 => limit..=limit.saturating_add(2),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
    .boxed()
}

/// Mostly `Commit`, sometimes a dry `Check`, a penalty `Force`, or
/// `Rejected` (denied by another limit of a set).
pub(crate) fn apply() -> BoxedStrategy<Apply> {
    prop_oneof![
        14 => Just(Apply::Commit),
        2 => Just(Apply::Check),
        2 => Just(Apply::Force),
        2 => Just(Apply::Rejected),
    ]
    .boxed()
}

/// Where a schedule starts: 0, a few periods in, anywhere up to 2^60 ns, or
/// (rarely) right before the end of representable time.
pub(crate) fn start(big: u64) -> BoxedStrategy<u64> {
    prop_oneof![
        3 => Just(0u64),
        3 => 0..=big.saturating_mul(3),
        6 => any::<u64>().prop_map(|t| t >> 4),
        1 => (0..=big.saturating_mul(4)).prop_map(|d| u64::MAX - d),
    ]
    .boxed()
}

/// A random schedule of up to `len` requests at non-decreasing times
/// (saturating at `u64::MAX`).
pub(crate) fn schedule(small: u64, big: u64, limit: u64, len: usize) -> BoxedStrategy<Vec<Step>> {
    let step = (
        gap(small, big),
        cost(limit),
        apply(),
        prop::option::weighted(0.25, any::<u16>()),
    );
    (start(big), prop::collection::vec(step, 1..=len))
        .prop_map(|(start, steps)| {
            let mut at = start;
            steps
                .into_iter()
                .map(|(gap, cost, apply, back)| {
                    at = at.saturating_add(gap);
                    Step {
                        at,
                        cost,
                        apply,
                        back,
                    }
                })
                .collect()
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// Exact searches and durations
// ---------------------------------------------------------------------------

/// The smallest `t ≥ lo` with `pred(t)`, for a monotone `pred` (false, then
/// true forever). Exponential then binary search over exact integers.
pub(crate) fn earliest(lo: u128, pred: impl Fn(u128) -> bool) -> u128 {
    if pred(lo) {
        return lo;
    }
    let mut bad = lo;
    let mut step: u128 = 1;
    let good = loop {
        let t = lo + step;
        if pred(t) {
            break t;
        }
        bad = t;
        step *= 2;
        // Past 2^100 ns every wait is the end of representable time
        // (debts of u64::MAX costs take that long to repay).
        if step >= 1 << 100 {
            return lo + step;
        }
    };
    let (mut bad, mut good) = (bad, good);
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if pred(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

/// `to − from` as a duration, saturating at `u64::MAX` ns.
pub(crate) fn dur(from: u128, to: u128) -> Duration {
    Duration::from_nanos(u64::try_from(to.saturating_sub(from)).unwrap_or(u64::MAX))
}

/// Two waits from `now` agree: exactly, or both reach the end of representable
/// time (how far past it cannot be expressed, so any saturation is fine).
pub(crate) fn same_wait(actual: Duration, expected: Duration, now: u64) -> bool {
    let end = u128::from(u64::MAX - now);
    actual == expected || (actual.as_nanos() >= end && expected.as_nanos() >= end)
}

/// Asserts that the crate's decision equals the model's, field by field.
pub(crate) fn assert_decision(
    actual: &Decision,
    expected: &Decision,
    now: u64,
) -> Result<(), TestCaseError> {
    let msg = || format!("at {now}: crate {actual:?}, model {expected:?}");
    prop_assert_eq!(actual.outcome, expected.outcome, "outcome {}", msg());
    prop_assert_eq!(actual.limit, expected.limit, "limit {}", msg());
    prop_assert_eq!(actual.remaining, expected.remaining, "remaining {}", msg());
    prop_assert!(
        same_wait(actual.reset_after, expected.reset_after, now),
        "reset_after {}",
        msg()
    );
    match (actual.retry_after, expected.retry_after) {
        (None, None) => {}
        (Some(a), Some(e)) => prop_assert!(same_wait(a, e, now), "retry_after {}", msg()),
        _ => prop_assert!(false, "retry_after {}", msg()),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Reference models
// ---------------------------------------------------------------------------

/// An independent reference model of one limit on one key. Time is exact
/// nanoseconds as `u128` (so the model can look past `u64::MAX`); calls come
/// in non-decreasing time.
pub(crate) trait Model: Clone + Debug {
    /// The quota reported as `Decision::limit`; a cost above it is `Never`.
    fn limit(&self) -> u64;
    /// Requests of cost 1 admissible at `t`, given no traffic in between.
    fn remaining_at(&self, t: u128) -> u64;
    /// Whether a request of `cost` (1 ≤ cost ≤ limit) would be admitted at `t`.
    fn admits_at(&self, t: u128, cost: u64) -> bool;
    /// Counts a request of `cost` at `t` (admitted, or denied in penalty mode).
    fn charge(&mut self, t: u128, cost: u64);
    /// The outcome of an admitted request (the shaper may delay it).
    fn admitted(&self, _t: u128, _cost: u64) -> Outcome {
        Outcome::Allowed
    }
    /// Whether a forced charge counts even a cost above the limit, and a
    /// check (cost 0) is denied while the count is over the limit (debt:
    /// the fixed window, as envoyproxy/ratelimit's counter, and the
    /// bucket); `admits_at(t, 0)` then says whether the count is within
    /// the limit.
    fn counts_over(&self) -> bool {
        false
    }

    /// The full decision, with `retry_after` and `reset_after` found by exact
    /// search over the model's own predicates.
    fn decide(&mut self, now: u128, cost: u64, apply: Apply) -> Decision {
        let limit = self.limit();
        let outcome = if cost > limit {
            if apply == Apply::Force && self.counts_over() {
                self.charge(now, cost);
            }
            Outcome::Never
        } else if cost == 0 {
            if self.counts_over() && !self.admits_at(now, 0) {
                Outcome::Denied
            } else {
                Outcome::Allowed
            }
        } else if self.admits_at(now, cost) {
            let outcome = self.admitted(now, cost);
            if matches!(apply, Apply::Commit | Apply::Force) {
                self.charge(now, cost);
            }
            outcome
        } else {
            if apply == Apply::Force {
                self.charge(now, cost);
            }
            Outcome::Denied
        };
        let retry_after = (outcome == Outcome::Denied)
            .then(|| dur(now, earliest(now, |t| self.admits_at(t, cost))));
        let reset_after = dur(now, earliest(now, |t| self.remaining_at(t) == limit));
        Decision {
            outcome,
            limit,
            remaining: self.remaining_at(now),
            reset_after,
            retry_after,
        }
    }
}

/// How `apply` reaches a limit in penalty mode.
pub(crate) fn penalized(apply: Apply) -> Apply {
    match apply {
        Apply::Check => Apply::Check,
        _ => Apply::Force,
    }
}

// ---------------------------------------------------------------------------
// The generic side-by-side driver
// ---------------------------------------------------------------------------

/// How a subject is run against its model.
pub(crate) struct Opts<'a, S> {
    /// The subject runs in penalty mode (the model is driven with `Force`).
    pub penalty: bool,
    /// Denials come with a known `retry_after` (all but in-flight limits).
    pub retry_known: bool,
    /// State equality (exact, or modulo representations of a fresh key).
    pub same_state: &'a dyn Fn(&S, &S) -> bool,
    /// See [`Model::counts_over`].
    pub counts_over: bool,
}

/// Requests admitted and charged, as `(time, cost)`, for invariant checks.
pub(crate) type Admitted = Vec<(u64, u64)>;

/// Runs `steps` through `alg` (from state `init`) and through `model` side by
/// side, comparing every decision in full, and checks on the way:
/// * cost 0 is allowed and changes nothing; a cost above the limit is
///   `Never`, without `retry_after`, whatever the state;
/// * a decision that must not charge leaves the state exactly as it was;
/// * `retry_after` is exact: the same request is still denied 1 ns and 1 µs
///   before it, and admitted at it;
/// * from `idle_at` on, the state decides exactly like a fresh one.
pub(crate) fn check_model<A, M>(
    alg: &A,
    init: A::State,
    mut model: M,
    steps: &[Step],
    opts: &Opts<'_, A::State>,
) -> Result<Admitted, TestCaseError>
where
    A: Algorithm,
    A::State: Clone + Debug,
    M: Model,
{
    let mut s = init;
    let mut admitted = Vec::new();
    for step in steps {
        let before = s.clone();
        let now = Timestamp::from_nanos(step.at);
        let d = alg.decide(&mut s, now, step.cost, step.apply);
        let model_apply = if opts.penalty {
            penalized(step.apply)
        } else {
            step.apply
        };
        let m = model.decide(u128::from(step.at), step.cost, model_apply);
        assert_decision(&d, &m, step.at).map_err(|e| note(e, step, &before))?;
        check_universal(alg, &before, &s, step, &d, opts)?;
        if d.is_allowed() && step.cost > 0 && matches!(model_apply, Apply::Commit | Apply::Force) {
            admitted.push((step.at, step.cost));
        }
        if let Some(wait) = d.retry_after {
            probe_retry(alg, &s, step.at, step.cost, wait)?;
        }
        check_idle(alg, &s, step.at, step.cost)?;
    }
    Ok(admitted)
}

fn note<S: Debug>(e: TestCaseError, step: &Step, before: &S) -> TestCaseError {
    TestCaseError::fail(format!("{e}\n  step {step:?}\n  state before {before:?}"))
}

/// Properties every decision has, whatever the algorithm.
fn check_universal<A>(
    alg: &A,
    before: &A::State,
    after: &A::State,
    step: &Step,
    d: &Decision,
    opts: &Opts<'_, A::State>,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: Clone + Debug,
{
    let _ = alg;
    if step.cost == 0 && !opts.counts_over {
        prop_assert_eq!(d.outcome, Outcome::Allowed, "cost 0 must be allowed");
    }
    prop_assert_eq!(
        step.cost > d.limit,
        d.outcome == Outcome::Never,
        "Never iff the cost exceeds the limit: {:?}",
        d
    );
    if d.is_allowed() || d.outcome == Outcome::Never {
        prop_assert_eq!(d.retry_after, None);
    } else if opts.retry_known {
        prop_assert!(d.retry_after.is_some_and(|r| r > Duration::ZERO), "{:?}", d);
    }
    let charges = match step.apply {
        Apply::Check => false,
        // Gives back, never charges (a penalty aside).
        Apply::Refund => false,
        _ if opts.penalty => true,
        Apply::Commit => d.is_allowed(),
        Apply::Force => true,
        Apply::Rejected => false,
    };
    let never_counted = d.outcome == Outcome::Never && !opts.counts_over;
    if step.cost == 0 || never_counted || !charges {
        prop_assert!(
            (opts.same_state)(before, after),
            "the state changed on a decision that charges nothing: {:?} -> {:?} ({:?}, {:?})",
            before,
            after,
            step,
            d
        );
    }
    Ok(())
}

/// The same request (a dry check on a copy of the state) is denied just
/// before `now + wait` and admitted at it.
pub(crate) fn probe_retry<A>(
    alg: &A,
    s: &A::State,
    now: u64,
    cost: u64,
    wait: Duration,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: Clone + Debug,
{
    let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
    prop_assert!(wait > 0, "denied with a zero retry_after");
    let Some(at) = now.checked_add(wait).filter(|&t| t < u64::MAX) else {
        return Ok(()); // at or past the end of representable time
    };
    let probe = |t: u64| alg.decide(&mut s.clone(), Timestamp::from_nanos(t), cost, Apply::Check);
    let early = probe(at - 1);
    prop_assert!(
        early.is_denied(),
        "admitted 1 ns before retry_after ({wait} ns from {now}, cost {cost}): {early:?}\n  state {s:?}"
    );
    if wait >= US {
        let early = probe(at - US);
        prop_assert!(
            early.is_denied(),
            "admitted 1 µs before retry_after: {early:?}"
        );
    }
    let on_time = probe(at);
    prop_assert!(
        on_time.is_allowed(),
        "still denied at retry_after ({wait} ns from {now}, cost {cost}): {on_time:?}\n  state {s:?}"
    );
    Ok(())
}

/// From `idle_at` on, the state must decide exactly like a fresh one (that is
/// what lets a store forget the key).
pub(crate) fn check_idle<A>(alg: &A, s: &A::State, now: u64, cost: u64) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: Clone + Debug,
{
    let idle = alg
        .idle_at(s, Timestamp::from_nanos(now))
        .as_nanos()
        .max(now);
    if idle >= u64::MAX - 2 {
        return Ok(());
    }
    for t in [idle, idle + 1] {
        for c in [cost, 1, 0] {
            let kept = alg.decide(&mut s.clone(), Timestamp::from_nanos(t), c, Apply::Commit);
            let fresh = alg.decide(&mut alg.fresh(), Timestamp::from_nanos(t), c, Apply::Commit);
            prop_assert_eq!(
                kept,
                fresh,
                "at idle_at ({}) the state {:?} does not decide like a fresh one (cost {})",
                t,
                s,
                c
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// All the ways to run one limit
// ---------------------------------------------------------------------------

/// Whether an `AnyState` is a fresh key's state in any representation.
pub(crate) fn any_fresh(s: &AnyState, inner_fresh: &AnyState) -> bool {
    *s == AnyState::Fresh || s == inner_fresh
}

/// Runs `alg` against `model` plain, wrapped in `Penalize`, and as an
/// `AnyLimit` with penalty mode off and on. Returns the admissions of the
/// plain and the penalty runs.
pub(crate) fn check_all_modes<A, M>(
    alg: &A,
    model: &M,
    steps: &[Step],
    inner_fresh: AnyState,
) -> Result<(Admitted, Admitted), TestCaseError>
where
    A: Algorithm + Clone + Into<AnyLimit>,
    A::State: Clone + Debug + PartialEq,
    M: Model,
{
    let exact = |a: &A::State, b: &A::State| a == b;
    let plain = Opts {
        penalty: false,
        retry_known: true,
        same_state: &exact,
        counts_over: model.counts_over(),
    };
    let admitted = check_model(alg, alg.fresh(), model.clone(), steps, &plain)?;

    let penalty = Opts {
        penalty: true,
        ..plain
    };
    let pen = floodgate::Penalize(alg.clone());
    let admitted_pen = check_model(&pen, pen.fresh(), model.clone(), steps, &penalty)?;

    let fresh = inner_fresh.clone();
    let any_eq =
        move |a: &AnyState, b: &AnyState| a == b || (any_fresh(a, &fresh) && any_fresh(b, &fresh));
    for penalty in [false, true] {
        let any: AnyLimit = alg.clone().into();
        let any = any.with_penalty(penalty);
        let opts = Opts {
            penalty,
            retry_known: true,
            same_state: &any_eq,
            counts_over: model.counts_over(),
        };
        check_model(&any, any.fresh(), model.clone(), steps, &opts)?;
    }
    Ok((admitted, admitted_pen))
}

// ---------------------------------------------------------------------------
// Clock going backwards
// ---------------------------------------------------------------------------

/// Runs a schedule in which some requests (those with `back` set) arrive at
/// an earlier time than one already seen, with `Commit` or `Check` only:
/// * nothing panics, cost 0 stays allowed and changes nothing;
/// * before every step, deciding at an earlier time never admits more than
///   deciding at the latest time seen: if the earlier one admits so does the
///   later, with at least as much remaining (no free refill);
/// * on the steps that do not go back, `retry_after` stays exact and
///   `idle_at` correct;
/// * restamping every charged request at the latest time the state has been
///   charged at (what "no time has passed" means), the admissions satisfy
///   `invariant`.
pub(crate) fn check_backwards<A>(
    alg: &A,
    steps: &[Step],
    invariant: impl Fn(&[(u64, u64)]) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: Clone + Debug + PartialEq,
{
    let mut s = alg.fresh();
    let mut latest = 0u64; // the latest time seen
    let mut stamp = 0u64; // the latest time a charge happened at
    let mut admitted = Vec::new();
    for step in steps {
        let back = step
            .back
            .map(|f| (u128::from(latest) * u128::from(f) / 65_536) as u64)
            .unwrap_or(latest / 2);
        if latest > 0 {
            let b = alg.decide(
                &mut s.clone(),
                Timestamp::from_nanos(back),
                step.cost,
                Apply::Check,
            );
            let f = alg.decide(
                &mut s.clone(),
                Timestamp::from_nanos(latest),
                step.cost,
                Apply::Check,
            );
            prop_assert!(
                !b.is_allowed() || f.is_allowed(),
                "admitted at {back} but not at the later {latest}: {b:?} / {f:?}\n  state {s:?}"
            );
            prop_assert!(
                b.remaining <= f.remaining,
                "more remaining at {back} than at the later {latest}: {b:?} / {f:?}\n  state {s:?}"
            );
        }
        let (t, forward) = match step.back {
            Some(_) if latest > 0 => (back, false),
            _ => (step.at.max(latest), true),
        };
        let apply = if step.apply == Apply::Check {
            Apply::Check
        } else {
            Apply::Commit
        };
        let before = s.clone();
        let d = alg.decide(&mut s, Timestamp::from_nanos(t), step.cost, apply);
        if step.cost == 0 {
            // A check charges nothing; it is denied only where a request of
            // cost 1 is too (a bucket whose `TAT` a clock gone back shows
            // past the window).
            prop_assert_eq!(&before, &s);
            let one = alg.decide(&mut s.clone(), Timestamp::from_nanos(t), 1, Apply::Check);
            prop_assert!(d.is_allowed() || !one.is_allowed(), "{:?} / {:?}", d, one);
        }
        if d.is_allowed() && step.cost > 0 && apply == Apply::Commit {
            stamp = stamp.max(t);
            admitted.push((stamp, step.cost));
        }
        if forward {
            if let Some(wait) = d.retry_after {
                probe_retry(alg, &s, t, step.cost, wait)?;
            }
            check_idle(alg, &s, t, step.cost)?;
        }
        latest = latest.max(t);
    }
    invariant(&admitted)
}

/// A schedule for [`check_backwards`]: forward times that stay well inside
/// the representable range.
pub(crate) fn backwards_schedule(
    small: u64,
    big: u64,
    limit: u64,
    len: usize,
) -> BoxedStrategy<Vec<Step>> {
    let step = (
        gap(small, big),
        cost(limit),
        prop_oneof![6 => Just(Apply::Commit), 1 => Just(Apply::Check)],
        prop::option::weighted(0.3, any::<u16>()),
    );
    (0..=u64::MAX >> 3, prop::collection::vec(step, 1..=len))
        .prop_map(|(start, steps)| {
            let mut at = start;
            steps
                .into_iter()
                .map(|(gap, cost, apply, back)| {
                    at = at.saturating_add(gap.min(u64::MAX >> 8));
                    Step {
                        at,
                        cost,
                        apply,
                        back,
                    }
                })
                .collect()
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// Invariant helpers
// ---------------------------------------------------------------------------

/// Sorted by time (restamped admissions already are).
pub(crate) fn sorted(admitted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v = admitted.to_vec();
    v.sort_by_key(|&(t, _)| t);
    v
}

/// The largest admitted cost over any half-open interval `[t, t + len)`.
pub(crate) fn max_in_any_interval(admitted: &[(u64, u64)], len: u64) -> u128 {
    let v = sorted(admitted);
    let mut best = 0u128;
    for (i, &(t, _)) in v.iter().enumerate() {
        let end = u128::from(t) + u128::from(len);
        let sum: u128 = v[i..]
            .iter()
            .take_while(|&&(u, _)| u128::from(u) < end)
            .map(|&(_, c)| u128::from(c))
            .sum();
        best = best.max(sum);
    }
    best
}

/// `cases` cases (times `PROPTEST_SCALE` if set, for longer soaks), without
/// writing regression files.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let scale = std::env::var("PROPTEST_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases.saturating_mul(scale))
    }
}
