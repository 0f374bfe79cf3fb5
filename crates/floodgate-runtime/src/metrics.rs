//! Prometheus metrics: the recorder, its upkeep, and the store's own
//! counters copied into it before each scrape. Labels are bounded: never a
//! request value.

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use floodgate_redis::ResilientBackend;

use crate::backend::AnyBackend;
use crate::error::RuntimeError;

/// Latency buckets, in seconds (50 µs to 1 s).
const BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Installs the global Prometheus recorder and returns its handle.
pub fn install() -> Result<PrometheusHandle, RuntimeError> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
        .map_err(|e| RuntimeError::Runtime(e.to_string()))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| RuntimeError::Runtime(format!("metrics recorder: {e}")))?;
    describe();
    crate::process_metrics::install();
    Ok(handle)
}

fn describe() {
    metrics::describe_gauge!(
        "floodgate_backend_ready",
        "1 when the store can decide (Redis reachable, breaker closed)."
    );
    metrics::describe_gauge!(
        "floodgate_redis_local_permits",
        "Concurrency permits the local fallback admitted during a Redis outage and that are not released yet."
    );
    metrics::describe_gauge!(
        "floodgate_redis_deferred_releases",
        "Releases of Redis-held concurrency permits that Redis could not take, queued to be sent again."
    );
    metrics::describe_gauge!(
        "floodgate_sync_queued_keys",
        "Keys decided in memory (sync modes lease and sync) with hits to push or leases to give back."
    );
    metrics::describe_counter!(
        "floodgate_sync_local_decisions_total",
        "Decisions made in memory under the sync modes lease and sync."
    );
    metrics::describe_counter!(
        "floodgate_sync_drift_units_total",
        "Units admitted elsewhere in the fleet that this instance learned of at its next sync or lease (the drift of its view)."
    );
    metrics::describe_gauge!(
        "floodgate_redis_issued_permits",
        "Concurrency permits Redis admitted through this instance that are not released yet (their releases may be queued during an outage)."
    );
}

/// Runs the recorder's upkeep (draining histogram buffers) every `every`.
pub(crate) fn spawn_upkeep(handle: PrometheusHandle, every: Duration) {
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        loop {
            t.tick().await;
            handle.run_upkeep();
        }
    });
}

/// The in-memory store's keys and their tables' bytes, and what became of new keys when it was
/// full (`outcome`: `evicted` keys, requests `admitted` without state or
/// `denied`; see `store.when_full`).
fn export_memory(s: &floodgate::StoreStats) {
    metrics::gauge!("floodgate_store_keys").set(s.keys as f64);
    metrics::gauge!("floodgate_store_bytes").set(s.bytes as f64);
    metrics::counter!("floodgate_store_reclaimed_total").absolute(s.reclaimed);
    for (outcome, v) in [
        ("evicted", s.evictions),
        ("admitted", s.admitted_full),
        ("denied", s.denied_full),
    ] {
        metrics::counter!("floodgate_store_full_total", "outcome" => outcome).absolute(v);
    }
}

/// Copies the store's own counters into the registry (called before each
/// scrape).
pub(crate) fn export_store(backend: &AnyBackend) {
    let r = match backend {
        AnyBackend::Memory(m) => return export_memory(&m.store().stats()),
        AnyBackend::Redis(r) => r,
    };
    export_resilience(r);
    export_client(r);
    export_sharing(r);
    export_redis_gauges(r);
}

/// Sets each counter `name` to its value.
fn absolute(counters: &[(&'static str, u64)]) {
    for &(name, v) in counters {
        metrics::counter!(name).absolute(v);
    }
}

/// The failure policy's and the breaker's counters, and the deferred releases'.
fn export_resilience(r: &ResilientBackend) {
    let s = r.stats();
    absolute(&[
        ("floodgate_redis_decisions_total", s.decisions.get()),
        (
            "floodgate_redis_backend_errors_total",
            s.backend_errors.get(),
        ),
        ("floodgate_redis_memory_full_total", s.memory_full.get()),
        (
            "floodgate_redis_short_circuited_total",
            s.short_circuited.get(),
        ),
        ("floodgate_redis_fail_open_total", s.fail_open.get()),
        ("floodgate_redis_fail_closed_total", s.fail_closed.get()),
        (
            "floodgate_redis_local_fallbacks_total",
            s.local_fallbacks.get(),
        ),
        (
            "floodgate_redis_breaker_opened_total",
            s.breaker_opened.get(),
        ),
        (
            "floodgate_redis_breaker_closed_total",
            s.breaker_closed.get(),
        ),
        (
            "floodgate_redis_breaker_probes_total",
            s.breaker_probes.get(),
        ),
        (
            "floodgate_redis_releases_deferred_total",
            s.releases_deferred.get(),
        ),
        (
            "floodgate_redis_releases_redelivered_total",
            s.releases_redelivered.get(),
        ),
        (
            "floodgate_redis_releases_dropped_total",
            s.releases_dropped.get(),
        ),
    ]);
}

/// The Redis client's counters.
fn export_client(r: &ResilientBackend) {
    let rs = r.redis().stats();
    absolute(&[
        ("floodgate_redis_calls_total", rs.calls.get()),
        ("floodgate_redis_pipelines_total", rs.pipelines.get()),
        ("floodgate_redis_errors_total", rs.errors.get()),
        ("floodgate_redis_timeouts_total", rs.timeouts.get()),
        ("floodgate_redis_script_loads_total", rs.script_loads.get()),
        ("floodgate_redis_cross_slot_total", rs.cross_slot.get()),
        (
            "floodgate_redis_local_cache_hits_total",
            rs.cache_hits.get(),
        ),
        (
            "floodgate_redis_local_cache_inserts_total",
            rs.cache_inserts.get(),
        ),
        ("floodgate_redis_state_resets_total", rs.state_resets.get()),
        (
            "floodgate_redis_lease_expired_total",
            rs.lease_expired.get(),
        ),
    ]);
}

/// The synchronisation modes' counters.
fn export_sharing(r: &ResilientBackend) {
    let sh = r.sharing_stats();
    absolute(&[
        (
            "floodgate_sync_local_decisions_total",
            sh.local_decisions.get(),
        ),
        ("floodgate_sync_lease_calls_total", sh.lease_calls.get()),
        ("floodgate_sync_lease_grants_total", sh.lease_grants.get()),
        ("floodgate_sync_leased_units_total", sh.lease_units.get()),
        ("floodgate_sync_lease_returns_total", sh.lease_returns.get()),
        (
            "floodgate_sync_returned_units_total",
            sh.returned_units.get(),
        ),
        ("floodgate_sync_syncs_total", sh.syncs.get()),
        ("floodgate_sync_keys_synced_total", sh.keys_synced.get()),
        ("floodgate_sync_drift_units_total", sh.drift_units.get()),
        ("floodgate_sync_drift_samples_total", sh.drift_samples.get()),
        ("floodgate_sync_starved_total", sh.starved.get()),
    ]);
}

/// The Redis store's gauges: the breaker's state, the permits and releases held.
fn export_redis_gauges(r: &ResilientBackend) {
    let state = match r.breaker_state() {
        floodgate_redis::BreakerState::Closed => 0.0,
        floodgate_redis::BreakerState::Open => 1.0,
        floodgate_redis::BreakerState::HalfOpen => 2.0,
    };
    for (name, v) in [
        ("floodgate_redis_breaker_state", state),
        ("floodgate_redis_local_permits", r.local_permits() as f64),
        (
            "floodgate_redis_deferred_releases",
            r.deferred_releases() as f64,
        ),
        ("floodgate_sync_queued_keys", r.sharing_queued() as f64),
        ("floodgate_redis_issued_permits", r.issued_permits() as f64),
    ] {
        metrics::gauge!(name).set(v);
    }
}
