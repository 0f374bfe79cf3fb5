//! What the dashboard shows, as one JSON document (`/dashboard/data`):
//! the requests by final outcome and the rules' decisions so far (the page
//! turns them into rates), the keys
//! limited most right now, the store's state, the configuration's
//! generation and the reloads' results.

use std::collections::HashMap;

use floodgate::Clock;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;

use super::prometheus::samples;
use super::requests::{RequestCounts, request_counts};
use crate::backend::AnyBackend;
use crate::health::Health;

/// Keys listed.
const TOP: usize = 20;

/// The whole snapshot (`docs/service.md` says what each part is).
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    /// Milliseconds since the Unix epoch.
    time_ms: u64,
    ready: bool,
    draining: bool,
    config: ConfigState,
    requests: RequestCounts,
    rules: Vec<RuleCounts>,
    top: Vec<TopKey>,
    top_window_secs: u64,
    store: StoreState,
    /// The frontends' tables.
    panels: Vec<super::Panel>,
}

#[derive(Debug, Serialize)]
struct ConfigState {
    /// The configurations applied: 1 at start, one more per reload put in
    /// force (none for a reload refused, or of unchanged files).
    generation: u64,
    rules: usize,
    reloads_ok: u64,
    /// Refused or rejected: the running configuration stayed.
    reloads_failed: u64,
    /// None before the first reload.
    last_reload_ok: Option<bool>,
}

/// One rule's decisions since start (cumulative; the page takes rates):
/// its verdict on each request it matched, whatever the other rules
/// decided.
#[derive(Debug, Default, Serialize)]
struct RuleCounts {
    domain: String,
    /// Its name or path.
    rule: String,
    /// Delayed ones included.
    allowed: u64,
    delayed: u64,
    denied: u64,
    /// Would have been denied (shadow mode).
    shadow: u64,
}

#[derive(Debug, Serialize)]
struct TopKey {
    rule: String,
    /// The descriptor's entries.
    key: String,
    /// `denied`, `delayed` or `shadow`.
    how: &'static str,
    count: u64,
    /// The sketch's possible overcount.
    error: u64,
}

#[derive(Debug, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
enum StoreState {
    Memory {
        keys: u64,
        capacity: u64,
        evictions: u64,
        reclaimed: u64,
        /// New keys' requests decided without state, or denied, because
        /// every key held was still restricted (`store.when_full`).
        admitted_full: u64,
        denied_full: u64,
    },
    Redis {
        /// The breaker is closed; while it is not, the failure policy
        /// answers (the counts below say how).
        healthy: bool,
        /// `closed`, `open`, `half_open`.
        breaker: &'static str,
        breaker_opened: u64,
        local_fallbacks: u64,
        fail_open: u64,
        fail_closed: u64,
        /// Concurrency permits admitted locally and not released yet.
        local_permits: u64,
        /// Releases queued to be sent to Redis again.
        deferred_releases: u64,
        calls: u64,
        errors: u64,
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
                admitted_full: s.admitted_full,
                denied_full: s.denied_full,
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
                    floodgate_redis::BreakerState::HalfOpen => "half_open",
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
pub(crate) fn snapshot(health: &Health, metrics: Option<&PrometheusHandle>) -> Snapshot {
    let engine = health.engine();
    let policy = engine.policy();
    let text = metrics
        .map(metrics_exporter_prometheus::PrometheusHandle::render)
        .unwrap_or_default();
    let mut counts = rule_counts(&text);
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
    let now = engine.clock().now();
    let (top, top_window_secs) = top_keys(engine, now);
    Snapshot {
        time_ms: now.as_nanos() / 1_000_000,
        ready: health.is_ready(),
        draining: health.is_draining(),
        config: config_state(&text, policy.rules().len()),
        requests: request_counts(&text),
        rules,
        top,
        top_window_secs,
        store: store_state(engine.backend()),
        panels: health.dashboard_panels().build(),
    }
}

/// Each rule's decisions by outcome, from the metrics `text`.
fn rule_counts(text: &str) -> HashMap<(String, String), RuleCounts> {
    let mut counts: HashMap<(String, String), RuleCounts> = HashMap::new();
    for s in samples(text, "floodgate_rule_decisions_total") {
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
    counts
}

/// The configuration in force (its `rules`) and its reloads, from the
/// metrics `text`: its generation counts the configurations applied, the
/// first and each reload counted `ok` (the policy's own
/// [`generation`](floodgate_policy::PolicySet::generation) tells compiled
/// policies apart, refused ones included, and counts nothing).
fn config_state(text: &str, rules: usize) -> ConfigState {
    let reloads = samples(text, "floodgate_config_reloads_total");
    let reloaded = |result: &str| {
        reloads
            .iter()
            .filter(|s| s.label("result") == Some(result))
            .map(|s| s.value as u64)
            .sum()
    };
    let last_reload_ok = samples(text, "floodgate_config_last_reload_ok")
        .first()
        .map(|s| s.value >= 1.0);
    let reloads_ok = reloaded("ok");
    ConfigState {
        generation: 1 + reloads_ok,
        rules,
        reloads_ok,
        reloads_failed: reloaded("error"),
        last_reload_ok,
    }
}

/// The keys decided most often in the observer's window (none without an
/// observer), and the window in seconds.
fn top_keys(
    engine: &floodgate_policy::Engine<AnyBackend>,
    now: floodgate::Timestamp,
) -> (Vec<TopKey>, u64) {
    let Some(keys) = engine.observer() else {
        return (Vec::new(), 0);
    };
    let top = keys
        .top(now, TOP)
        .into_iter()
        .map(|k| TopKey {
            rule: k.rule,
            key: k.key,
            how: k.how.name(),
            count: k.count,
            error: k.error,
        })
        .collect();
    (top, keys.window().as_secs())
}
