//! The store chosen at startup: the embedded in-memory store or Redis.

use std::future::Future;

use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{Backend, BackendError, Item, MemoryBackend, SyncBackend};
use floodgate_redis::{RedisBackend, ResilientBackend};

use crate::error::ServerError;
use crate::settings::StoreSettings;

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
