//! The leaky-bucket shaper against nginx's `limit_req` accounting, rewritten
//! here from nginx's source (`ngx_http_limit_req_lookup` and
//! `ngx_http_limit_req_account`): milli-requests, millisecond time (ns / 10^6
//! truncated), `excess = max(0, excess − rate·ms/1000 + 1000)`, reject iff
//! `excess > burst`, rejects change nothing, `last` only moves when `ms != 0`,
//! a new node starts at excess 0, and the delay is
//! `(excess − delay)·1000/rate` ms. Weighted costs add `1000·(cost − 1)`.
//! One key alone in its zone, whose node nginx never deletes.

use crate::common;

use std::time::Duration;

use common::*;
use floodgate::algorithms::{AnyState, NginxRate, Shaper, ShaperDelay, ShaperState};
use floodgate::{Algorithm, Apply, MAX_COUNT, Outcome, Timestamp};
use proptest::prelude::*;

/// One nginx node (`None`: the key has no node yet).
#[derive(Clone, Debug)]
struct Nginx {
    /// Milli-requests per second (`N r/s` → N·1000, `N r/m` → N·1000/60).
    rate: u128,
    /// Milli-requests.
    burst: u128,
    /// Milli-requests passed without delay; `None` is `nodelay`.
    delay: Option<u128>,
    /// `(excess, last)`: milli-requests, milliseconds.
    node: Option<(u128, u128)>,
}

impl Nginx {
    fn new(rate: NginxRate, burst: u64, delay: ShaperDelay) -> Self {
        let rate = match rate {
            NginxRate::PerSecond(n) => u128::from(n) * 1000,
            NginxRate::PerMinute(n) => u128::from(n) * 1000 / 60,
        };
        let delay = match delay {
            ShaperDelay::Queue => Some(0),
            ShaperDelay::NoDelay => None,
            ShaperDelay::After(n) => Some(u128::from(n) * 1000),
        };
        Nginx {
            rate,
            burst: u128::from(burst) * 1000,
            delay,
            node: None,
        }
    }

    /// The excess a request of cost 1 computes at `t` (ns).
    fn excess_at(&self, t: u128) -> u128 {
        match self.node {
            None => 0,
            Some((excess, last)) => {
                // A clock behind `last` counts as no time elapsed.
                let ms = (t / 1_000_000).saturating_sub(last);
                // A key alone in its zone keeps its node (nginx deletes
                // nodes only when another key needs one: tests/prop_zone.rs).
                let drained = self.rate.saturating_mul(ms) / 1000;
                (excess + 1000).saturating_sub(drained)
            }
        }
    }

    fn excess_with_cost(&self, t: u128, cost: u64) -> u128 {
        self.excess_at(t) + 1000 * (u128::from(cost) - 1)
    }
}

impl Model for Nginx {
    fn limit(&self) -> u64 {
        (self.burst / 1000 + 1) as u64
    }
    fn remaining_at(&self, t: u128) -> u64 {
        let excess = self.excess_at(t);
        if excess > self.burst {
            0
        } else {
            ((self.burst - excess) / 1000 + 1) as u64
        }
    }
    fn admits_at(&self, t: u128, cost: u64) -> bool {
        self.excess_with_cost(t, cost) <= self.burst
    }
    fn charge(&mut self, t: u128, cost: u64) {
        let excess = self.excess_with_cost(t, cost);
        let now = t / 1_000_000;
        let last = match self.node {
            Some((_, last)) if now <= last => last,
            _ => now,
        };
        self.node = Some((excess, last));
    }
    fn admitted(&self, t: u128, cost: u64) -> Outcome {
        let excess = self.excess_with_cost(t, cost);
        let ms = match self.delay {
            Some(threshold) if excess > threshold => (excess - threshold) * 1000 / self.rate,
            _ => 0,
        };
        // nginx passes at once when the delay truncates to 0 ms.
        if ms == 0 {
            Outcome::Allowed
        } else {
            Outcome::Delayed(Duration::from_millis(ms as u64))
        }
    }
}

fn params() -> impl Strategy<Value = (NginxRate, u64, ShaperDelay)> {
    let n = prop_oneof![6 => 1..=30u64, 2 => 1..=10_000u64, 1 => Just(MAX_COUNT)];
    let rate = prop_oneof![
        n.clone().prop_map(NginxRate::PerSecond),
        n.prop_map(NginxRate::PerMinute),
    ];
    let burst =
        prop_oneof![2 => Just(0u64), 6 => 0..=20u64, 1 => 0..=1_000u64, 1 => Just(MAX_COUNT)];
    let delay = prop_oneof![
        Just(ShaperDelay::Queue),
        Just(ShaperDelay::NoDelay),
        (0..=25u64).prop_map(ShaperDelay::After),
        Just(ShaperDelay::After(MAX_COUNT)),
    ];
    (rate, burst, delay)
}

/// Gaps scaled to one request's drain time and to the whole burst's.
fn scales(rate: NginxRate, burst: u64) -> (u64, u64) {
    let milli_per_sec = match rate {
        NginxRate::PerSecond(n) => n.saturating_mul(1000),
        NginxRate::PerMinute(n) => n.saturating_mul(1000) / 60,
    };
    let per_request = (1_000_000u128 * u128::from(SEC) / u128::from(milli_per_sec)).max(1) as u64;
    (per_request, per_request.saturating_mul(burst.min(64) + 1))
}

fn case() -> impl Strategy<Value = ((NginxRate, u64, ShaperDelay), Vec<Step>)> {
    params().prop_flat_map(|(rate, burst, delay)| {
        let (small, big) = scales(rate, burst);
        (
            Just((rate, burst, delay)),
            schedule(small, big, burst.saturating_add(1), 40),
        )
    })
}

/// Over any passes `i < j` (at ms `m_i ≤ m_j`), the cost passed after `i` up
/// to `j` drains within the burst: `1000·Σ cost ≤ burst + rate·(m_j − m_i)/1000`.
fn drain_bound(admitted: &[(u64, u64)], model: &Nginx) -> Result<(), TestCaseError> {
    let v = sorted(admitted);
    for i in 0..v.len() {
        let mut sum = 0u128;
        for j in i + 1..v.len() {
            sum += u128::from(v[j].1);
            let ms = u128::from(v[j].0 / MS - v[i].0 / MS);
            prop_assert!(
                1000 * sum * 1000 <= model.burst * 1000 + model.rate * ms,
                "passed {} within {} ms",
                sum,
                ms
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(160))]

    /// Every decision (pass, delay(d) or reject, and every field) equals
    /// nginx's, plain, in penalty mode and as an `AnyLimit`.
    #[test]
    fn shaper_matches_nginx(((rate, burst, delay), steps) in case()) {
        let shaper = Shaper::new(rate, burst, delay).unwrap();
        let model = Nginx::new(rate, burst, delay);
        let fresh = AnyState::Shaper(ShaperState::default());
        let (admitted, admitted_pen) = check_all_modes(&shaper, &model, &steps, fresh)?;
        drain_bound(&admitted, &model)?;
        drain_bound(&admitted_pen, &model)?;
    }

    /// A clock going backwards drains nothing.
    #[test]
    fn shaper_clock_backwards(((rate, burst, delay), steps) in params().prop_flat_map(|(r, b, d)| {
        let (small, big) = scales(r, b);
        (Just((r, b, d)), backwards_schedule(small, big, b.saturating_add(1), 40))
    })) {
        let shaper = Shaper::new(rate, burst, delay).unwrap();
        let model = Nginx::new(rate, burst, delay);
        check_backwards(&shaper, &steps, |a| drain_bound(a, &model))?;
    }
}

/// `n` requests of cost 1 at the same instant.
fn burst_of(shaper: &Shaper, n: usize) -> Vec<Outcome> {
    let mut s = shaper.fresh();
    let t = Timestamp::from_nanos(1_234 * SEC + 567_890);
    (0..n)
        .map(|_| shaper.decide(&mut s, t, 1, Apply::Commit).outcome)
        .collect()
}

fn delayed(ms: u64) -> Outcome {
    Outcome::Delayed(Duration::from_millis(ms))
}

#[test]
fn nginx_rate_10_burst_5_nodelay() {
    let shaper = Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::NoDelay).unwrap();
    let outcomes = burst_of(&shaper, 20);
    assert_eq!(outcomes[..6], [Outcome::Allowed; 6]);
    assert_eq!(outcomes[6..], [Outcome::Denied; 14]);
}

#[test]
fn nginx_rate_10_burst_5_queued() {
    let shaper = Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::Queue).unwrap();
    let outcomes = burst_of(&shaper, 20);
    let mut expected = vec![Outcome::Allowed];
    expected.extend([100, 200, 300, 400, 500].map(delayed));
    assert_eq!(outcomes[..6], expected[..]);
    assert_eq!(outcomes[6..], [Outcome::Denied; 14]);
}

#[test]
fn nginx_rate_10_burst_12_delay_8() {
    let shaper = Shaper::new(NginxRate::PerSecond(10), 12, ShaperDelay::After(8)).unwrap();
    let outcomes = burst_of(&shaper, 15);
    assert_eq!(outcomes[..9], [Outcome::Allowed; 9]);
    assert_eq!(outcomes[9..13], [100, 200, 300, 400].map(delayed));
    assert_eq!(outcomes[13..], [Outcome::Denied; 2]);
}

#[test]
fn nginx_one_per_minute_drains_every_62_5_seconds() {
    // 1r/m is 1000/60 = 16 milli-requests per second (truncated), so one
    // request drains in 1000·1000/16 ms = 62.5 s. With burst=1 two requests
    // pass at once and the stored excess (1000) keeps the node alive past
    // the minute, so the drain alone decides.
    let shaper = Shaper::new(NginxRate::PerMinute(1), 1, ShaperDelay::NoDelay).unwrap();
    assert_eq!(shaper.rate_millis(), 16);
    let t0 = 5_000 * SEC;
    let mut s = shaper.fresh();
    let at = |ms: u64| Timestamp::from_nanos(t0 + ms * MS);
    assert!(shaper.decide(&mut s, at(0), 1, Apply::Commit).is_allowed());
    assert!(shaper.decide(&mut s, at(0), 1, Apply::Commit).is_allowed());
    assert!(shaper.decide(&mut s, at(0), 1, Apply::Commit).is_denied());
    // At +62 s: excess = 1000 − 16·62000/1000 + 1000 = 1008 > 1000.
    let d = shaper.decide(&mut s, at(62_000), 1, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_millis(500)));
    // At +62.499 s the drain is 16·62499/1000 = 999 (truncated): 1001.
    assert!(
        shaper
            .decide(&mut s, at(62_499), 1, Apply::Commit)
            .is_denied()
    );
    // The last nanosecond of that millisecond still truncates to 62 499.
    let just_before = Timestamp::from_nanos(t0 + 62_500 * MS - 1);
    assert!(
        shaper
            .decide(&mut s, just_before, 1, Apply::Commit)
            .is_denied()
    );
    let d = shaper.decide(&mut s, at(62_500), 1, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Allowed);
    // The key keeps its node (alone in its zone): 1000 − 1000 + 1000 is
    // stored, so the burst is not whole again.
    assert_eq!(s.excess(), 1000);
    assert!(
        shaper
            .decide(&mut s, at(62_500), 1, Apply::Commit)
            .is_denied()
    );
    // And the next one 62.5 s after that.
    assert!(
        shaper
            .decide(&mut s, at(124_999), 1, Apply::Commit)
            .is_denied()
    );
    assert!(
        shaper
            .decide(&mut s, at(125_000), 1, Apply::Commit)
            .is_allowed()
    );
}

#[test]
fn nginx_keeps_a_lone_keys_node_past_the_minute() {
    // 1r/m, burst=0: after a pass the stored excess is 0, which nginx's
    // expiry test counts as drained after a minute; but only another key's
    // arrival deletes the node (tests/prop_zone.rs). Alone, the key waits
    // the full 62.5 s: rejected at 61 and 62 s, as nginx 1.22 does.
    let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
    assert!(shaper.expiry_shows());
    let t0 = 5_000 * SEC;
    let mut s = shaper.fresh();
    let at = |ms: u64| Timestamp::from_nanos(t0 + ms * MS);
    assert!(shaper.decide(&mut s, at(0), 1, Apply::Commit).is_allowed());
    assert!(!shaper.expirable(&s, at(59_999)));
    assert!(shaper.expirable(&s, at(60_000)));
    let d = shaper.decide(&mut s, at(59_999), 1, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_millis(2_501)));
    assert_eq!(d.reset_after, Duration::from_millis(2_501));
    for ms in [61_000, 62_000, 62_499] {
        let d = shaper.decide(&mut s, at(ms), 1, Apply::Commit);
        assert_eq!(d.outcome, Outcome::Denied, "at {ms} ms");
        assert_eq!(d.retry_after, Some(Duration::from_millis(62_500 - ms)));
    }
    assert!(
        shaper
            .decide(&mut s, at(62_500), 1, Apply::Commit)
            .is_allowed()
    );
    // A node that has not drained is not expirable, whatever its age:
    // burst=5 after six requests holds 5000, and 61 s drain only 976 of it.
    let shaper = Shaper::new(NginxRate::PerMinute(1), 5, ShaperDelay::NoDelay).unwrap();
    let mut s = shaper.fresh();
    for _ in 0..6 {
        assert!(shaper.decide(&mut s, at(0), 1, Apply::Commit).is_allowed());
    }
    assert!(!shaper.expirable(&s, at(61_000)));
    assert!(
        shaper
            .decide(&mut s, at(61_000), 1, Apply::Commit)
            .is_denied()
    );
}

#[test]
fn nginx_expiry_shows_only_when_a_minute_drains_less_than_the_burst() {
    let shows = |rate, burst| {
        Shaper::new(rate, burst, ShaperDelay::NoDelay)
            .unwrap()
            .expiry_shows()
    };
    // 1r/m drains 960 units a minute: less than one request.
    assert!(shows(NginxRate::PerMinute(1), 0));
    // 2r/m drains 1980: at most one request's worth of burst is left.
    assert!(!shows(NginxRate::PerMinute(2), 0));
    assert!(shows(NginxRate::PerMinute(2), 1));
    // 1r/s drains 60 requests a minute.
    assert!(!shows(NginxRate::PerSecond(1), 59));
    assert!(shows(NginxRate::PerSecond(1), 60));
    assert!(!shows(NginxRate::PerSecond(1 << 30), 1 << 30));
}

#[test]
fn nginx_last_only_moves_when_a_millisecond_passed() {
    // rate=1000r/s drains one request per ms; two requests within the same
    // ms accumulate, the drain counts from the first one's millisecond.
    let shaper = Shaper::new(NginxRate::PerSecond(1000), 1, ShaperDelay::NoDelay).unwrap();
    let mut s = shaper.fresh();
    let t = 10 * SEC;
    assert!(
        shaper
            .decide(&mut s, Timestamp::from_nanos(t), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        shaper
            .decide(&mut s, Timestamp::from_nanos(t + 999_999), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(s.excess(), 1000);
    assert!(
        shaper
            .decide(&mut s, Timestamp::from_nanos(t + 999_999), 1, Apply::Commit)
            .is_denied()
    );
    // 1 ms after the first: 1000 − 1000 + 1000.
    assert!(
        shaper
            .decide(&mut s, Timestamp::from_nanos(t + MS), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(s.excess(), 1000);
}
