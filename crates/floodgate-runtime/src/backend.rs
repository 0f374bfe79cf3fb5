//! The store chosen at startup: the embedded in-memory store or Redis.

use std::future::Future;
use std::sync::Arc;

use floodgate::{Apply, Clock, Decision, StoreConfig, Timestamp};
use floodgate_policy::{
    Backend, BackendError, Decided, Engine, Item, MemoryBackend, PolicySet, Released, SyncBackend,
};
use floodgate_redis::{ConnectError, MemoryPolicy, RedisBackend, ResilientBackend};

use crate::error::RuntimeError;
use crate::settings::{PolicyOverrides, StoreKind, StoreSettings};

/// Checks that a store of kind `store` can decide every limit of
/// `policy`, before it is built and on every reload: the in-memory store
/// decides any; Redis rejects the few limits it cannot decide exactly
/// ([`floodgate_redis::validate`]), which would otherwise fail every
/// request they match. The error names each such rule (its domain and
/// label) and why.
pub fn check_policy(store: StoreKind, policy: &PolicySet) -> Result<(), RuntimeError> {
    if store == StoreKind::Memory {
        return Ok(());
    }
    let mut bad = Vec::new();
    for rule in policy.rules() {
        for l in rule.limits() {
            // A rule's own sync mode must apply to its limits (the store's
            // default leaves the others exact).
            let checked = floodgate_redis::validate(&l.limit)
                .map_err(|e| e.to_string())
                .and_then(|()| match rule.sync {
                    Some(mode) => {
                        floodgate_redis::supports_mode(&l.limit, mode).map_err(|e| e.to_string())
                    }
                    None => Ok(()),
                });
            if let Err(e) = checked {
                bad.push(format!(
                    "rule '{}' of domain '{}': {e}",
                    rule.label(),
                    rule.domain
                ));
            }
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    Err(RuntimeError::Store(format!(
        "the Redis store cannot decide {} of the configured rules:\n  {}",
        if bad.len() == 1 { "one" } else { "some" },
        bad.join("\n  ")
    )))
}

/// Puts a reloaded `policy` in force in `engine`, with the settings
/// `overrides` force, unless its store cannot decide one of its limits
/// ([`check_policy`]): the running policy then stays.
pub fn replace_policy(
    engine: &Engine<AnyBackend>,
    overrides: &PolicyOverrides,
    policy: PolicySet,
) -> Result<(), RuntimeError> {
    engine.replace_policy(prepare_policy(engine, overrides, policy)?);
    Ok(())
}

/// A reloaded `policy` as `engine` would run it (with the settings
/// `overrides` force), unless its store cannot decide one of its limits
/// ([`check_policy`]).
pub(crate) fn prepare_policy(
    engine: &Engine<AnyBackend>,
    overrides: &PolicyOverrides,
    mut policy: PolicySet,
) -> Result<Arc<PolicySet>, RuntimeError> {
    overrides.apply(&mut policy.settings);
    check_policy(engine.backend().kind(), &policy)?;
    Ok(Arc::new(policy))
}

/// Either store, behind one [`Backend`].
// One value per process: the in-memory store stays inline, so its decisions
// (the hot path) follow no extra pointer.
#[allow(clippy::large_enum_variant)]
pub enum AnyBackend {
    /// Counters in this process.
    Memory(MemoryBackend),
    /// Counters in Redis, with its failure policy and circuit breaker.
    Redis(Box<ResilientBackend>),
}

impl AnyBackend {
    /// Which store it is (for [`check_policy`]).
    pub fn kind(&self) -> StoreKind {
        match self {
            AnyBackend::Memory(_) => StoreKind::Memory,
            AnyBackend::Redis(_) => StoreKind::Redis,
        }
    }

    /// At shutdown, once requests have drained: gives back to Redis what
    /// this instance holds of its counters decided in memory (leases'
    /// unused units, hits not pushed yet), so the fleet has them at once.
    /// Nothing for the in-memory store.
    pub async fn give_back(&self) {
        if let AnyBackend::Redis(r) = self {
            // The engine's own clock.
            r.shutdown(floodgate::SystemClock.now()).await;
        }
    }

    /// Builds the store `settings` describe (connecting to Redis).
    pub async fn build(settings: &StoreSettings) -> Result<Self, RuntimeError> {
        match settings.backend {
            StoreKind::Memory => {
                let config = StoreConfig {
                    when_full: settings.when_full,
                    ..StoreConfig::with_capacity(settings.capacity)
                };
                let store =
                    MemoryBackend::new(config).map_err(|e| RuntimeError::Store(e.to_string()))?;
                Ok(AnyBackend::Memory(store))
            }
            StoreKind::Redis => {
                let config = &settings.redis;
                let store = |e: &dyn std::fmt::Display| RuntimeError::Store(e.to_string());
                let (redis, reachable) = match RedisBackend::connect(config).await {
                    Ok(r) => (r, true),
                    // Redis is down: start anyway, the failure policy
                    // deciding (and readiness following it, as during an
                    // outage), and connect in the background.
                    Err(ConnectError::Connect(e)) => {
                        tracing::warn!(
                            error = %e,
                            failure_policy = ?config.failure_policy,
                            "Redis cannot be reached: the failure policy decides until it can"
                        );
                        let lazy = RedisBackend::connect_lazy(config)
                            .await
                            .map_err(|e| store(&e))?;
                        (lazy, false)
                    }
                    Err(e) => return Err(store(&e)),
                };
                if reachable {
                    warn_of_evictions(redis.memory_policy().await);
                }
                let mut resilient = ResilientBackend::new(redis, config).map_err(|e| store(&e))?;
                if !reachable {
                    resilient = resilient.starting_unreachable();
                }
                Ok(AnyBackend::Redis(Box::new(resilient)))
            }
        }
    }
}

/// Warns when the Redis server's memory policy can evict counters (a
/// client filling its memory would give its victims their quotas back), or
/// when it would not say.
fn warn_of_evictions(policy: MemoryPolicy) {
    match policy {
        MemoryPolicy::Keeps => {}
        MemoryPolicy::Evicts(name) => tracing::warn!(
            maxmemory_policy = %name,
            "Redis evicts keys when its memory is full, counters included: a client that fills it erases limits; set maxmemory-policy noeviction (see docs/redis.md)"
        ),
        MemoryPolicy::Unbounded(name) => tracing::info!(
            maxmemory_policy = %name,
            "Redis has no maxmemory: nothing is evicted, but setting one with this policy would let a client that fills it erase limits (see docs/redis.md)"
        ),
        MemoryPolicy::Unknown(why) => tracing::warn!(
            error = %why,
            "Redis's maxmemory-policy could not be checked: unless it is noeviction, a client that fills its memory erases limits (see docs/redis.md)"
        ),
    }
}

#[allow(clippy::manual_async_fn)] // the trait requires the futures to be `Send`
impl Backend for AnyBackend {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        async move {
            match self {
                AnyBackend::Memory(m) => Ok(m.decide_now(items, now, apply, out)),
                AnyBackend::Redis(r) => r.decide(items, now, apply, out).await,
            }
        }
    }

    fn decide_by<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decided, BackendError>> + Send + 'a {
        async move {
            match self {
                AnyBackend::Memory(m) => {
                    Ok(Decided::by_store(m.decide_now(items, now, apply, out)))
                }
                AnyBackend::Redis(r) => r.decide_by(items, now, apply, out).await,
            }
        }
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        async move {
            match self {
                AnyBackend::Memory(m) => Ok(m.release_now(item, units, now)),
                AnyBackend::Redis(r) => r.release(item, units, now).await,
            }
        }
    }

    fn as_sync(&self) -> Option<&dyn SyncBackend> {
        match self {
            AnyBackend::Memory(m) => Some(m),
            AnyBackend::Redis(_) => None,
        }
    }

    fn keep_zones(&self, policy: &PolicySet) {
        if let AnyBackend::Memory(m) = self {
            m.keep_zones(policy);
        }
    }

    fn held(&self, item: &Item<'_>) -> Option<floodgate_policy::Held> {
        match self {
            AnyBackend::Memory(_) => None,
            AnyBackend::Redis(r) => r.held(item),
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            AnyBackend::Memory(m) => m.is_ready(),
            AnyBackend::Redis(r) => r.is_ready(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            AnyBackend::Memory(m) => m.name(),
            AnyBackend::Redis(r) => r.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use floodgate::algorithms::{AnyLimit, FixedWindow};
    use floodgate_policy::{Engine, PolicySet};
    use floodgate_redis::{BreakerConfig, FailurePolicy, Mode, RedisConfig};

    use super::*;
    use crate::health::Health;

    /// A rule Redis cannot decide exactly: a period of 1.5 µs.
    const BAD: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 1m}
      - key: odd
        rate_limit: {name: too-fine, algorithm: token_bucket, requests: 1, per: 1500ns}
";

    fn policy_of(text: &str) -> PolicySet {
        let spec = floodgate_policy::read::load_str("f.yaml", text, &Default::default()).unwrap();
        PolicySet::compile(&spec).unwrap()
    }

    /// A rule's own sync mode must apply to its limits: a sliding log
    /// cannot be leased, an in-flight limit cannot be synced, a limit with
    /// a block cannot be leased.
    #[test]
    fn a_rule_whose_sync_mode_does_not_apply_is_named() {
        let text = check_policy(
            StoreKind::Redis,
            &policy_of(
                "
domains:
  - domain: api
    descriptors:
      - key: log
        rate_limit: {name: logged, algorithm: sliding_log, requests: 3, per: 1m, sync: lease}
      - key: conc
        rate_limit: {name: inflight, algorithm: concurrency, max: 3, sync: sync}
      - key: blocked
        rate_limit: {name: blocking, requests: 3, per: 1m, block_for: 1m, sync: lease}
      - key: fine
        rate_limit: {name: bucket, algorithm: token_bucket, requests: 3, per: 1s, sync: lease}
",
            ),
        )
        .unwrap_err()
        .to_string();
        for expect in [
            "rule 'logged' of domain 'api': sync mode lease does not apply to a sliding log",
            "rule 'inflight' of domain 'api': sync mode sync does not apply to an in-flight limit",
            "rule 'blocking' of domain 'api': sync mode lease does not apply to a limit with block_for",
        ] {
            assert!(text.contains(expect), "{expect}\nin: {text}");
        }
        assert!(!text.contains("'bucket'"), "{text}");
    }

    #[test]
    fn a_rule_redis_cannot_decide_is_named() {
        let text = check_policy(StoreKind::Redis, &policy_of(BAD))
            .unwrap_err()
            .to_string();
        assert!(text.contains("too-fine"), "{text}");
        assert!(text.contains("domain 'api'"), "{text}");
        assert!(text.contains("whole microseconds"), "{text}");
        assert!(!text.contains("per-user"), "{text}");
        // The in-memory store decides any limit.
        check_policy(StoreKind::Memory, &policy_of(BAD)).unwrap();
    }

    /// During a Redis outage (breaker open) the process stays ready when the
    /// store's failure policy still decides, and turns not ready when it
    /// would deny everything.
    #[tokio::test]
    async fn readiness_during_an_outage_follows_the_failure_policy() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        for (policy, ready) in [
            (FailurePolicy::Local { divide_by: 2 }, true),
            (FailurePolicy::FailOpen, true),
            (FailurePolicy::FailClosed, false),
        ] {
            let config = RedisConfig {
                timeout: Duration::from_millis(50),
                connect_timeout: Duration::from_millis(50),
                failure_policy: policy,
                breaker: BreakerConfig {
                    failure_threshold: 1,
                    cool_down: Duration::from_secs(60),
                },
                ..RedisConfig::new(&format!("127.0.0.1:{port}"), Mode::Single).unwrap()
            };
            let redis = RedisBackend::connect_lazy(&config).await.unwrap();
            let backend =
                AnyBackend::Redis(Box::new(ResilientBackend::new(redis, &config).unwrap()));
            let engine = Arc::new(Engine::new(PolicySet::empty(), backend));
            let health = Health::new(engine.clone());
            assert!(health.is_ready());
            let limit = AnyLimit::from(FixedWindow::new(3, Duration::from_secs(60)).unwrap());
            let items = [Item {
                group: b"g",
                key: b"g:k",
                limit: &limit,
                cost: 1,
                on_failure: None,
                sync: None,
                permit: floodgate_policy::Permit::NONE,
                zone: None,
            }];
            let mut out = [Decision {
                outcome: floodgate::Outcome::Never,
                limit: 0,
                remaining: 0,
                reset_after: Duration::ZERO,
                retry_after: None,
            }];
            engine
                .backend()
                .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                .await
                .unwrap();
            let AnyBackend::Redis(r) = engine.backend() else {
                unreachable!()
            };
            assert_eq!(r.breaker_state(), floodgate_redis::BreakerState::Open);
            assert_eq!(health.is_ready(), ready, "{policy:?}");
            assert_eq!(health.store_ready(), ready, "{policy:?}");
            assert_eq!(health.ready().0.is_success(), ready, "{policy:?}");
        }
    }
}
