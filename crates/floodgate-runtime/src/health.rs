//! Liveness and readiness, one meaning for every binary and listener:
//! `/healthcheck` answers 200 while the process serves and 503 once
//! shutdown begins; `/ready` answers 200 when a configuration is loaded,
//! the store can decide (Redis included, as its failure policy allows) and
//! shutdown has not begun.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use floodgate_policy::engine::RequestLimits;
use floodgate_policy::{Backend, Engine, PolicySet};
use floodgate_redis::{BreakerState, FailurePolicy};
use http::StatusCode;
use metrics::Gauge;
use tokio::sync::watch;

use crate::RuntimeError;
use crate::backend::{AnyBackend, check_policy};
use crate::settings::Settings;

/// The process's health: its engine's store, and whether shutdown began.
pub struct Health {
    engine: Arc<Engine<AnyBackend>>,
    draining: watch::Sender<bool>,
    /// Whether a configuration is in force (false only for a binary
    /// started without one, until the first is loaded); read by every
    /// decision, hence an atomic, and watched for the gRPC health.
    configured: AtomicBool,
    configured_watch: watch::Sender<bool>,
    ready_gauge: Gauge,
    /// The tables frontends add to the dashboard.
    panels: crate::dashboard::Panels,
}

impl Health {
    /// Starts deciding with `policy` as `settings` say, for either binary:
    /// the policy checked against the store ([`check_policy`]), the store
    /// built ([`AnyBackend::build`]), the forced policy settings applied,
    /// the engine given the `request_limits` and the dashboard's observer;
    /// the store's probes run from now on. The engine is
    /// [`engine`](Self::engine).
    pub async fn start(
        settings: &Settings,
        request_limits: RequestLimits,
        mut policy: PolicySet,
    ) -> Result<Arc<Health>, RuntimeError> {
        check_policy(settings.store.backend, &policy)?;
        let backend = AnyBackend::build(&settings.store).await?;
        settings.policy.apply(&mut policy.settings);
        let engine = Engine::new(policy, backend)
            .with_request_limits(request_limits)
            .with_observer(crate::dashboard::observer());
        let health = Arc::new(Health::new(Arc::new(engine)));
        health.spawn_store_probes();
        Ok(health)
    }

    /// The health of a process deciding with `engine`.
    pub fn new(engine: Arc<Engine<AnyBackend>>) -> Self {
        Health {
            engine,
            draining: watch::Sender::new(false),
            configured: AtomicBool::new(true),
            configured_watch: watch::Sender::new(true),
            ready_gauge: metrics::gauge!("floodgate_backend_ready"),
            panels: crate::dashboard::Panels::default(),
        }
    }

    /// Adds a table to the dashboard (`/dashboard`), built by `source`
    /// each time the page asks.
    pub fn add_dashboard_panel(&self, source: crate::dashboard::PanelSource) {
        self.panels.add(source);
    }

    /// The tables frontends added to the dashboard.
    pub(crate) fn dashboard_panels(&self) -> &crate::dashboard::Panels {
        &self.panels
    }

    /// The engine whose store is watched.
    pub fn engine(&self) -> &Arc<Engine<AnyBackend>> {
        &self.engine
    }

    /// Whether the store can decide (regardless of draining), recorded in
    /// `floodgate_backend_ready`.
    pub fn store_ready(&self) -> bool {
        let ready = self.engine.backend().is_ready();
        self.ready_gauge.set(if ready { 1.0 } else { 0.0 });
        ready
    }

    /// Ready to take traffic: not draining, a configuration loaded, and
    /// the store can decide.
    pub fn is_ready(&self) -> bool {
        !self.is_draining() && self.is_configured() && self.store_ready()
    }

    /// Whether a configuration is in force (false only while a binary
    /// started without one waits for its first).
    pub fn is_configured(&self) -> bool {
        self.configured.load(Ordering::Acquire)
    }

    /// A receiver that turns true once a configuration is in force.
    pub fn watch_configured(&self) -> watch::Receiver<bool> {
        self.configured_watch.subscribe()
    }

    /// Marks the process as started without a configuration: not ready,
    /// every decision refused, until [`set_configured`](Self::set_configured).
    pub(crate) fn set_unconfigured(&self) {
        self.configured.store(false, Ordering::Release);
        self.configured_watch.send_replace(false);
    }

    /// Marks a configuration as in force.
    pub(crate) fn set_configured(&self) {
        self.configured.store(true, Ordering::Release);
        self.configured_watch.send_replace(true);
    }

    /// Marks the process as shutting down: readiness and liveness turn
    /// false, and every [`watch_draining`](Self::watch_draining) receiver
    /// sees it at once.
    pub fn start_draining(&self) {
        self.draining.send_replace(true);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// A receiver that turns true when shutdown begins.
    pub fn watch_draining(&self) -> watch::Receiver<bool> {
        self.draining.subscribe()
    }

    /// A receiver marked changed as soon as the store's readiness may have
    /// changed (Redis's circuit breaker opening, probing or closing): read
    /// [`is_ready`](Self::is_ready) then. `None` for a store that is
    /// always ready (in memory).
    pub fn watch_store(&self) -> Option<watch::Receiver<()>> {
        match self.engine.backend() {
            AnyBackend::Redis(r) => Some(r.watch_breaker()),
            AnyBackend::Memory(_) => None,
        }
    }

    /// The answer to `/healthcheck`: 200 while serving, 503 once shutdown
    /// begins.
    pub fn healthcheck(&self) -> (StatusCode, &'static str) {
        if self.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
        } else {
            (StatusCode::OK, "OK\n")
        }
    }

    /// The answer to `/ready`: 200 when the store can decide and shutdown
    /// has not begun, else 503 saying why.
    pub fn ready(&self) -> (StatusCode, &'static str) {
        if self.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
        } else if !self.is_configured() {
            (StatusCode::SERVICE_UNAVAILABLE, "no configuration loaded\n")
        } else if !self.store_ready() {
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n")
        } else {
            (StatusCode::OK, "ready\n")
        }
    }

    /// Keeps checking an unreachable Redis in the background (every
    /// second while its circuit breaker is open), so that the store comes
    /// back — and readiness with it — even when no request comes to try
    /// it (an instance not ready gets none). Ends with the engine.
    pub fn spawn_store_probes(&self) {
        let AnyBackend::Redis(_) = self.engine.backend() else {
            return;
        };
        let engine = Arc::downgrade(&self.engine);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // When the outage under way began (seen by this task). One
            // under way at start was said by the start-up's own line.
            let mut outage = engine.upgrade().and_then(|e| match e.backend() {
                AnyBackend::Redis(r) if r.breaker_state() != BreakerState::Closed => {
                    Some(tokio::time::Instant::now())
                }
                _ => None,
            });
            loop {
                tick.tick().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let AnyBackend::Redis(r) = engine.backend() else {
                    return;
                };
                if r.breaker_state() != BreakerState::Closed {
                    if outage.is_none() {
                        outage = Some(tokio::time::Instant::now());
                        log_outage(r.failure_policy());
                    }
                    r.probe().await;
                }
                if r.breaker_state() == BreakerState::Closed
                    && let Some(began) = outage.take()
                {
                    tracing::info!(
                        after = ?began.elapsed(),
                        "Redis answers again: decisions are Redis's again"
                    );
                }
            }
        });
    }

    /// Copies the store's counters and the process's figures into the
    /// metrics registry (before a scrape).
    pub fn export_metrics(&self) {
        crate::metrics::export_store(self.engine.backend());
        crate::process_metrics::collect();
        if self.engine.policy().settings.envoy_stats {
            crate::process_metrics::collect_envoy();
        }
        self.store_ready();
    }
}

/// Says once, at the start of an outage, who decides during it.
fn log_outage(policy: FailurePolicy) {
    let decides = match policy {
        FailurePolicy::FailOpen => "every request is admitted (fail_open)".to_owned(),
        FailurePolicy::FailClosed => "every request is denied (fail_closed)".to_owned(),
        FailurePolicy::Local { divide_by } => {
            format!("limits are kept in this process, each count divided by {divide_by} (local)")
        }
    };
    tracing::warn!(
        failure_policy = %decides,
        "Redis cannot be reached (its circuit breaker is open): decisions are taken by the failure policy, or by a rule's own on_failure, until it answers again"
    );
}
