//! [`ResilientBackend`]: the Redis backend behind a circuit breaker, with a
//! failure policy for every decision Redis cannot make.

use std::future::Future;
use std::sync::Arc;

use floodgate::{Apply, Decision, Timestamp};
use floodgate_policy::{Backend, BackendError, Decided, Held, Item, Released, SyncMode};
use smallvec::SmallVec;

use crate::breaker::{Breaker, BreakerState, Pass};
use crate::deferred::{DeferredReleases, deliver_soon};
use crate::error::is_memory_full;
use crate::fallback::LocalFallback;
use crate::issued::IssuedPermits;
use crate::policy::{self, ItemPolicy};
use crate::sharing::{Failed, Gate, Share, Sharing};
use crate::stats::{ResilienceStats, SharingStats};
use crate::{ConfigError, FailurePolicy, RedisBackend, RedisConfig};

/// The keys the local store of the `lease` and `sync` modes holds at least
/// (more when the fallback store is larger).
const LOCAL_KEYS: usize = 1_000_000;

/// A [`RedisBackend`] that always decides: when Redis fails, times out, or
/// the breaker keeps requests away from it, the [`FailurePolicy`] answers.
///
/// * Every Redis failure counts towards the breaker; `failure_threshold`
///   consecutive ones open it for `cool_down`, then one probe goes through
///   and closes it again if Redis answers it, and then answers on every
///   connection.
/// * Limits Redis cannot decide exactly ([`validate`](crate::validate)) are
///   configuration errors: returned as `BackendError::Protocol`, without
///   touching the breaker or the policy.
/// * Each item follows its rule's policy (`Item::on_failure`) when it has
///   one, the backend's otherwise; a batch mixing policies is answered by
///   its narrowest decision (one fail-closed item denies it), its `local`
///   items decided together, atomically, on the local store.
/// * A release of a permit (`Item::permit` not [`NONE`](floodgate_policy::Permit::NONE))
///   goes to the store that admitted it, whatever the breaker says by
///   then: to the local store if the local fallback admitted it (even after
///   Redis is back), to Redis otherwise; each gives back at most what that
///   permit holds of that key. A release Redis cannot take (it fails, or
///   the breaker is open: then it is not even tried) is queued and sent
///   again in the background as soon as a call to Redis succeeds, if this
///   instance issued that permit and still holds it
///   ([`issued_permits`](Self::issued_permits)); any other release is then
///   refused (`BackendError::Unavailable`), as nothing can check it, so
///   the queue never holds more than the permits outstanding here. At most
///   [`ISSUED_PERMIT_BOUND`](Self::ISSUED_PERMIT_BOUND) permits are
///   remembered by default ([`with_issued_permit_bound`](Self::with_issued_permit_bound)),
///   each for its lease, and at most
///   [`DEFERRED_RELEASE_BOUND`](Self::DEFERRED_RELEASE_BOUND) releases wait
///   ([`with_deferred_release_bound`](Self::with_deferred_release_bound)).
/// * Releases of items without a permit go to Redis while the breaker is
///   closed; those under the local policy also go to the local store when
///   Redis fails or the breaker is open.
/// * Ready ([`Backend::is_ready`]) whenever the backend's policy decides
///   without Redis (`Local`, `FailOpen`); with `FailClosed`, only while the
///   breaker is closed.
pub struct ResilientBackend {
    /// Redis itself.
    redis: Arc<RedisBackend>,
    /// What decides when Redis cannot, for items that name no policy.
    policy: FailurePolicy,
    /// The in-process store the local policy decides on.
    local: LocalFallback,
    /// Releases Redis could not take yet, sent when it answers again.
    deferred: Arc<DeferredReleases>,
    /// The keys decided in this process (`lease` and `sync`).
    sharing: Arc<Sharing>,
    /// The circuit breaker and the counters, shared with the sharing
    /// calls.
    gate: Gate,
    /// The permits Redis admitted through this instance, not given back.
    issued: IssuedPermits,
    /// Concurrency permits' lease, if they have one.
    lease: Option<std::time::Duration>,
}

impl ResilientBackend {
    /// How many permits Redis admitted through this instance and not yet
    /// given back are remembered at most, by default (see
    /// [`with_issued_permit_bound`](Self::with_issued_permit_bound)).
    pub const ISSUED_PERMIT_BOUND: usize = 1_000_000;

    /// How many releases Redis could not take wait to be sent again at
    /// most, by default (see
    /// [`with_deferred_release_bound`](Self::with_deferred_release_bound)):
    /// as many as permits are remembered, so that with the defaults every
    /// release of a permit held here can wait.
    pub const DEFERRED_RELEASE_BOUND: usize = Self::ISSUED_PERMIT_BOUND;

    /// Wraps `redis` with the policy and breaker of `config`.
    pub fn new(redis: RedisBackend, config: &RedisConfig) -> Result<Self, ConfigError> {
        config.check()?;
        // Rules may ask for the local fallback whatever the global policy.
        let divide_by = match config.failure_policy {
            FailurePolicy::Local { divide_by } => divide_by,
            _ => 1,
        };
        let local = LocalFallback::new(config.fallback_capacity, divide_by)
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        let sharing = Sharing::new(
            config.fallback_capacity.max(LOCAL_KEYS),
            config.sync,
            redis.client_time(),
        )
        .map_err(|e| ConfigError::Client(e.to_string()))?;
        Ok(ResilientBackend {
            redis: Arc::new(redis),
            policy: config.failure_policy,
            gate: Gate {
                breaker: Arc::new(Breaker::new(config.breaker)),
                stats: Arc::default(),
            },
            local,
            deferred: Arc::new(DeferredReleases::new(Self::DEFERRED_RELEASE_BOUND)),
            sharing: Arc::new(sharing),
            issued: IssuedPermits::new(Self::ISSUED_PERMIT_BOUND, config.concurrency_lease),
            lease: config.concurrency_lease,
        })
    }

    /// The failure policy that decides while Redis cannot (rules may name
    /// their own).
    pub fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }

    /// Starts with Redis known to be unreachable (it refused the first
    /// connection): the breaker opens at once, so the failure policy
    /// decides — and readiness follows it — without each call waiting for a
    /// timeout, until a [`probe`](Self::probe) or a call finds Redis again.
    pub fn starting_unreachable(self) -> Self {
        self.gate.breaker.open_now(&self.gate.stats);
        self
    }

    /// While the breaker is open and its cool-down is over, asks Redis
    /// whether it answers (`PING`, on every connection) and closes the
    /// breaker when it does, so
    /// an instance that takes no traffic (not ready, say) still finds Redis
    /// back. Returns whether the breaker is closed.
    pub async fn probe(&self) -> bool {
        let Some(pass) = self.gate.breaker.pass(&self.gate.stats) else {
            return false;
        };
        match pass {
            Pass::Call => true,
            Pass::Probe(guard) => {
                let ok = self.redis.ping().await.is_ok();
                guard.finish(ok);
                if ok {
                    self.deliver_deferred();
                }
                ok
            }
        }
    }

    /// Remembers at most `bound` permits that Redis admitted through this
    /// instance (at least 2; the default is
    /// [`ISSUED_PERMIT_BOUND`](Self::ISSUED_PERMIT_BOUND)). Released ones
    /// are forgotten at once and the others when their lease ends, so the
    /// bound only matters when holders never release on many keys. Once it
    /// is reached the oldest are forgotten: their releases still go to
    /// Redis, but are not queued while Redis cannot take them (their units
    /// are freed when their leases end).
    pub fn with_issued_permit_bound(mut self, bound: usize) -> Self {
        self.issued = IssuedPermits::new(bound, self.lease);
        self
    }

    /// The permits Redis admitted through this instance that are not given
    /// back yet and are remembered (one per permit and key): the releases
    /// that may be queued while Redis cannot take them.
    pub fn issued_permits(&self) -> usize {
        self.issued.len()
    }

    /// The most permits [`issued_permits`](Self::issued_permits) counts at
    /// once.
    pub fn issued_permit_bound(&self) -> usize {
        self.issued.bound()
    }

    /// Keeps at most `bound` releases that Redis could not take (at least
    /// 1; the default is
    /// [`DEFERRED_RELEASE_BOUND`](Self::DEFERRED_RELEASE_BOUND)) until
    /// Redis answers again. Only releases of permits held here are queued,
    /// so the queue is also bounded by
    /// [`issued_permit_bound`](Self::issued_permit_bound); beyond `bound`
    /// the oldest are dropped (`releases_dropped`): their permits stay held
    /// in Redis until their leases end.
    pub fn with_deferred_release_bound(self, bound: usize) -> Self {
        self.deferred.set_bound(bound);
        self
    }

    /// Releases Redis could not take, waiting to be sent again.
    pub fn deferred_releases(&self) -> usize {
        self.deferred.len()
    }

    /// The most releases [`deferred_releases`](Self::deferred_releases)
    /// counts at once.
    pub fn deferred_release_bound(&self) -> usize {
        self.deferred.bound()
    }

    /// The permits admitted by the local fallback and not given back yet
    /// (one per permit and key; their releases go to the local store).
    pub fn local_permits(&self) -> usize {
        self.local.permits()
    }

    /// The wrapped backend (and its own counters).
    pub fn redis(&self) -> &RedisBackend {
        &self.redis
    }

    /// The counters.
    pub fn stats(&self) -> &ResilienceStats {
        &self.gate.stats
    }

    /// The breaker's state now.
    pub fn breaker_state(&self) -> BreakerState {
        self.gate.breaker.state()
    }

    /// A receiver marked changed as soon as the breaker's state changes
    /// (opening, probing, closing): [`breaker_state`](Self::breaker_state)
    /// is then the new state, with no polling.
    pub fn watch_breaker(&self) -> tokio::sync::watch::Receiver<()> {
        self.gate.breaker.watch()
    }

    /// The store-wide synchronisation mode (rules may set their own).
    pub fn default_sync_mode(&self) -> SyncMode {
        self.sharing.default_mode()
    }

    /// The counters of the keys decided in this process (`lease`, `sync`).
    pub fn sharing_stats(&self) -> &SharingStats {
        self.sharing.stats()
    }

    /// The keys decided in this process with work waiting for the
    /// background task (hits to push, leases to give back).
    pub fn sharing_queued(&self) -> usize {
        self.sharing.queued()
    }

    /// Does now what the background task does when it is due, as of `now`
    /// (the caller's time, with [`TimeSource::Client`](crate::TimeSource)):
    /// pushes the hits whose interval has passed, gives back the leases
    /// that ended, tells Redis the penalties and blocks decided here.
    pub async fn flush(&self, now: Timestamp) {
        self.sharing
            .run_due(&self.redis, self.gate(), now, false)
            .await;
    }

    /// Gives every lease's unused units back and pushes every hit not
    /// pushed yet (call it when the instance stops: its leases would
    /// otherwise stay taken until they end). Decisions may go on after it,
    /// leasing again.
    pub async fn shutdown(&self, now: Timestamp) {
        self.sharing
            .run_due(&self.redis, self.gate(), now, true)
            .await;
    }

    /// The breaker and statistics every decision goes through.
    fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Decides with `policy` instead of the backend's own as the policy of
    /// the items that carry none (`Item::on_failure`). The local fallback
    /// divides limits by the backend's `divide_by` (1 unless its own policy
    /// is local), whatever `divide_by` `policy` names. Says whether the
    /// failure policy answered, as [`Backend::decide_by`].
    pub async fn decide_with_policy(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Result<Decided, BackendError> {
        if items.is_empty() || out.len() < items.len() {
            return Err(BackendError::Protocol(
                "a batch needs at least one item and as many outputs".into(),
            ));
        }
        // Refunds go to Redis's counts, after what this instance holds of
        // them was settled there (below): the units given back are then
        // every instance's at once.
        if apply != Apply::Refund
            && let Some(decided) = self.decide_shared(items, now, apply, out, policy).await
        {
            return decided;
        }
        // A limit Redis cannot decide is a configuration error, not an outage.
        let plan = match self.redis.plan(items, out) {
            Ok(plan) => plan,
            Err(e) => return Err(e.into()),
        };
        // Known denials are answered locally, whatever the breaker says.
        if let Some(d) = self.redis.cached(&plan, items, now, apply, out) {
            self.gate.stats.decisions.inc();
            return Ok(Decided::by_store(d));
        }
        if self.sharing.any_local(items) {
            self.sharing
                .settle(&self.redis, self.gate(), items, now)
                .await;
            self.sharing.decided_in_redis(items, now);
        }
        if let Some(decided) = self
            .decide_remote(&plan, items, now, apply, out, policy)
            .await
        {
            return decided;
        }
        self.apply_policy(items, now, apply, out, policy)
    }

    /// Decides the batch on keys decided here, when every item of the batch
    /// is: a batch that mixes them with items decided in Redis is decided
    /// in Redis as a whole (atomically; leases and pushed hits are in
    /// Redis's counts). `None` when Redis must decide it.
    async fn decide_shared(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Option<Result<Decided, BackendError>> {
        let mut shares: SmallVec<[Share; 16]> = SmallVec::new();
        for item in items {
            shares.push(self.sharing.share_of(item)?);
        }
        let gate = self.gate();
        match self
            .sharing
            .decide(&self.redis, gate, items, &shares, now, apply, out)
            .await
        {
            Ok(d) => {
                self.gate.stats.decisions.inc();
                self.deliver_deferred();
                Some(Ok(Decided::by_store(d)))
            }
            Err(Failed::Unsupported(e)) => Some(Err(e.into())),
            Err(Failed::Backend) => Some(self.apply_policy(items, now, apply, out, policy)),
            // Decided in Redis.
            Err(Failed::Starved) => None,
        }
    }

    /// Decides the batch in Redis when the breaker lets it through, and
    /// keeps the breaker's count; `None` when Redis failed or was not
    /// asked (the failure policy decides then).
    async fn decide_remote(
        &self,
        plan: &crate::batch::Plan,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Option<Result<Decided, BackendError>> {
        let Some(pass) = self.gate.breaker.pass(&self.gate.stats) else {
            self.gate.stats.short_circuited.inc();
            return None;
        };
        let result = self.redis.remote(plan, items, now, apply, out).await;
        // A full Redis is not down: it answers, its states stand.
        let full = matches!(&result, Err(e) if is_memory_full(e));
        let ok = result.is_ok() || full;
        match pass {
            // Closed once every connection answers: one still failed from
            // the outage would otherwise leave the next decisions it
            // carries to the failure policy.
            Pass::Probe(p) => p.finish(ok && self.redis.ping().await.is_ok()),
            Pass::Call if ok => self.gate.breaker.success(),
            Pass::Call => self.gate.breaker.failure(&self.gate.stats),
        }
        if ok {
            self.deliver_deferred();
        }
        if full {
            return Some(self.when_full(plan, items, now, apply, out, policy).await);
        }
        if let Ok((d, _)) = result {
            self.gate.stats.decisions.inc();
            if apply.charge_if_allowed() && d.is_allowed() {
                self.remember_issued(items, now);
            }
            return Some(Ok(Decided::by_store(d)));
        }
        self.gate.stats.backend_errors.inc();
        None
    }

    /// Sends the queued releases in the background if there are any.
    #[inline]
    fn deliver_deferred(&self) {
        if self.deferred.len() != 0 {
            deliver_soon(&self.redis, &self.deferred, &self.gate.stats);
        }
    }

    /// Remembers the permits of an admitted, charged batch that Redis
    /// decided.
    fn remember_issued(&self, items: &[Item<'_>], now: Timestamp) {
        for i in items {
            // Leased units go back by their holders' negative hits or
            // their leases, never by a release kept for later.
            if !i.permit.is_none() && i.cost > 0 && i.limit.is_concurrency() && !i.limit.is_leased()
            {
                self.issued.insert(i.permit, i.key, i.cost, now);
            }
        }
    }

    /// Queues the release of `units` of a Redis-held permit issued here
    /// (taken from [`issued`](Self::issued_permits)) that Redis could not
    /// take.
    fn defer(&self, item: Item<'_>, units: u64, now: Timestamp) {
        let key = self.redis.state_key(&item);
        self.deferred
            .push(key, units, item.permit, now, &self.gate.stats);
    }

    /// Gives back `units` of `item` in Redis. Only a release made while the
    /// breaker is closed counts towards it (an open breaker keeps its own
    /// schedule of probes).
    async fn release_to_redis(
        &self,
        item: Item<'_>,
        units: u64,
        now: Timestamp,
    ) -> Result<Released, BackendError> {
        let closed = self.gate.breaker.state() == BreakerState::Closed;
        let result = self.redis.release_inner(item, units, now).await;
        match &result {
            Ok(_) => {
                if closed {
                    self.gate.breaker.success();
                }
                self.deliver_deferred();
            }
            Err(_) => {
                self.gate.stats.backend_errors.inc();
                if closed {
                    self.gate.breaker.failure(&self.gate.stats);
                }
            }
        }
        result
    }

    /// The release of an item without a permit (built by hand): to Redis
    /// while the breaker is closed, and to the local store too when that
    /// fails for an item under the local policy.
    async fn release_anonymous(
        &self,
        item: Item<'_>,
        units: u64,
        now: Timestamp,
    ) -> Result<Released, BackendError> {
        // Releases never take the half-open probe (decisions do).
        let result = if self.gate.breaker.state() == BreakerState::Closed {
            self.release_to_redis(item, units, now).await
        } else {
            Err(BackendError::Unavailable("circuit breaker open".into()))
        };
        if result.is_err() && ItemPolicy::of(&item, self.policy) == ItemPolicy::Local {
            self.local.release(item, units, now);
        }
        result
    }

    /// A release the sync modes did not take: given back where its permit
    /// was taken. Also says whether Redis may have given units back.
    async fn release_elsewhere(
        &self,
        item: Item<'_>,
        units: u64,
        now: Timestamp,
    ) -> (Result<Released, BackendError>, bool) {
        if item.permit.is_none() {
            let r = self.release_anonymous(item, units, now).await;
            let in_redis = !matches!(r, Ok(Released::NotHeld | Released::Given(0)));
            return (r, in_redis);
        }
        // Given back where it was taken.
        if let Some(given) = self.local.release_permit(item, units, now) {
            return (Ok(Released::Given(given)), false);
        }
        // Redis holds it, if anything does: what this instance holds of it
        // may wait for Redis, and nothing else may.
        let held_here = self.issued.take(item.permit, item.key, units, now);
        // Given back now, unless Redis cannot take it (an open breaker is
        // not even tried: no timeout to pay per release during an outage).
        let mut tried = false;
        if self.gate.breaker.state() == BreakerState::Closed {
            tried = true;
            match self.release_to_redis(item, units, now).await {
                Ok(r) => {
                    let in_redis = !matches!(r, Released::NotHeld | Released::Given(0));
                    return (Ok(r), in_redis);
                }
                // Redis answered, with something no retry changes.
                Err(e @ BackendError::Protocol(_)) => return (Err(e), true),
                Err(_) => {}
            }
        }
        match held_here {
            Some(held) if held > 0 && item.limit.is_concurrency() => {
                self.defer(item, held, now);
                (Ok(Released::Queued(held)), true)
            }
            _ => (
                Err(BackendError::Unavailable(
                    "Redis cannot take this release now, and this instance holds no such \
                     permit to give back later (not issued here, or released already); \
                     a permit Redis holds is freed when its lease ends"
                        .into(),
                )),
                tried,
            ),
        }
    }

    /// Answers a batch Redis refused to charge because its memory is full
    /// (`OOM`): Redis still reads, so the states it holds decide what
    /// they deny — a client that fills Redis's memory erases no
    /// restriction. A batch they would admit, which Redis cannot charge,
    /// is answered by the failure policy: `fail_open` admits it uncharged,
    /// `fail_closed` denies it, `local` decides and charges it on the
    /// local store.
    async fn when_full(
        &self,
        plan: &crate::batch::Plan,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Result<Decided, BackendError> {
        self.gate.stats.memory_full.inc();
        // A dry run, which a full server still runs (see `DECIDE_READ_ONLY`).
        if apply != Apply::Check
            && let Ok((d, _)) = self.redis.remote(plan, items, now, Apply::Check, out).await
            && d.is_denied()
        {
            self.gate.stats.decisions.inc();
            return Ok(Decided::by_store(d));
        }
        self.apply_policy(items, now, apply, out, policy)
    }

    /// Decides the batch by the failure `policy` (Redis was not asked, or
    /// failed).
    fn apply_policy(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        policy: FailurePolicy,
    ) -> Result<Decided, BackendError> {
        Ok(policy::decide(
            &self.local,
            &self.gate.stats,
            items,
            now,
            apply,
            out,
            policy,
        ))
    }
}

#[allow(clippy::manual_async_fn)] // the trait requires the futures to be `Send`
impl Backend for ResilientBackend {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        async move {
            self.decide_with_policy(items, now, apply, out, self.policy)
                .await
                .map(|d| d.decision)
        }
    }

    fn decide_by<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decided, BackendError>> + Send + 'a {
        self.decide_with_policy(items, now, apply, out, self.policy)
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        async move {
            // Given back here if a lease here gave it out.
            let (given_here, units) = self.sharing.release(&item, units, now);
            if units == 0 {
                return Ok(Released::Given(given_here));
            }
            let (result, in_redis) = self.release_elsewhere(item, units, now).await;
            // Given back in Redis (or perhaps, when its answer was lost): a
            // replica here counts it no more. A release that changed
            // nothing there (a forged one) leaves the replica in use.
            if in_redis {
                self.sharing
                    .decided_in_redis(std::slice::from_ref(&item), now);
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
            FailurePolicy::FailClosed => self.gate.breaker.state() == BreakerState::Closed,
        }
    }

    fn held(&self, item: &Item<'_>) -> Option<Held> {
        Some(self.sharing.held(item, Timestamp::ZERO))
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
