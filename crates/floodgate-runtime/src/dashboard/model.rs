//! What the dashboard shows, as one JSON document (`/dashboard/data`):
//! the rules' decisions so far (the page turns them into rates), the keys
//! limited most right now, the store's state, the configuration's
//! generation and the reloads' results.

use std::collections::HashMap;

use floodgate::Clock;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;

use super::prometheus::samples;
use crate::backend::AnyBackend;
use crate::health::Health;

/// Keys listed.
const TOP: usize = 20;

/// The whole snapshot.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// When it was taken, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The process can take traffic.
    pub ready: bool,
    /// Shutdown has begun.
    pub draining: bool,
    /// The configuration in force.
    pub config: ConfigState,
    /// Every rule of the configuration, with its decisions so far.
    pub rules: Vec<RuleCounts>,
    /// The keys limited most over the last one or two windows.
    pub top: Vec<TopKey>,
    /// The window of `top`, in seconds.
    pub top_window_secs: u64,
    /// The store.
    pub store: StoreState,
}

/// The configuration in force and its reloads.
#[derive(Debug, Serialize)]
pub struct ConfigState {
    /// The policy's generation (changes with each reload applied).
    pub generation: u64,
    /// Rules configured.
    pub rules: usize,
    /// Reloads applied.
    pub reloads_ok: u64,
    /// Reloads refused or rejected (the running configuration stayed).
    pub reloads_failed: u64,
    /// Whether the last reload was applied (none before the first).
    pub last_reload_ok: Option<bool>,
}

/// One rule's decisions since start (cumulative; the page takes rates).
#[derive(Debug, Default, Serialize)]
pub struct RuleCounts {
    /// Its domain.
    pub domain: String,
    /// Its name or path.
    pub rule: String,
    /// Admitted (delayed ones included).
    pub allowed: u64,
    /// Admitted after a shaper's delay.
    pub delayed: u64,
    /// Denied.
    pub denied: u64,
    /// Would have been denied (shadow mode).
    pub shadow: u64,
}

/// A key limited often.
#[derive(Debug, Serialize)]
pub struct TopKey {
    /// The rule.
    pub rule: String,
    /// The descriptor's entries.
    pub key: String,
    /// `denied`, `delayed` or `shadow`.
    pub how: &'static str,
    /// Times over the window(s).
    pub count: u64,
    /// The sketch's possible overcount.
    pub error: u64,
}

/// The store's state.
#[derive(Debug, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum StoreState {
    /// In this process.
    Memory {
        /// Keys held.
        keys: u64,
        /// The most keys held.
        capacity: u64,
        /// Keys evicted because the store was full.
        evictions: u64,
        /// Keys dropped as good as new.
        reclaimed: u64,
    },
    /// Redis.
    Redis {
        /// Redis is deciding: the breaker is closed. While it is not, the
        /// failure policy answers (`local_fallbacks`, `fail_open`,
        /// `fail_closed` count how).
        healthy: bool,
        /// The circuit breaker: `closed`, `open`, `half_open`.
        breaker: &'static str,
        /// Times it opened.
        breaker_opened: u64,
        /// Decisions made by the local fallback store during outages.
        local_fallbacks: u64,
        /// Decisions admitted by the failure policy (fail open).
        fail_open: u64,
        /// Decisions refused by the failure policy (fail closed).
        fail_closed: u64,
        /// Concurrency permits admitted locally and not released yet.
        local_permits: u64,
        /// Releases queued to be sent to Redis again.
        deferred_releases: u64,
        /// Calls and errors so far.
        calls: u64,
        /// Errors.
        errors: u64,
        /// Timeouts.
        timeouts: u64,
    },
}

fn store_state(backend: &AnyBackend) -> StoreState {
    match backend {
        AnyBackend::Memory(m) => {
            let s = m.store().stats();
            StoreState::Memory {
                keys: s.keys as u64,
                capacity: m.store().capacity() as u64,
                evictions: s.evictions,
                reclaimed: s.reclaimed,
            }
        }
        AnyBackend::Redis(r) => {
            let s = r.stats();
            let rs = r.redis().stats();
            let breaker = r.breaker_state();
            StoreState::Redis {
                healthy: breaker == floodgate_redis::BreakerState::Closed,
                breaker: match breaker {
                    floodgate_redis::BreakerState::Closed => "closed",
                    floodgate_redis::BreakerState::Open => "open",
                    _ => "half_open",
                },
                breaker_opened: s.breaker_opened.get(),
                local_fallbacks: s.local_fallbacks.get(),
                fail_open: s.fail_open.get(),
                fail_closed: s.fail_closed.get(),
                local_permits: r.local_permits() as u64,
                deferred_releases: r.deferred_releases() as u64,
                calls: rs.calls.get(),
                errors: rs.errors.get(),
                timeouts: rs.timeouts.get(),
            }
        }
    }
}

/// Takes a snapshot of the process whose `health` (its engine) and
/// metrics are given.
pub fn snapshot(health: &Health, metrics: Option<&PrometheusHandle>) -> Snapshot {
    let engine = health.engine();
    let policy = engine.policy();
    let text = metrics.map(|h| h.render()).unwrap_or_default();
    let mut counts: HashMap<(String, String), RuleCounts> = HashMap::new();
    for s in samples(&text, "floodgate_rule_decisions_total") {
        let (Some(domain), Some(rule), Some(outcome)) =
            (s.label("domain"), s.label("rule"), s.label("outcome"))
        else {
            continue;
        };
        let c = counts
            .entry((domain.to_owned(), rule.to_owned()))
            .or_default();
        let n = s.value as u64;
        match outcome {
            "within_limit" => c.allowed = n,
            "delayed" => c.delayed = n,
            "over_limit" => c.denied = n,
            "shadow_mode" => c.shadow = n,
            _ => {}
        }
    }
    let rules = policy
        .rules()
        .iter()
        .map(|r| {
            let key = (r.domain.to_string(), r.label().to_owned());
            let c = counts.remove(&key).unwrap_or_default();
            RuleCounts {
                domain: key.0,
                rule: key.1,
                ..c
            }
        })
        .collect();
    let reloads = samples(&text, "floodgate_config_reloads_total");
    let reloaded = |result: &str| {
        reloads
            .iter()
            .filter(|s| s.label("result") == Some(result))
            .map(|s| s.value as u64)
            .sum()
    };
    let last_reload_ok = samples(&text, "floodgate_config_last_reload_ok")
        .first()
        .map(|s| s.value >= 1.0);
    let now = engine.clock().now();
    let (top, window) = match engine.observer() {
        Some(keys) => (
            keys.top(now, TOP)
                .into_iter()
                .map(|k| TopKey {
                    rule: k.rule,
                    key: k.key,
                    how: k.how.name(),
                    count: k.count,
                    error: k.error,
                })
                .collect(),
            keys.window().as_secs(),
        ),
        None => (Vec::new(), 0),
    };
    Snapshot {
        time_ms: now.as_nanos() / 1_000_000,
        ready: health.is_ready(),
        draining: health.is_draining(),
        config: ConfigState {
            generation: policy.generation(),
            rules: policy.rules().len(),
            reloads_ok: reloaded("ok"),
            reloads_failed: reloaded("error"),
            last_reload_ok,
        },
        rules,
        top,
        top_window_secs: window,
        store: store_state(engine.backend()),
    }
}
