//! The in-memory backend and a Redis backend side by side.

use std::time::Duration;

use floodgate::Decision;
use floodgate_policy::{Item, SyncBackend};

use super::{as_redis, blank};

/// The same decisions made by the in-memory backend and a Redis backend
/// (client-supplied time), compared item by item.
pub(crate) struct Twin {
    memory: std::sync::Mutex<floodgate_policy::MemoryBackend>,
    /// The latest time the in-memory side has decided at (µs).
    latest: std::sync::atomic::AtomicU64,
    pub redis: floodgate_redis::RedisBackend,
    /// With a `sync` mode other than exact in the settings: the resilient
    /// backend deciding in that mode, which decides instead of `redis`
    /// (built afresh with the in-memory side: it keeps keys in memory too).
    shared: Option<tokio::sync::Mutex<Option<floodgate_redis::ResilientBackend>>>,
    pub config: floodgate_redis::RedisConfig,
    /// The in-memory side was started afresh: so must the shared one.
    afresh: std::sync::atomic::AtomicBool,
    steps: std::sync::atomic::AtomicU64,
}

impl Twin {
    /// A twin over `urls` in `mode`, keys under `prefix`.
    pub(crate) async fn new(urls: Vec<String>, mode: floodgate_redis::Mode, prefix: &str) -> Twin {
        Twin::with(urls, mode, prefix, |_| {}).await
    }

    /// [`Twin::new`], with the Redis side's settings changed by `f`.
    pub(crate) async fn with(
        urls: Vec<String>,
        mode: floodgate_redis::Mode,
        prefix: &str,
        f: impl FnOnce(&mut floodgate_redis::RedisConfig),
    ) -> Twin {
        let mut config = floodgate_redis::RedisConfig {
            urls,
            mode,
            key_prefix: prefix.to_owned(),
            timeout: Duration::from_secs(5),
            time_source: floodgate_redis::TimeSource::Client {
                expiry_slack: Duration::from_secs(3600),
            },
            ..floodgate_redis::RedisConfig::default()
        };
        f(&mut config);
        let shared = (config.sync != floodgate_policy::SyncMode::Exact)
            .then(|| tokio::sync::Mutex::new(None));
        Twin {
            memory: std::sync::Mutex::new(fresh_memory()),
            latest: std::sync::atomic::AtomicU64::new(0),
            redis: floodgate_redis::RedisBackend::connect(&config)
                .await
                .expect("connect"),
            shared,
            config,
            afresh: std::sync::atomic::AtomicBool::new(true),
            steps: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Starts the in-memory side afresh (a new store), so that a case whose
    /// keys are new in Redis too does not depend on the times earlier cases
    /// used.
    pub(crate) fn forget_memory(&self) {
        *self.memory.lock().expect("memory backend") = fresh_memory();
        self.latest.store(0, std::sync::atomic::Ordering::Relaxed);
        self.afresh
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.steps.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// The shared side, built afresh when the in-memory side was.
    async fn shared(
        &self,
    ) -> Option<tokio::sync::MutexGuard<'_, Option<floodgate_redis::ResilientBackend>>> {
        let mut guard = self.shared.as_ref()?.lock().await;
        if self
            .afresh
            .swap(false, std::sync::atomic::Ordering::Relaxed)
            || guard.is_none()
        {
            let redis = floodgate_redis::RedisBackend::connect(&self.config)
                .await
                .expect("connect");
            *guard =
                Some(floodgate_redis::ResilientBackend::new(redis, &self.config).expect("backend"));
        }
        Some(guard)
    }

    /// Decides `items` at `now_us` on both; panics (with `ctx`) if they
    /// differ; returns the combined decision.
    ///
    /// A time earlier than the in-memory side has seen starts that side
    /// afresh first: the in-memory store decides an earlier time at the
    /// latest one its shard has seen (a clock going backwards is no time
    /// elapsed), whichever key that was for, while Redis takes each
    /// client-supplied time as it comes. Tests that go back in time do so
    /// to start new keys, so only a test that went back on a key it still
    /// uses would then differ, and always.
    pub(crate) async fn step(
        &self,
        items: &[Item<'_>],
        now_us: u64,
        apply: floodgate::Apply,
        ctx: &str,
    ) -> Decision {
        self.step_each(items, now_us, apply, ctx).await.0
    }

    /// [`step`](Self::step), with each item's decision too.
    pub(crate) async fn step_each(
        &self,
        items: &[Item<'_>],
        now_us: u64,
        apply: floodgate::Apply,
        ctx: &str,
    ) -> (Decision, Vec<Decision>) {
        use floodgate_policy::Backend;
        let now = floodgate::Timestamp::from_micros(now_us);
        if self
            .latest
            .fetch_max(now_us, std::sync::atomic::Ordering::Relaxed)
            > now_us
        {
            self.forget_memory();
            self.latest
                .store(now_us, std::sync::atomic::Ordering::Relaxed);
        }
        let mut m = vec![blank(); items.len()];
        let mut r = vec![blank(); items.len()];
        let dm = self
            .memory
            .lock()
            .expect("memory backend")
            .decide_now(items, now, apply, &mut m);
        if let Some(guard) = self.shared().await {
            let shared = guard.as_ref().expect("built");
            // Decided in memory against leases: the in-memory decisions
            // exactly when every item is (no rounding to microseconds).
            let dr = shared
                .decide(items, now, apply, &mut r)
                .await
                .unwrap_or_else(|e| panic!("{ctx}: redis failed: {e}"));
            // Refunds are decided in Redis, whatever the mode.
            let local = apply != floodgate::Apply::Refund
                && items
                    .iter()
                    .all(|i| floodgate_redis::supports_mode(i.limit, self.config.sync).is_ok());
            let round = |d: Decision| if local { d } else { as_redis(d) };
            for (i, (a, b)) in m.iter().zip(&r).enumerate() {
                assert_eq!(round(*a), *b, "{ctx}: item {i} at {now_us} µs ({apply:?})");
            }
            assert_eq!(round(dm), dr, "{ctx}: combined at {now_us} µs ({apply:?})");
            // Every other step, the background work due now (penalties told
            // to Redis, leases that ended given back): the decisions stay
            // the same.
            if self
                .steps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                % 2
                == 1
            {
                shared.flush(now).await;
            }
            return (dr, r);
        }
        let dr = self
            .redis
            .decide(items, now, apply, &mut r)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: redis failed: {e}"));
        for (i, (a, b)) in m.iter().zip(&r).enumerate() {
            assert_eq!(
                as_redis(*a),
                *b,
                "{ctx}: item {i} at {now_us} µs ({apply:?})"
            );
        }
        assert_eq!(
            as_redis(dm),
            dr,
            "{ctx}: combined at {now_us} µs ({apply:?})"
        );
        (dr, r)
    }

    /// Releases on both.
    pub(crate) async fn release(&self, item: Item<'_>, units: u64) {
        use floodgate_policy::Backend;
        let now = floodgate::Timestamp::ZERO;
        self.memory
            .lock()
            .expect("memory backend")
            .release_now(item, units, now);
        let _ = match self.shared().await {
            Some(guard) => guard
                .as_ref()
                .expect("built")
                .release(item, units, now)
                .await
                .expect("release"),
            None => self.redis.release(item, units, now).await.expect("release"),
        };
    }
}

fn fresh_memory() -> floodgate_policy::MemoryBackend {
    floodgate_policy::MemoryBackend::new(floodgate::StoreConfig::default()).expect("memory backend")
}
