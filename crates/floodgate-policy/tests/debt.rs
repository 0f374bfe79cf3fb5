//! Costs known after the response, with debt (Envoy's `hits_addend` with
//! `apply_on_stream_done`): a rule with `penalty: true` is asked before the
//! request (a check, `hits_addend` 0, or a cost of 1) and charged the real
//! cost after it, whatever that call's answer. Against a model with
//! injected time: the decisions, the exact retry and reset times under
//! debt, and the bound on what is admitted.

use crate::common::*;

use std::time::Duration;

use floodgate_policy::Code;
use proptest::prelude::*;

/// 100 per 10 s: one token (or unit) every 100 ms.
const LIMIT: u64 = 100;
const TICK: u64 = 100_000_000;
const WINDOW: u64 = LIMIT * TICK;

const YAML: &str = "domains:
  - domain: llm
    descriptors:
      - key: bucket
        rate_limit: {algorithm: token_bucket, requests: 100, per: 10s, burst: 100, penalty: true}
      - key: window
        rate_limit: {requests: 100, per: 10s, penalty: true}
";

/// How a request is admitted before its cost is known.
#[derive(Clone, Copy, Debug)]
enum Admission {
    /// `hits_addend: 0` before, the whole cost after.
    Check,
    /// A cost of 1 before, the rest after.
    One,
}

/// The balance of one key, as the docs state it: tokens × [`TICK`] in a
/// bucket that drips one token per tick, or the count in a fixed window.
#[derive(Clone, Copy, Debug)]
enum Model {
    Bucket { credit: i128, at: u64 },
    Window { start: u64, count: u64 },
}

impl Model {
    fn at(&mut self, now: u64) {
        match self {
            Model::Bucket { credit, at } => {
                let full = i128::from(WINDOW);
                *credit = (*credit + i128::from(now - *at)).min(full);
                *at = now;
            }
            Model::Window { start, count } => {
                if now - now % WINDOW > *start {
                    *start = now - now % WINDOW;
                    *count = 0;
                }
            }
        }
    }

    /// Whether a request of `cost` (0: a check) is admitted now.
    fn admits(&self, cost: u64) -> bool {
        match *self {
            Model::Bucket { credit, .. } => credit >= i128::from(cost * TICK),
            Model::Window { count, .. } => count + cost <= LIMIT,
        }
    }

    fn charge(&mut self, cost: u64) {
        match self {
            Model::Bucket { credit, .. } => *credit -= i128::from(cost * TICK),
            Model::Window { count, .. } => *count += cost,
        }
    }

    /// When a call of `cost` is admitted again, and when the limit is back
    /// to its full quota (`duration_until_reset`), from `now`.
    fn waits(&self, now: u64, cost: u64) -> (u64, u64) {
        match *self {
            Model::Bucket { credit, .. } => {
                let need = i128::from(cost * TICK) - credit;
                (need as u64, (i128::from(WINDOW) - credit) as u64)
            }
            Model::Window { start, .. } => (start + WINDOW - now, start + WINDOW - now),
        }
    }
}

/// One request: the time since the previous one (ms), its real cost.
fn steps() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let gap = prop_oneof![3 => 0..200u64, 2 => 0..3_000u64, 1 => Just(0u64)];
    let cost = prop_oneof![4 => 1..=20u64, 2 => 1..=LIMIT, 1 => LIMIT..=3 * LIMIT];
    prop::collection::vec((gap, cost), 1..120)
}

/// Plays `steps` on `key`; returns the admitted requests (time, cost).
fn play(
    key: &str,
    admission: Admission,
    steps: &[(u64, u64)],
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut h = Harness::new(YAML);
    let start = START * 1_000_000_000;
    let mut model = if key == "bucket" {
        Model::Bucket {
            credit: i128::from(WINDOW),
            at: start,
        }
    } else {
        Model::Window { start, count: 0 }
    };
    let (mut now, mut admitted) = (start, Vec::new());
    for &(gap, cost) in steps {
        h.advance(Duration::from_millis(gap));
        now += gap * 1_000_000;
        model.at(now);
        let before = match admission {
            Admission::Check => 0,
            Admission::One => 1,
        };
        let ask = d(&[(key, "alice")]).hits(before);
        let code = h.send("llm", &[ask]);
        let status = &h.response.statuses[0];
        prop_assert_eq!(
            code == Code::Ok,
            model.admits(before),
            "at {} ns: {:?} / {:?}",
            now,
            status,
            model
        );
        if code == Code::Ok {
            model.charge(before);
            admitted.push((now, cost));
            let after = cost - before;
            if after > 0 {
                h.send("llm", &[d(&[(key, "alice")]).hits(after)]);
                model.charge(after);
            }
            continue;
        }
        // Denied: penalty charges a denied cost of 1 too.
        model.charge(before);
        let (retry, reset) = model.waits(now, before);
        let decision = status.decision.expect("a decision");
        prop_assert_eq!(
            decision.retry_after,
            Some(Duration::from_nanos(retry)),
            "{:?}",
            model
        );
        prop_assert_eq!(
            status.duration_until_reset,
            Duration::from_nanos(reset),
            "{:?}",
            model
        );
        prop_assert_eq!(status.limit_remaining, 0);
    }
    Ok(admitted)
}

/// Over every run of admissions within `span` ns of the first, the cost
/// admitted is at most `quota + rate·span + the largest cost`.
fn bounded(admitted: &[(u64, u64)], refills: bool) -> Result<(), TestCaseError> {
    let largest = admitted.iter().map(|a| a.1).max().unwrap_or(0);
    for (i, &(a, _)) in admitted.iter().enumerate() {
        let mut sum = 0;
        for &(b, cost) in &admitted[i..] {
            if !refills && b - b % WINDOW != a - a % WINDOW {
                break;
            }
            sum += cost;
            let refill = if refills { (b - a) / TICK } else { 0 };
            prop_assert!(
                sum <= LIMIT + refill + largest,
                "{} admitted in [{}, {}] (largest cost {})",
                sum,
                a,
                b,
                largest
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A token bucket in debt: denied until the drip repays it, the retry
    /// exactly when it has, the reset when it is full; admitted cost over
    /// any span ≤ burst + refill + the largest cost.
    #[test]
    fn a_bucket_in_debt_is_repaid_by_its_drip(steps in steps()) {
        for admission in [Admission::Check, Admission::One] {
            let admitted = play("bucket", admission, &steps)?;
            bounded(&admitted, true)?;
        }
    }

    /// A fixed window in debt: denied until the window ends, where the
    /// debt is gone; admitted cost per window ≤ limit + the largest cost.
    #[test]
    fn a_window_in_debt_is_forgiven_at_its_end(steps in steps()) {
        for admission in [Admission::Check, Admission::One] {
            let admitted = play("window", admission, &steps)?;
            bounded(&admitted, false)?;
        }
    }
}

#[test]
fn a_cost_over_the_whole_limit_is_charged_and_repaid() {
    let mut h = Harness::new(YAML);
    let ask = || d(&[("bucket", "bob")]).hits(0);
    assert_eq!(h.send("llm", &[ask()]), Code::Ok);
    // 250 tokens, on a bucket of 100: 150 owed, 15 s of drip.
    assert_eq!(
        h.send("llm", &[d(&[("bucket", "bob")]).hits(250)]),
        Code::OverLimit
    );
    assert_eq!(h.send("llm", &[ask()]), Code::OverLimit);
    let s = &h.response.statuses[0];
    assert_eq!(
        s.decision.unwrap().retry_after,
        Some(Duration::from_secs(15))
    );
    assert_eq!(s.duration_until_reset, Duration::from_secs(25));
    h.advance(Duration::from_secs(15) - Duration::from_nanos(1));
    assert_eq!(h.send("llm", &[ask()]), Code::OverLimit);
    h.advance(Duration::from_nanos(1));
    assert_eq!(h.send("llm", &[ask()]), Code::Ok);
}
