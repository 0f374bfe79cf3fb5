//! GCRA, the token bucket and the leaky-bucket meter against two exact
//! reference models written from scratch: a token bucket (tokens scaled by
//! the period, so refilling `count` per `period` adds exactly `count` per ns)
//! and a leaky bucket level (its mirror image, `level = capacity − tokens`).

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyState, Gcra, GcraState};
use floodgate::{Algorithm, Apply, MAX_COUNT, MAX_PERIOD_NANOS, Outcome, Timestamp};
use proptest::prelude::*;

/// A token bucket of `capacity` tokens, starting full, refilled continuously
/// with `count` tokens per `period` ns. Tokens are kept multiplied by
/// `period`, so one ns adds exactly `count` scaled tokens: no rounding ever.
/// In penalty mode the balance may go negative (debt).
#[derive(Clone, Debug)]
struct TokenBucket {
    capacity: u64,
    count: i128,
    period: i128,
    /// Tokens × period at `at`.
    scaled: i128,
    at: u128,
}

impl TokenBucket {
    fn new(capacity: u64, count: u64, period: u64) -> Self {
        TokenBucket {
            capacity,
            count: i128::from(count),
            period: i128::from(period),
            scaled: i128::from(capacity) * i128::from(period),
            at: 0,
        }
    }

    fn full(&self) -> i128 {
        i128::from(self.capacity) * self.period
    }

    fn scaled_at(&self, t: u128) -> i128 {
        let dt = t.saturating_sub(self.at);
        let missing = self.full().saturating_sub(self.scaled);
        // Refilling for longer than it takes to fill up changes nothing.
        if dt >= (missing / self.count).saturating_add(1) as u128 {
            self.full()
        } else {
            (self.scaled + self.count * dt as i128).min(self.full())
        }
    }
}

impl Model for TokenBucket {
    fn limit(&self) -> u64 {
        self.capacity
    }
    fn remaining_at(&self, t: u128) -> u64 {
        (self.scaled_at(t).max(0) / self.period) as u64
    }
    fn admits_at(&self, t: u128, cost: u64) -> bool {
        self.scaled_at(t) >= i128::from(cost) * self.period
    }
    fn charge(&mut self, t: u128, cost: u64) {
        // Saturating: debts of u64::MAX costs outlast representable time.
        self.scaled = self
            .scaled_at(t)
            .saturating_sub(i128::from(cost) * self.period);
        self.at = self.at.max(t);
    }
    fn counts_over(&self) -> bool {
        true
    }
}

/// A counter-based leaky bucket used as a meter: a level of at most
/// `capacity`, starting empty, draining `count` per `period` continuously;
/// a request fits iff `level + cost ≤ capacity`. Level kept × period.
#[derive(Clone, Debug)]
struct LeakyMeter {
    capacity: u64,
    count: i128,
    period: i128,
    scaled_level: i128,
    at: u128,
}

impl LeakyMeter {
    fn new(capacity: u64, leak: u64, per: u64) -> Self {
        LeakyMeter {
            capacity,
            count: i128::from(leak),
            period: i128::from(per),
            scaled_level: 0,
            at: 0,
        }
    }

    fn level_at(&self, t: u128) -> i128 {
        let dt = t.saturating_sub(self.at);
        if dt >= (self.scaled_level / self.count).saturating_add(1) as u128 {
            0
        } else {
            (self.scaled_level - self.count * dt as i128).max(0)
        }
    }
}

impl Model for LeakyMeter {
    fn limit(&self) -> u64 {
        self.capacity
    }
    fn remaining_at(&self, t: u128) -> u64 {
        let room = i128::from(self.capacity) * self.period - self.level_at(t);
        (room.max(0) / self.period) as u64
    }
    fn admits_at(&self, t: u128, cost: u64) -> bool {
        self.level_at(t)
            .saturating_add(i128::from(cost) * self.period)
            <= i128::from(self.capacity) * self.period
    }
    fn charge(&mut self, t: u128, cost: u64) {
        self.scaled_level = self
            .level_at(t)
            .saturating_add(i128::from(cost) * self.period);
        self.at = self.at.max(t);
    }
    fn counts_over(&self) -> bool {
        true
    }
}

/// `(count, period ns, burst)`: small and odd rates (3 per 1 s, whose
/// interval is not a whole number of ns), and the extremes.
fn params() -> impl Strategy<Value = (u64, u64, u64)> {
    let count = prop_oneof![
        6 => 1..=12u64,
        2 => 1..=1_000u64,
        1 => Just(MAX_COUNT),
        1 => 1..=MAX_COUNT,
    ];
    let period = prop_oneof![
        2 => Just(SEC),
        1 => Just(MS),
        1 => Just(3u64),
        4 => 1..=10 * SEC,
        1 => 1..=1_000u64,
        1 => Just(MAX_PERIOD_NANOS),
    ];
    let burst = prop_oneof![
        6 => 1..=12u64,
        2 => 1..=1_000u64,
        1 => Just(MAX_COUNT),
    ];
    (count, period, burst)
}

fn case() -> impl Strategy<Value = ((u64, u64, u64), Vec<Step>)> {
    params().prop_flat_map(|(count, period, burst)| {
        let t = (period / count).max(1);
        let steps = schedule(t, t.saturating_mul(burst.min(64)), burst, 40);
        (Just((count, period, burst)), steps)
    })
}

/// Over any interval `[a, b]`, the admitted cost is at most
/// `burst + count·(b − a)/period` (exact, cross-multiplied).
fn rate_bound(
    admitted: &[(u64, u64)],
    count: u64,
    period: u64,
    burst: u64,
) -> Result<(), TestCaseError> {
    let v = sorted(admitted);
    for i in 0..v.len() {
        let mut sum = 0u128;
        for j in i..v.len() {
            sum += u128::from(v[j].1);
            let w = u128::from(v[j].0 - v[i].0);
            prop_assert!(
                sum * u128::from(period)
                    <= u128::from(burst) * u128::from(period) + u128::from(count) * w,
                "admitted {} in {} ns with burst {} and {} per {} ns",
                sum,
                w,
                burst,
                count,
                period
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(160))]

    /// Every decision equals the token bucket model's (plain, `Penalize`,
    /// `AnyLimit` with and without penalty), and the admissions respect
    /// `burst + rate·w` over every interval.
    #[test]
    fn gcra_is_a_token_bucket(((count, period, burst), steps) in case()) {
        let gcra = Gcra::new(count, Duration::from_nanos(period), burst).unwrap();
        let model = TokenBucket::new(burst, count, period);
        let (admitted, admitted_pen) = check_all_modes(&gcra, &model, &steps, AnyState::Gcra(GcraState::default()))?;
        rate_bound(&admitted, count, period, burst)?;
        rate_bound(&admitted_pen, count, period, burst)?;
    }

    /// `token_bucket` and `leaky_meter` are the same limit, and the leaky
    /// meter view (a level that drains) decides exactly like GCRA.
    #[test]
    fn leaky_meter_is_the_mirror_image(((count, period, burst), steps) in case()) {
        let per = Duration::from_nanos(period);
        let gcra = Gcra::new(count, per, burst).unwrap();
        prop_assert_eq!(&Gcra::token_bucket(burst, count, per).unwrap(), &gcra);
        let meter = Gcra::leaky_meter(burst, count, per).unwrap();
        prop_assert_eq!(&meter, &gcra);
        let exact = |a: &GcraState, b: &GcraState| a == b;
        let opts = Opts { penalty: false, retry_known: true, same_state: &exact, counts_over: true };
        check_model(&meter, meter.fresh(), LeakyMeter::new(burst, count, period), &steps, &opts)?;
    }

    /// A clock going backwards never refills the bucket.
    #[test]
    fn gcra_clock_backwards(((count, period, burst), steps) in params().prop_flat_map(|(c, p, b)| {
        let t = (p / c).max(1);
        (Just((c, p, b)), backwards_schedule(t, t.saturating_mul(b.min(64)), b, 40))
    })) {
        let gcra = Gcra::new(count, Duration::from_nanos(period), burst).unwrap();
        check_backwards(&gcra, &steps, |a| rate_bound(a, count, period, burst))?;
    }
}

#[test]
fn doc_example_ten_per_second_burst_five() {
    let gcra = Gcra::new(10, Duration::from_secs(1), 5).unwrap();
    let mut s = gcra.fresh();
    let t0 = Timestamp::from_secs(1);
    for remaining in (0..5).rev() {
        let d = gcra.decide(&mut s, t0, 1, Apply::Commit);
        assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, remaining));
    }
    let d = gcra.decide(&mut s, t0, 1, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
    assert_eq!(d.reset_after, Duration::from_millis(500));
    let d = gcra.decide(&mut s, t0 + Duration::from_millis(100), 1, Apply::Commit);
    assert!(d.is_allowed());
}

#[test]
fn three_per_second_is_exact() {
    // T = 333 333 333⅓ ns: after 3 requests the bucket is full again after
    // exactly 1 s, not 999 999 999 ns.
    let gcra = Gcra::new(3, Duration::from_secs(1), 3).unwrap();
    let mut s = gcra.fresh();
    let t0 = Timestamp::from_secs(10);
    for _ in 0..3 {
        assert!(gcra.decide(&mut s, t0, 1, Apply::Commit).is_allowed());
    }
    let d = gcra.decide(&mut s, t0, 3, Apply::Check);
    assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(d.reset_after, Duration::from_secs(1));
    let d = gcra.decide(&mut s, t0, 1, Apply::Check);
    assert_eq!(d.retry_after, Some(Duration::from_nanos(333_333_334)));
    let just_before = Timestamp::from_nanos(t0.as_nanos() + SEC - 1);
    assert!(
        gcra.decide(&mut s.clone(), just_before, 3, Apply::Check)
            .is_denied()
    );
    assert!(
        gcra.decide(&mut s.clone(), t0 + Duration::from_secs(1), 3, Apply::Check)
            .is_allowed()
    );
}

#[test]
fn cost_above_burst_is_never_even_when_full() {
    let gcra = Gcra::new(10, Duration::from_secs(1), 5).unwrap();
    let mut s = gcra.fresh();
    let d = gcra.decide(&mut s, Timestamp::from_secs(5), 6, Apply::Commit);
    assert_eq!(
        (d.outcome, d.retry_after, d.remaining),
        (Outcome::Never, None, 5)
    );
    assert_eq!(s, gcra.fresh());
}

#[test]
fn a_forced_cost_above_burst_is_charged_whole_and_repaid_by_the_drip() {
    // 10 per second, 5 at most; a cost of 8 known after the response.
    let gcra = Gcra::new(10, Duration::from_secs(1), 5).unwrap();
    let mut s = gcra.fresh();
    let t0 = Timestamp::from_secs(5);
    let d = gcra.decide(&mut s, t0, 8, Apply::Force);
    assert_eq!((d.outcome, d.remaining), (Outcome::Never, 0));
    // 3 tokens in debt: a check is denied until they drip back (300 ms),
    // a request of cost 1 until one more has (400 ms).
    let check = gcra.decide(&mut s.clone(), t0, 0, Apply::Commit);
    assert_eq!(check.retry_after, Some(Duration::from_millis(300)));
    let one = gcra.decide(&mut s.clone(), t0, 1, Apply::Commit);
    assert_eq!(one.retry_after, Some(Duration::from_millis(400)));
    let at = |ms| t0 + Duration::from_millis(ms);
    assert!(
        gcra.decide(&mut s.clone(), at(299), 0, Apply::Commit)
            .is_denied()
    );
    assert!(
        gcra.decide(&mut s.clone(), at(300), 0, Apply::Commit)
            .is_allowed()
    );
    assert!(
        gcra.decide(&mut s.clone(), at(399), 1, Apply::Commit)
            .is_denied()
    );
    assert!(gcra.decide(&mut s, at(400), 1, Apply::Commit).is_allowed());
}

/// The models' own arithmetic at their extremes: a debt (a level)
/// saturated by costs of `u64::MAX` is still a balance they can refill
/// (drain) from (a case the property test once drew).
#[test]
fn the_models_survive_a_saturated_balance() {
    let mut bucket = TokenBucket::new(266, 1, 3_153_600_000_000_000_000);
    let end = u128::from(u64::MAX);
    bucket.charge(end, u64::MAX);
    bucket.scaled = i128::MIN;
    assert_eq!(bucket.remaining_at(end), 0);
    assert!(!bucket.admits_at(end, 1));
    let mut meter = LeakyMeter::new(266, 1, 3_153_600_000_000_000_000);
    meter.charge(end, u64::MAX);
    meter.scaled_level = i128::MAX;
    assert_eq!(meter.remaining_at(end), 0);
}
