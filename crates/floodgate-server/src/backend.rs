//! The store chosen at startup: the embedded in-memory store or Redis.

use std::future::Future;

use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{Backend, BackendError, Item, MemoryBackend, PolicySet, SyncBackend};
use floodgate_redis::{RedisBackend, ResilientBackend};

use crate::error::ServerError;
use crate::service::Service;
use crate::settings::StoreSettings;

/// Checks that the store `store` describes can decide every limit of
/// `policy`: the in-memory store decides any; Redis rejects the few limits
/// it cannot decide exactly ([`floodgate_redis::validate`]), which would
/// otherwise fail every request they match. The error names each such rule
/// (its domain and label) and why.
pub fn check_policy(store: &StoreSettings, policy: &PolicySet) -> Result<(), ServerError> {
    match store {
        StoreSettings::Memory { .. } => Ok(()),
        StoreSettings::Redis(_) => check_redis_limits(policy),
    }
}

fn check_redis_limits(policy: &PolicySet) -> Result<(), ServerError> {
    let mut bad = Vec::new();
    for rule in policy.rules() {
        for l in rule.limits() {
            if let Err(e) = floodgate_redis::validate(&l.limit) {
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
    Err(ServerError::Store(format!(
        "the Redis store cannot decide {} of the configured rules:\n  {}",
        if bad.len() == 1 { "one" } else { "some" },
        bad.join("\n  ")
    )))
}

/// Swaps a reloaded `policy` into `svc`, unless its store cannot decide
/// one of its limits ([`check_policy`]): the running policy then stays.
pub fn replace_policy(svc: &Service, policy: PolicySet) -> Result<(), ServerError> {
    svc.engine().backend().check_policy(&policy)?;
    svc.replace_policy(policy);
    Ok(())
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
    /// [`check_policy`] for this store.
    pub fn check_policy(&self, policy: &PolicySet) -> Result<(), ServerError> {
        match self {
            AnyBackend::Memory(_) => Ok(()),
            AnyBackend::Redis(_) => check_redis_limits(policy),
        }
    }

    /// Builds the store `settings` describe (connecting to Redis).
    pub async fn build(settings: &StoreSettings) -> Result<Self, ServerError> {
        match settings {
            StoreSettings::Memory { capacity } => {
                let store = MemoryBackend::new(StoreConfig::with_capacity(*capacity))
                    .map_err(|e| ServerError::Store(e.to_string()))?;
                Ok(AnyBackend::Memory(store))
            }
            StoreSettings::Redis(config) => {
                let redis = RedisBackend::connect(config)
                    .await
                    .map_err(|e| ServerError::Store(e.to_string()))?;
                let resilient = ResilientBackend::new(redis, config)
                    .map_err(|e| ServerError::Store(e.to_string()))?;
                Ok(AnyBackend::Redis(Box::new(resilient)))
            }
        }
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

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), BackendError>> + Send + 'a {
        async move {
            match self {
                AnyBackend::Memory(m) => {
                    m.release_now(item, units, now);
                    Ok(())
                }
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
    use super::*;
    use crate::run::{ServeOptions, load};

    const GOOD: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 1m}
";
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
    const REDIS: &str = "
store:
  backend: redis
  url: 127.0.0.1:1
  timeout: 20ms
  connect_timeout: 20ms
";

    fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
        let path = dir.path().join("floodgate.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn policy_of(text: &str) -> PolicySet {
        let dir = tempfile::tempdir().unwrap();
        let opts = ServeOptions {
            paths: vec![write(&dir, text)],
            ..ServeOptions::default()
        };
        load(&opts).unwrap().1.policy
    }

    #[tokio::test]
    async fn a_rule_redis_cannot_decide_fails_startup_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ServeOptions {
            paths: vec![write(&dir, &format!("{REDIS}{BAD}"))],
            ..ServeOptions::default()
        };
        let (source, compiled, settings) = load(&opts).unwrap();
        assert!(matches!(settings.store, StoreSettings::Redis(_)));
        // Refused before any connection is attempted (none could succeed).
        let err = crate::run::serve(source, compiled, settings, None, std::future::pending())
            .await
            .expect_err("startup fails");
        let text = err.to_string();
        assert!(text.contains("too-fine"), "{text}");
        assert!(text.contains("domain 'api'"), "{text}");
        assert!(text.contains("whole microseconds"), "{text}");
        assert!(!text.contains("per-user"), "{text}");
        // The in-memory store decides any limit.
        let memory = StoreSettings::Memory { capacity: 10 };
        check_policy(&memory, &policy_of(BAD)).unwrap();
    }

    #[tokio::test]
    async fn a_reload_redis_cannot_decide_keeps_the_running_policy() {
        let config =
            floodgate_redis::RedisConfig::new("127.0.0.1:1", floodgate_redis::Mode::Single)
                .unwrap();
        let redis = RedisBackend::connect_lazy(&config).await.unwrap();
        let backend = AnyBackend::Redis(Box::new(ResilientBackend::new(redis, &config).unwrap()));
        let svc = Service::new(policy_of(GOOD), backend, &crate::Settings::default()).unwrap();
        let labels = |svc: &Service| -> Vec<String> {
            let p = svc.engine().policy();
            p.rules().iter().map(|r| r.label().to_owned()).collect()
        };
        assert_eq!(labels(&svc), ["per-user"]);
        let err = replace_policy(&svc, policy_of(BAD)).unwrap_err();
        assert!(err.to_string().contains("too-fine"), "{err}");
        assert_eq!(labels(&svc), ["per-user"]);
        let fixed = BAD.replace("1500ns", "2us");
        replace_policy(&svc, policy_of(&fixed)).unwrap();
        assert_eq!(labels(&svc), ["per-user", "too-fine"]);
    }

    #[test]
    fn concurrency_permits_have_a_lease_by_default() {
        let lease = |extra: &str| {
            let dir = tempfile::tempdir().unwrap();
            let opts = ServeOptions {
                paths: vec![write(&dir, &format!("{REDIS}{extra}{GOOD}"))],
                ..ServeOptions::default()
            };
            match load(&opts).unwrap().2.store {
                StoreSettings::Redis(r) => r.concurrency_lease,
                StoreSettings::Memory { .. } => panic!("a Redis store"),
            }
        };
        let default = Some(floodgate_redis::DEFAULT_CONCURRENCY_LEASE);
        assert_eq!(lease(""), default);
        assert_eq!(
            lease("  concurrency_lease: 30s\n"),
            Some(std::time::Duration::from_secs(30))
        );
        // 0 turns the lease off: permits live until released.
        assert_eq!(lease("  concurrency_lease: 0s\n"), None);
    }

    /// During a Redis outage (breaker open) the service stays ready when the
    /// store's failure policy still decides, and turns not ready when it
    /// would deny everything.
    #[tokio::test]
    async fn readiness_during_an_outage_follows_the_failure_policy() {
        use floodgate::algorithms::{AnyLimit, FixedWindow};
        use floodgate_redis::{BreakerConfig, FailurePolicy, Mode, RedisConfig};
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
                timeout: std::time::Duration::from_millis(50),
                connect_timeout: std::time::Duration::from_millis(50),
                failure_policy: policy,
                breaker: BreakerConfig {
                    failure_threshold: 1,
                    cool_down: std::time::Duration::from_secs(60),
                },
                ..RedisConfig::new(&format!("127.0.0.1:{port}"), Mode::Single).unwrap()
            };
            let redis = RedisBackend::connect_lazy(&config).await.unwrap();
            let backend =
                AnyBackend::Redis(Box::new(ResilientBackend::new(redis, &config).unwrap()));
            let svc = Service::new(policy_of(GOOD), backend, &crate::Settings::default()).unwrap();
            assert!(svc.is_ready());
            let limit =
                AnyLimit::from(FixedWindow::new(3, std::time::Duration::from_secs(60)).unwrap());
            let item = Item {
                group: b"g",
                key: b"g:k",
                limit: &limit,
                cost: 1,
                on_failure: None,
                sync: None,
                permit: 0,
            };
            let mut out = [Decision {
                outcome: floodgate::Outcome::Never,
                limit: 0,
                remaining: 0,
                reset_after: std::time::Duration::ZERO,
                retry_after: None,
            }];
            let items = [item];
            svc.engine()
                .backend()
                .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                .await
                .unwrap();
            let AnyBackend::Redis(r) = svc.engine().backend() else {
                unreachable!()
            };
            assert_eq!(r.breaker_state(), floodgate_redis::BreakerState::Open);
            assert_eq!(svc.is_ready(), ready, "{policy:?}");
            assert_eq!(svc.backend_ready(), ready, "{policy:?}");
        }
    }
}
