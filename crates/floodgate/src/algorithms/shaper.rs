//! The leaky bucket as a shaper, with nginx `limit_req` semantics.
//!
//! The accounting is nginx's, unit for unit: the state is `excess` in
//! milli-requests (1000 = one request) and `last`, a millisecond timestamp.
//! A request at `now_ms` computes
//!
//! `excess = max(0, excess − rate·(now_ms − last)/1000 + 1000)`
//!
//! (integer division, `rate` in milli-requests per second: `N r/s` is
//! `N·1000`, `N r/m` is `N·1000/60` truncated, so `1r/m` drains one request
//! every 62.5 s exactly as nginx does). A request is rejected iff
//! `excess > burst·1000`; a rejection changes nothing. Otherwise the state
//! becomes `excess` (and `last = now_ms` unless no millisecond has passed) and
//! the request waits `(excess − delay·1000)·1000/rate` ms when `excess`
//! exceeds the `delay` threshold (0 by default, infinite with `nodelay`). A
//! key never seen starts at `excess = 0`, so an instant burst admits
//! `burst + 1` requests.
//!
//! A weighted request of cost `n` adds `1000·(n − 1)` on top (the first unit
//! is accounted exactly as nginx accounts a request), so `n = 1` is nginx
//! and a cost that can never fit (`1000·(n − 1) > burst·1000`) is
//! [`Outcome::Never`]. A clock that goes backwards counts as no time elapsed.
//!
//! A key's state is kept until it has drained, as nginx keeps a key's node
//! while no other key of its zone needs one. nginx also deletes a node that
//! has been idle for a minute and has drained without the `+ 1000`
//! ([`Shaper::expirable`]), but only when *another* key of the same zone is
//! given a node: that is a property of the zone, not of the key, and
//! [`ShaperZone`](crate::store::ShaperZone) reproduces it. It can change a
//! decision only when a minute drains less than `burst + 1` requests
//! ([`Shaper::expiry_shows`]): at `1r/m` without a burst, a key alone is
//! still rejected 62 s after its last pass and passes at 62.5 s, while a key
//! whose node another key's arrival deleted passes from 60 s on.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::arith::{Divisor, sat64};
use crate::error::{ConfigError, MAX_COUNT, check_count};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape};

/// An nginx `rate=`: requests per second or per minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NginxRate {
    /// `N r/s`.
    PerSecond(u64),
    /// `N r/m` (stored as `N·1000/60` milli-requests per second, truncated).
    PerMinute(u64),
}

/// What the shaper does with requests inside the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ShaperDelay {
    /// Delay every request that is ahead of the rate (nginx's default).
    #[default]
    Queue,
    /// Pass everything inside the burst at once (`nodelay`).
    NoDelay,
    /// Pass the first `N` excess requests at once, delay the rest up to the
    /// burst (`delay=N`).
    After(u64),
}

/// nginx `limit_req` as a decision function: pass, delay(d) or reject.
///
/// ```
/// use floodgate::{Algorithm, Apply, Outcome, Timestamp};
/// use floodgate::algorithms::{NginxRate, Shaper, ShaperDelay};
/// use std::time::Duration;
///
/// // rate=10r/s burst=5: an instant burst is delayed 0, 100, ..., 500 ms.
/// let shaper = Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::Queue).unwrap();
/// let mut s = shaper.fresh();
/// let t = Timestamp::from_secs(1);
/// let delays: Vec<_> = (0..6).map(|_| shaper.decide(&mut s, t, 1, Apply::Commit).delay()).collect();
/// assert_eq!(delays[5], Duration::from_millis(500));
/// assert_eq!(shaper.decide(&mut s, t, 1, Apply::Commit).outcome, Outcome::Denied);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shaper {
    /// Milli-requests per second.
    rate: u64,
    /// Milli-requests.
    burst: u64,
    /// `burst` in whole requests (`burst / 1000`).
    burst_requests: u64,
    /// Milli-requests passed without delay.
    delay: u64,
    /// Division by `rate`.
    per_rate: Divisor,
}

/// nginx's node: `excess` (milli-requests) and `last` (ms); `last == u64::MAX`
/// means the key has no node yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShaperState {
    excess: u64,
    last: u64,
}

/// How long a node must be idle before nginx may delete it (ms).
pub(crate) const EXPIRE_MS: u64 = 60_000;

impl Default for ShaperState {
    fn default() -> Self {
        ShaperState {
            excess: 0,
            last: u64::MAX,
        }
    }
}

impl ShaperState {
    /// The stored excess in milli-requests (0 for a key never seen).
    pub fn excess(&self) -> u64 {
        self.excess
    }

    /// The excess and the last instant (ms), as held.
    pub(crate) fn parts(&self) -> (u64, u64) {
        (self.excess, self.last)
    }

    /// The state of these [`parts`](Self::parts).
    pub(crate) fn from_parts(excess: u64, last: u64) -> Self {
        ShaperState { excess, last }
    }
}

impl Shaper {
    /// `rate`, `burst` in requests, and the delay mode.
    pub fn new(rate: NginxRate, burst: u64, delay: ShaperDelay) -> Result<Self, ConfigError> {
        let rate = match rate {
            NginxRate::PerSecond(n) => check_count("rate", n)? * 1000,
            NginxRate::PerMinute(n) => check_count("rate", n)? * 1000 / 60,
        };
        if burst > MAX_COUNT {
            return Err(ConfigError::new(
                "burst",
                format!("must be at most {MAX_COUNT} (got {burst})"),
            ));
        }
        let delay = match delay {
            ShaperDelay::Queue => 0,
            ShaperDelay::NoDelay => u64::MAX,
            ShaperDelay::After(n) if n > MAX_COUNT => {
                return Err(ConfigError::new(
                    "delay",
                    format!("must be at most {MAX_COUNT} (got {n})"),
                ));
            }
            ShaperDelay::After(n) => n * 1000,
        };
        Ok(Shaper {
            rate,
            burst: burst * 1000,
            burst_requests: burst,
            delay,
            per_rate: Divisor::new(rate),
        })
    }

    /// The rate in milli-requests per second, as nginx stores it.
    pub fn rate_millis(&self) -> u64 {
        self.rate
    }

    /// The burst in requests.
    pub fn burst(&self) -> u64 {
        self.burst / 1000
    }

    /// The delay threshold in milli-requests: 0 by default, `N·1000` with
    /// `delay=N`, `u64::MAX` with `nodelay`.
    pub fn delay_millis(&self) -> u64 {
        self.delay
    }

    /// The excess the next request would compute before its own extra cost:
    /// `max(0, excess − rate·ms/1000 + 1000)`, or 0 for a key never seen.
    #[inline]
    fn next_excess(&self, s: &ShaperState, now_ms: u64) -> u64 {
        if s.last == u64::MAX {
            return 0;
        }
        let ms = now_ms.saturating_sub(s.last);
        s.excess
            .saturating_add(1000)
            .saturating_sub(self.drained(ms))
    }

    /// `rate·ms/1000`, saturating.
    #[inline]
    fn drained(&self, ms: u64) -> u64 {
        match self.rate.checked_mul(ms) {
            Some(p) => p / 1000,
            None => sat64(u128::from(self.rate) * u128::from(ms) / 1000),
        }
    }

    /// Whether nginx would delete this key's node at `now` if another key of
    /// its zone were given one then (`ngx_http_limit_req_expire`): idle for
    /// a minute at least and drained, `excess ≤ rate·ms/1000` (without the
    /// `+ 1000` of a request). A node that was never charged (its key was
    /// looked up by a request another limit rejected) always is.
    #[inline]
    pub fn expirable(&self, s: &ShaperState, now: Timestamp) -> bool {
        if s.last == u64::MAX {
            return true;
        }
        let ms = now.as_millis().saturating_sub(s.last);
        ms >= EXPIRE_MS && s.excess <= self.drained(ms)
    }

    /// Whether deleting [expirable](Self::expirable) nodes can change a
    /// decision of this limit: only when a minute drains less than
    /// `burst + 1` requests (`60·rate < (burst + 1)·1000` in milli-requests),
    /// so that a node can be expirable while its key's next request would
    /// still find excess left. Otherwise a key's own state decides
    /// everything, whatever the rest of its zone does.
    #[inline]
    pub fn expiry_shows(&self) -> bool {
        u128::from(self.rate) * 60 < u128::from(self.burst) + 1000
    }

    /// Milliseconds after `last` at which `rate·ms/1000 ≥ units`.
    #[inline]
    fn ms_to_drain(&self, units: u128) -> u128 {
        match u64::try_from(units)
            .ok()
            .and_then(|u| self.ms_to_drain_64(u))
        {
            Some(ms) => u128::from(ms),
            None => (units * 1000).div_ceil(u128::from(self.rate)),
        }
    }

    /// [`ms_to_drain`](Self::ms_to_drain) in 64 bits, when `units·1000`
    /// fits in them.
    #[inline]
    fn ms_to_drain_64(&self, units: u64) -> Option<u64> {
        units
            .checked_mul(1000)
            .map(|scaled| self.per_rate.div_ceil(scaled))
    }

    /// The delay (ms) of a request admitted at `excess`: what exceeds the
    /// delay threshold, drained at the rate.
    #[inline]
    fn delay_ms(&self, excess: u64) -> u64 {
        match excess.checked_sub(self.delay) {
            Some(over) if over > 0 => match over.checked_mul(1000) {
                Some(scaled) => self.per_rate.div(scaled),
                None => sat64(u128::from(over) * 1000 / u128::from(self.rate)),
            },
            _ => 0,
        }
    }

    /// Charges the node: `excess` at `now_ms`. Returns what the next
    /// request would start from.
    #[inline]
    fn charge(s: &mut ShaperState, now_ms: u64, excess: u64) -> u64 {
        // `last` moves only when a millisecond has passed (branch-free:
        // whether it has is a coin flip on busy keys).
        s.last = if s.last == u64::MAX {
            now_ms
        } else {
            s.last.max(now_ms)
        };
        s.excess = excess;
        excess.saturating_add(1000)
    }

    /// The wait of a denied request costing `extra` more than one: the
    /// earliest ms after `last` with `excess − rate·ms/1000 + 1000 + extra
    /// ≤ burst`.
    #[inline]
    fn retry_after(&self, s: &ShaperState, extra: u64, now: Timestamp) -> Duration {
        let need = (u128::from(s.excess) + 1000 + u128::from(extra))
            .saturating_sub(u128::from(self.burst));
        until_ms(u128::from(s.last) + self.ms_to_drain(need), now)
    }

    /// The time until the node is idle (its reset) and that instant.
    #[inline]
    fn reset_and_idle(&self, s: &ShaperState, now: Timestamp) -> (Duration, Timestamp) {
        match self.idle_ms(s) {
            // The usual case in 64 bits: an instant before the end of time.
            Some(at) if at <= u128::from(u64::MAX / 1_000_000) => {
                let at = at as u64 * 1_000_000;
                (
                    Duration::from_nanos(at.saturating_sub(now.as_nanos())),
                    Timestamp::from_nanos(at),
                )
            }
            Some(at) => {
                let at = at_nanos(at);
                (
                    Duration::from_nanos(sat64(at.saturating_sub(u128::from(now.as_nanos())))),
                    Timestamp::from_nanos(sat64(at)),
                )
            }
            None => (Duration::ZERO, now),
        }
    }

    /// The instant a node with this state behaves like no node at all: when
    /// `excess + 1000` has drained.
    #[inline]
    fn idle_ms(&self, s: &ShaperState) -> Option<u128> {
        (s.last != u64::MAX).then(|| {
            // In 64 bits on the usual path.
            let drained = match s.excess.checked_add(1000) {
                Some(units) => self.ms_to_drain_64(units).map(u128::from),
                None => None,
            }
            .unwrap_or_else(|| self.ms_to_drain(u128::from(s.excess) + 1000));
            u128::from(s.last) + drained
        })
    }
}

#[inline]
fn until_ms(at_ms: u128, now: Timestamp) -> Duration {
    Duration::from_nanos(sat64(
        at_nanos(at_ms).saturating_sub(u128::from(now.as_nanos())),
    ))
}

/// `at_ms` in nanoseconds, in 128 bits: near the end of time the instant
/// itself may not fit in 64 bits.
#[inline]
fn at_nanos(at_ms: u128) -> u128 {
    if at_ms <= u128::from(u64::MAX / 1_000_000) {
        u128::from(at_ms as u64 * 1_000_000)
    } else {
        at_ms.saturating_mul(1_000_000)
    }
}

impl Shape for Shaper {
    fn name(&self) -> &'static str {
        "shaper"
    }

    /// The burst plus the request passed at once, drained at the rate.
    fn quota(&self) -> Quota {
        let limit = self.burst() + 1;
        let millis = (u128::from(limit) * 1_000_000).div_ceil(u128::from(self.rate.max(1)));
        Quota {
            limit,
            window: Some(Duration::from_millis(
                millis.min(u128::from(u64::MAX)) as u64
            )),
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        None
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} r/s burst {}",
            self.rate as f64 / 1000.0,
            self.burst()
        )
    }
}

impl Algorithm for Shaper {
    type State = ShaperState;

    fn fresh(&self) -> ShaperState {
        ShaperState::default()
    }

    fn decide(&self, s: &mut ShaperState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        self.decide_idle(s, now, cost, apply).0
    }

    #[inline]
    fn decide_idle(
        &self,
        s: &mut ShaperState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> (Decision, Timestamp) {
        let now_ms = now.as_millis();
        let limit = self.burst_requests + 1;
        let base = self.next_excess(s, now_ms);
        // 1000·(cost − 1) on top of nginx's own accounting; more than the
        // burst can never fit (and then does not fit in the arithmetic).
        let never = cost.saturating_sub(1) > self.burst_requests;
        let extra = if never {
            0
        } else {
            1000 * cost.saturating_sub(1)
        };
        let excess = base.saturating_add(extra);
        let (outcome, charge) = if cost == 0 {
            (Outcome::Allowed, false)
        } else if never {
            (Outcome::Never, false)
        } else if excess <= self.burst {
            let delay = self.delay_ms(excess);
            let outcome = if delay == 0 {
                Outcome::Allowed
            } else {
                Outcome::Delayed(Duration::from_millis(delay))
            };
            (outcome, apply.charge_if_allowed())
        } else {
            (Outcome::Denied, apply.charge_if_denied())
        };
        // What the next request would start from (its `base`).
        let next = if charge {
            Self::charge(s, now_ms, excess)
        } else {
            base
        };
        let retry_after = (outcome == Outcome::Denied).then(|| self.retry_after(s, extra, now));
        let remaining = match self.burst.checked_sub(next) {
            Some(room) => room / 1000 + 1,
            None => 0,
        };
        let (reset_after, idle) = self.reset_and_idle(s, now);
        (
            Decision {
                outcome,
                limit,
                remaining,
                reset_after,
                retry_after,
            },
            idle,
        )
    }

    fn idle_at(&self, s: &ShaperState, now: Timestamp) -> Timestamp {
        match self.idle_ms(s) {
            Some(at) => Timestamp::from_nanos(sat64(at_nanos(at))),
            None => now,
        }
    }
}
