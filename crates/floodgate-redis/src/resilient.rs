//! [`ResilientBackend`]: the Redis backend behind a circuit breaker, with a
//! failure policy for every decision Redis cannot make.

use std::future::Future;

use floodgate::{Apply, Decision, Timestamp};
use floodgate_policy::{Backend, BackendError, Item};

use crate::breaker::{Breaker, BreakerState, Pass};
use crate::fallback::LocalFallback;
use crate::policy::{self, Fallback};
use crate::stats::ResilienceStats;
use crate::{ConfigError, FailurePolicy, RedisBackend, RedisConfig};

/// A [`RedisBackend`] that always decides: when Redis fails, times out, or
/// the breaker keeps requests away from it, the [`FailurePolicy`] answers.
///
/// * Every Redis failure counts towards the breaker; `failure_threshold`
///   consecutive ones open it for `cool_down`, then one probe goes through
///   and closes it again if Redis answers.
/// * Limits Redis cannot decide exactly ([`validate`](crate::validate)) are
///   configuration errors: returned as `BackendError::Protocol`, without
///   touching the breaker or the policy.
/// * Each item follows its rule's policy (`Item::on_failure`) when it has
///   one, the backend's otherwise; a batch mixing policies is answered by
///   its narrowest decision (one fail-closed item denies it), its `local`
///   items decided together, atomically, on the local store.
/// * A release of a permit (`Item::permit` ≠ 0) goes to the store that
///   admitted it, whatever the breaker says by then: to the local store if
///   the local fallback admitted it (even after Redis is back), to Redis
///   otherwise (even while the breaker is open; if Redis cannot take it,
///   the permit is freed there when its lease ends). The local fallback
///   remembers the permits it admitted, at most
///   [`LOCAL_PERMIT_BOUND`](Self::LOCAL_PERMIT_BOUND) of them by default
///   ([`with_local_permit_bound`](Self::with_local_permit_bound)); when
///   full it forgets the oldest, whose releases then go to Redis and leave
///   their local units taken.
/// * Releases of items without a permit go to Redis while the breaker is
///   closed; those under the local policy also go to the local store when
///   Redis fails or the breaker is open.
/// * Ready ([`Backend::is_ready`]) whenever the backend's policy decides
///   without Redis (`Local`, `FailOpen`); with `FailClosed`, only while the
///   breaker is closed.
pub struct ResilientBackend {
    redis: RedisBackend,
    policy: FailurePolicy,
    breaker: Breaker,
    local: LocalFallback,
    stats: ResilienceStats,
}

impl ResilientBackend {
    /// How many permits admitted by the local fallback and not yet given
    /// back are remembered at most, by default (see
    /// [`with_local_permit_bound`](Self::with_local_permit_bound)).
    pub const LOCAL_PERMIT_BOUND: usize = 1_000_000;

    /// Wraps `redis` with the policy and breaker of `config`.
    pub fn new(redis: RedisBackend, config: &RedisConfig) -> Result<Self, ConfigError> {
        config.check()?;
        // Rules may ask for the local fallback whatever the global policy.
        let divide_by = match config.failure_policy {
            FailurePolicy::Local { divide_by } => divide_by,
            _ => 1,
        };
        let local = LocalFallback::new(
            config.fallback_capacity,
            divide_by,
            Self::LOCAL_PERMIT_BOUND,
        )
        .map_err(|e| ConfigError::Client(e.to_string()))?;
        Ok(ResilientBackend {
            redis,
            policy: config.failure_policy,
            breaker: Breaker::new(config.breaker),
            local,
            stats: ResilienceStats::default(),
        })
    }

    /// Remembers at most `bound` permits admitted by the local fallback
    /// (at least 2; the default is
    /// [`LOCAL_PERMIT_BOUND`](Self::LOCAL_PERMIT_BOUND)). The live ones are
    /// at most the requests in flight during an outage; the bound only
    /// matters when holders never release. Once it is reached the oldest
    /// are forgotten: their releases go to Redis, which does not hold them,
    /// so the local units they hold stay taken.
    pub fn with_local_permit_bound(mut self, bound: usize) -> Self {
        self.local.set_permit_bound(bound);
        self
    }

    /// The permits admitted by the local fallback, not given back yet, that
    /// are remembered (so that their releases go to the local store).
    pub fn local_permits(&self) -> usize {
        self.local.permits()
    }

    /// The most permits [`local_permits`](Self::local_permits) counts at
    /// once.
    pub fn local_permit_bound(&self) -> usize {
        self.local.permit_bound()
    }

    /// The wrapped backend (and its own counters).
    pub fn redis(&self) -> &RedisBackend {
        &self.redis
    }

    /// The counters.
    pub fn stats(&self) -> &ResilienceStats {
        &self.stats
    }

    /// The breaker's state now.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Decides with `policy` instead of the backend's own as the policy of
    /// the items that carry none (`Item::on_failure`). The local fallback
    /// divides limits by the backend's `divide_by` (1 unless its own policy
    /// is local), whatever `divide_by` `policy` names.
    pub async fn decide_with_policy(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Result<Decision, BackendError> {
        if items.is_empty() || out.len() < items.len() {
            return Err(BackendError::Protocol(
                "a batch needs at least one item and as many outputs".into(),
            ));
        }
        // A limit Redis cannot decide is a configuration error, not an outage.
        let plan = match self.redis.plan(items, out) {
            Ok(plan) => plan,
            Err(e) => return Err(e.into()),
        };
        // Known denials are answered locally, whatever the breaker says.
        if let Some(d) = self.redis.cached(&plan, items, now, apply, out) {
            self.stats.decisions.inc();
            return Ok(d);
        }
        match self.breaker.pass(&self.stats) {
            Some(pass) => {
                let result = self.redis.remote(&plan, items, now, apply, out).await;
                let ok = result.is_ok();
                match pass {
                    Pass::Probe(p) => p.finish(ok),
                    Pass::Call if ok => self.breaker.success(),
                    Pass::Call => self.breaker.failure(&self.stats),
                }
                if let Ok((d, _)) = result {
                    self.stats.decisions.inc();
                    return Ok(d);
                }
                self.stats.backend_errors.inc();
            }
            None => self.stats.short_circuited.inc(),
        }
        self.apply_policy(items, now, apply, out, policy)
    }

    /// Gives back `units` of `item` in Redis, whatever the breaker's state.
    /// Only a release made while the breaker is closed counts towards it
    /// (an open breaker keeps its own schedule of probes).
    async fn release_to_redis(
        &self,
        item: Item<'_>,
        units: u64,
        now: Timestamp,
    ) -> Result<(), BackendError> {
        let closed = self.breaker.state() == BreakerState::Closed;
        let result = self.redis.release_inner(item, units, now).await;
        match &result {
            Ok(()) if closed => self.breaker.success(),
            Ok(()) => {}
            Err(_) => {
                self.stats.backend_errors.inc();
                if closed {
                    self.breaker.failure(&self.stats);
                }
            }
        }
        result
    }

    fn apply_policy(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Result<Decision, BackendError> {
        Ok(policy::decide(
            &self.local,
            &self.stats,
            items,
            now,
            apply,
            out,
            policy,
        ))
    }
}

impl Backend for ResilientBackend {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        self.decide_with_policy(items, now, apply, out, self.policy)
    }

    #[allow(clippy::manual_async_fn)] // the trait requires the future to be `Send`
    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), BackendError>> + Send + 'a {
        async move {
            if item.permit != 0 {
                // Given back where it was taken.
                if self.local.release_permit(item, units, now) {
                    return Ok(());
                }
                return self.release_to_redis(item, units, now).await;
            }
            // Releases never take the half-open probe (decisions do).
            let result = if self.breaker.state() == BreakerState::Closed {
                self.release_to_redis(item, units, now).await
            } else {
                Err(BackendError::Unavailable("circuit breaker open".into()))
            };
            if result.is_err() && Fallback::of(&item, self.policy) == Fallback::Local {
                self.local.release(item, units, now);
            }
            result
        }
    }

    /// True while the breaker is closed, and always when the backend's
    /// failure policy decides without Redis (`Local`, `FailOpen`): such a
    /// replica keeps answering during an outage, so taking it out of
    /// service would only move its traffic to replicas in the same state.
    /// With `FailClosed` every request is denied while Redis cannot decide,
    /// so the replica reports not ready until the breaker closes again.
    fn is_ready(&self) -> bool {
        match self.policy {
            FailurePolicy::Local { .. } | FailurePolicy::FailOpen => true,
            FailurePolicy::FailClosed => self.breaker.state() == BreakerState::Closed,
        }
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
