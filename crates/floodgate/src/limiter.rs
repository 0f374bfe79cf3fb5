//! [`RateLimiter`]: one limit, many keys, a clock.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use crate::algorithm::{Algorithm, Apply};
use crate::algorithms::Concurrency;
use crate::key::ToKey;
use crate::store::{Store, StoreConfig};
use crate::{Clock, ConfigError, Decision, SystemClock, Timestamp};

/// A keyed rate limiter: one limit (any [`Algorithm`], or a tuple of them
/// checked atomically), applied to each key separately, on a bounded
/// in-memory [`Store`].
///
/// ```
/// use floodgate::{ManualClock, RateLimiter, Timestamp};
/// use floodgate::algorithms::Gcra;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
/// let limiter: RateLimiter<String, _, _> =
///     RateLimiter::with_clock(Gcra::per_second(2).unwrap(), clock.clone());
/// assert!(limiter.check("alice").is_allowed());
/// assert!(limiter.check("alice").is_allowed());
/// let denied = limiter.check("alice");
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
/// assert!(limiter.check("bob").is_allowed()); // every key has its own quota
/// clock.advance(Duration::from_millis(500));
/// assert!(limiter.check("alice").is_allowed());
/// ```
pub struct RateLimiter<K, A: Algorithm, C = SystemClock> {
    limit: A,
    store: Store<K, A::State>,
    clock: C,
}

impl<K: Hash + Eq, A: Algorithm> RateLimiter<K, A, SystemClock> {
    /// A limiter on the system clock with the default store sizing.
    pub fn new(limit: A) -> Self {
        Self::with_clock(limit, SystemClock)
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock> RateLimiter<K, A, C> {
    /// A limiter on `clock` with the default store sizing.
    pub fn with_clock(limit: A, clock: C) -> Self {
        Self::with_config(limit, StoreConfig::default(), clock)
            .expect("the default store configuration is valid")
    }

    /// A limiter on `clock` with a store sized by `config`.
    pub fn with_config(limit: A, config: StoreConfig, clock: C) -> Result<Self, ConfigError> {
        Ok(RateLimiter {
            limit,
            store: Store::new(config)?,
            clock,
        })
    }

    /// Decides on one request of cost 1 for `key`, charging it if admitted.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.check_n(key, 1)
    }

    /// Decides on a request of `cost` units for `key` (0 peeks).
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.store
            .decide_when(&self.limit, key, || self.clock.now(), cost, Apply::Commit)
    }

    /// Like [`check_n`](Self::check_n) at an explicit time.
    #[inline]
    pub fn check_at<Q>(&self, key: &Q, cost: u64, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.store
            .decide(&self.limit, key, now, cost, Apply::Commit)
    }

    /// Whether a request of `cost` would be admitted now, charging nothing.
    pub fn peek<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.store
            .decide_when(&self.limit, key, || self.clock.now(), cost, Apply::Check)
    }

    /// The limit.
    pub fn limit(&self) -> &A {
        &self.limit
    }

    /// The store (sizes and counters).
    pub fn store(&self) -> &Store<K, A::State> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<K: Hash + Eq, C: Clock> RateLimiter<K, Concurrency, C> {
    /// Takes `units` of the in-flight limit for `key`. The permit gives them
    /// back when dropped, including during a panic's unwinding.
    ///
    /// ```
    /// use floodgate::RateLimiter;
    /// use floodgate::algorithms::Concurrency;
    ///
    /// let limiter: RateLimiter<String, _> = RateLimiter::new(Concurrency::new(1).unwrap());
    /// let permit = limiter.acquire("tenant-a", 1).unwrap();
    /// assert!(limiter.acquire("tenant-a", 1).is_err());
    /// drop(permit);
    /// assert!(limiter.acquire("tenant-a", 1).is_ok());
    /// ```
    pub fn acquire<Q>(&self, key: &Q, units: u64) -> Result<Permit<'_, K, C>, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let decision = self.check_n(key, units);
        if decision.is_allowed() {
            Ok(Permit {
                limiter: self,
                key: Some(key.to_key()),
                units,
                decision,
            })
        } else {
            Err(decision)
        }
    }

    /// Like [`acquire`](Self::acquire), with a permit that owns a handle to
    /// the limiter (for futures and tasks).
    pub fn acquire_owned<Q>(
        self: &Arc<Self>,
        key: &Q,
        units: u64,
    ) -> Result<OwnedPermit<K, C>, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let decision = self.check_n(key, units);
        if decision.is_allowed() {
            Ok(OwnedPermit {
                limiter: Arc::clone(self),
                key: Some(key.to_key()),
                units,
                decision,
            })
        } else {
            Err(decision)
        }
    }

    fn release(&self, key: &K, units: u64) {
        let now = self.clock.now();
        self.store.update(&self.limit, key, now, |held| {
            self.limit.release(held, units);
        });
    }
}

/// Units of a concurrency limit, given back on drop.
#[must_use = "the units are released as soon as the permit is dropped"]
pub struct Permit<'a, K: Hash + Eq, C: Clock> {
    limiter: &'a RateLimiter<K, Concurrency, C>,
    key: Option<K>,
    units: u64,
    decision: Decision,
}

impl<K: Hash + Eq, C: Clock> Permit<'_, K, C> {
    /// The decision that granted the permit.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
}

impl<K: Hash + Eq, C: Clock> Drop for Permit<'_, K, C> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.limiter.release(&key, self.units);
        }
    }
}

/// An owned [`Permit`].
#[must_use = "the units are released as soon as the permit is dropped"]
pub struct OwnedPermit<K: Hash + Eq, C: Clock> {
    limiter: Arc<RateLimiter<K, Concurrency, C>>,
    key: Option<K>,
    units: u64,
    decision: Decision,
}

impl<K: Hash + Eq, C: Clock> OwnedPermit<K, C> {
    /// The decision that granted the permit.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
}

impl<K: Hash + Eq, C: Clock> Drop for OwnedPermit<K, C> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.limiter.release(&key, self.units);
        }
    }
}
