//! GCRA — and, through the same arithmetic, the token bucket and the
//! leaky bucket as a meter.
//!
//! A limit of `count` requests per `period` with a burst capacity `B` has the
//! emission interval `T = period / count` and the tolerance `τ = (B − 1)·T`.
//! The only state is the theoretical arrival time `TAT`. A request of cost `n`
//! at `t` conforms iff `max(TAT, t) + n·T ≤ t + B·T`, and then
//! `TAT ← max(TAT, t) + n·T` (ITU-T I.371 virtual scheduling, as governor and
//! redis-cell; governor's `Quota::per_second(n)` is `Gcra::new(n, 1s, n)`).
//!
//! **Token bucket mapping.** A bucket of capacity `C` refilled continuously
//! with `r` tokens per `p` holds `C − (TAT − t)/T` tokens when `TAT > t`, and is
//! full otherwise: GCRA with `B = C`, `T = p/r` *is* the token bucket with lazy
//! continuous refill, starting full, including weighted costs. **Leaky bucket
//! meter mapping.** A counter-based leaky bucket of capacity `C` draining `r`
//! per `p` holds the level `(TAT − t)/T`; it admits a request of cost `n` iff
//! `level + n ≤ C`: again the same test.
//!
//! **Exactness.** `T` is usually not a whole number of nanoseconds (3 per
//! second is 333 333 333⅓ ns). Time is therefore measured in *ticks* of
//! `1/c` ns, where `period/count = p/c` in lowest terms, so `T = p` ticks
//! exactly and no fractional refill is ever lost or rounded. Most quotas
//! (10/s, 1000/h) have `c = 1`.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::arith::{Divisor, div_ceil, gcd, nanos, sat64};
use crate::error::{ConfigError, check_count, check_period};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape, saturating_nanos};

/// Generic cell rate algorithm: `count` per `period`, with a burst capacity.
/// Also the token bucket and the leaky-bucket meter (see the module docs).
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::Gcra;
/// use std::time::Duration;
///
/// // 10 per second, bursts of up to 5.
/// let gcra = Gcra::new(10, Duration::from_secs(1), 5).unwrap();
/// let mut tat = gcra.fresh();
/// let t0 = Timestamp::from_secs(1);
/// for _ in 0..5 {
///     assert!(gcra.decide(&mut tat, t0, 1, Apply::Commit).is_allowed());
/// }
/// let d = gcra.decide(&mut tat, t0, 1, Apply::Commit);
/// assert!(d.is_denied());
/// assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gcra {
    /// Emission interval in ticks.
    t: u64,
    /// Ticks per nanosecond.
    c: u64,
    burst: u64,
    /// `burst · t`: the tolerance plus one interval, in ticks.
    window: u128,
    count: u64,
    period: u64,
    /// Division by `t`.
    per_t: Divisor,
    /// `window` when time needs no ticks (`c = 1`) and it fits in 64 bits:
    /// the 64-bit path of [`Gcra::admit_fast`]; 0 otherwise.
    window64: u64,
}

/// GCRA state: the theoretical arrival time in ticks (0 for a fresh key),
/// held as two 64-bit words: 8-byte aligned, so that it adds no padding to
/// a store entry or to [`AnyState`](super::AnyState) (24 bytes, where a
/// `u128` would make it 32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GcraState {
    lo: u64,
    hi: u64,
}

impl GcraState {
    /// The state whose theoretical arrival time is `ticks`.
    #[inline]
    pub const fn from_ticks(ticks: u128) -> Self {
        GcraState {
            lo: ticks as u64,
            hi: (ticks >> 64) as u64,
        }
    }

    /// The theoretical arrival time in ticks.
    #[inline]
    pub const fn ticks(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

impl Gcra {
    /// `count` requests per `period`, admitting up to `burst` at once.
    pub fn new(count: u64, period: Duration, burst: u64) -> Result<Self, ConfigError> {
        let count = check_count("count", count)?;
        let period = check_period("period", period)?;
        let burst = check_count("burst", burst)?;
        let g = gcd(period, count);
        let (t, c) = (period / g, count / g);
        Ok(Gcra {
            t,
            c,
            burst,
            window: u128::from(burst) * u128::from(t),
            count,
            period,
            per_t: Divisor::new(t),
            window64: match u64::try_from(u128::from(burst) * u128::from(t)) {
                Ok(w) if c == 1 => w,
                _ => 0,
            },
        })
    }

    /// `count` per second with a burst of `count` (governor's `per_second`).
    pub fn per_second(count: u64) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(1), count)
    }

    /// `count` per minute with a burst of `count`.
    pub fn per_minute(count: u64) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(60), count)
    }

    /// `count` per hour with a burst of `count`.
    pub fn per_hour(count: u64) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(3600), count)
    }

    /// The same rate with another burst capacity.
    pub fn with_burst(self, burst: u64) -> Result<Self, ConfigError> {
        Self::new(self.count, Duration::from_nanos(self.period), burst)
    }

    /// A token bucket holding up to `capacity` tokens, starting full, refilled
    /// continuously with `refill` tokens every `per`.
    pub fn token_bucket(capacity: u64, refill: u64, per: Duration) -> Result<Self, ConfigError> {
        Self::new(refill, per, capacity).map_err(|e| match e.field() {
            "count" => ConfigError::new("refill", e.reason().to_owned()),
            "period" => ConfigError::new("per", e.reason().to_owned()),
            "burst" => ConfigError::new("capacity", e.reason().to_owned()),
            _ => e,
        })
    }

    /// A leaky bucket used as a meter: a level of at most `capacity`, draining
    /// `leak` every `per`, rejecting (never queueing) what does not fit.
    pub fn leaky_meter(capacity: u64, leak: u64, per: Duration) -> Result<Self, ConfigError> {
        Self::token_bucket(capacity, leak, per).map_err(|e| match e.field() {
            "refill" => ConfigError::new("leak", e.reason().to_owned()),
            _ => e,
        })
    }

    /// The burst capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The rate as `(count, period)`.
    pub fn rate(&self) -> (u64, Duration) {
        (self.count, Duration::from_nanos(self.period))
    }

    /// The emission interval `T` (rounded down to whole nanoseconds).
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.period / self.count)
    }

    /// The admitting case of [`decide_idle`](Algorithm::decide_idle) in
    /// 64-bit arithmetic, when every quantity fits (`c = 1`, `TAT` and
    /// `now + window` in 64 bits, `0 < cost ≤ burst`); `None` otherwise, or
    /// when the request is not admitted. Same results as the general path:
    /// there `now_t = now`, nothing saturates, `after ≥ now` and the key is
    /// idle at `now + (after − now) = after`.
    #[inline]
    fn admit_fast(
        &self,
        tat: &mut GcraState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Option<(Decision, Timestamp)> {
        if self.window64 == 0 || cost == 0 || cost > self.burst {
            return None;
        }
        if tat.hi != 0 {
            return None;
        }
        let tat64 = tat.lo;
        let now = now.as_nanos();
        let limit = now.checked_add(self.window64)?;
        let base = tat64.max(now);
        // cost · t ≤ burst · t = window: no overflow.
        let next = base.checked_add(cost * self.t)?;
        if next > limit {
            return None;
        }
        let after = if apply.charge_if_allowed() {
            *tat = GcraState { lo: next, hi: 0 };
            next
        } else {
            base
        };
        let d = Decision {
            outcome: Outcome::Allowed,
            limit: self.burst,
            remaining: self.per_t.div(limit - after),
            reset_after: Duration::from_nanos(after - now),
            retry_after: None,
        };
        Some((d, Timestamp::from_nanos(after)))
    }

    /// Nanoseconds from `now_t` (ticks) up to `until` (ticks), rounded up.
    #[inline]
    fn nanos_until(&self, until: u128, now_t: u128) -> Duration {
        nanos(div_ceil(until.saturating_sub(now_t), self.c))
    }
}

impl Shape for Gcra {
    fn name(&self) -> &'static str {
        "token_bucket"
    }

    /// The burst, refilled over burst × emission interval.
    fn quota(&self) -> Quota {
        let (count, period) = self.rate();
        let nanos = (u128::from(self.burst) * period.as_nanos()).div_ceil(u128::from(count.max(1)));
        Quota {
            limit: self.burst,
            window: Some(saturating_nanos(nanos)),
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        None
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, p) = self.rate();
        write!(f, "{n}/{}s burst {}", p.as_secs_f64(), self.burst)
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    #[inline]
    fn fresh(&self) -> GcraState {
        GcraState::default()
    }

    #[inline]
    fn decide(&self, tat: &mut GcraState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let now_t = u128::from(now.as_nanos()) * u128::from(self.c);
        let limit_t = now_t + self.window;
        let base = tat.ticks().max(now_t);
        let next = base.saturating_add(u128::from(cost) * u128::from(self.t));
        if cost > self.burst {
            // No bucket admits it; a charge that must commit (penalty mode:
            // a cost known after the response) still counts all of it, so
            // the bucket goes into debt, repaid by the drip.
            let after = if apply.charge_if_denied() {
                *tat = GcraState::from_ticks(next);
                next
            } else {
                base
            };
            return Decision {
                outcome: Outcome::Never,
                limit: self.burst,
                remaining: self.per_t.div_wide(limit_t.saturating_sub(after)) as u64,
                reset_after: self.nanos_until(after, now_t),
                retry_after: None,
            };
        }
        // A cost of 0 only peeks, never charged: admitted unless the bucket
        // is in debt (`TAT` past the window), then denied until it is repaid.
        if next <= limit_t {
            let after = if cost > 0 && apply.charge_if_allowed() {
                *tat = GcraState::from_ticks(next);
                next
            } else {
                base
            };
            Decision {
                outcome: Outcome::Allowed,
                limit: self.burst,
                remaining: self.per_t.div_wide(limit_t.saturating_sub(after)) as u64,
                reset_after: self.nanos_until(after, now_t),
                retry_after: None,
            }
        } else {
            let after = if cost > 0 && apply.charge_if_denied() {
                *tat = GcraState::from_ticks(next);
                next
            } else {
                base
            };
            // Admitted at t iff after + cost·T ≤ t·c + B·T.
            let at = after
                .saturating_add(u128::from(cost) * u128::from(self.t))
                .saturating_sub(self.window);
            Decision {
                outcome: Outcome::Denied,
                limit: self.burst,
                remaining: self.per_t.div_wide(limit_t.saturating_sub(after)) as u64,
                reset_after: self.nanos_until(after, now_t),
                retry_after: Some(self.nanos_until(at, now_t)),
            }
        }
    }

    /// The state is full again `reset_after` from now: no second division.
    #[inline]
    fn decide_idle(
        &self,
        tat: &mut GcraState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> (Decision, Timestamp) {
        if let Some(r) = self.admit_fast(tat, now, cost, apply) {
            return r;
        }
        let d = self.decide(tat, now, cost, apply);
        (d, now.saturating_add(d.reset_after))
    }

    #[inline]
    fn idle_at(&self, tat: &GcraState, now: Timestamp) -> Timestamp {
        let now_t = u128::from(now.as_nanos()) * u128::from(self.c);
        let tat = tat.ticks();
        if tat <= now_t {
            now
        } else if self.c == 1 {
            Timestamp::from_nanos(sat64(tat))
        } else {
            Timestamp::from_nanos(sat64(div_ceil(tat, self.c)))
        }
    }
}
