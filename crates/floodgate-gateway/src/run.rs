//! Running the gateway: load the configuration (the `gateway:`, `http:`,
//! `server:`, `store:` sections and the policies), then the host
//! ([`floodgate_runtime::host`]) runs the gateway's frontend
//! ([`Proxying`]) as it runs `floodgate serve`'s: the store (memory or
//! Redis), the listener, serving until SIGTERM/SIGINT, not ready for
//! `server.shutdown_delay`, the drain within `server.shutdown_grace`.
//! Policies and the `http:` section are reloaded while running, all or
//! nothing: polled every `server.reload_interval`, and at once on SIGHUP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::error::Errors;
use floodgate_policy::reload::Compiled;
use floodgate_runtime::host::{self, AnyBackend, Frontend};
use floodgate_runtime::settings::{Env, Flags, Given};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::frontend::{Parts, Proxying};
use crate::gateway::Gateway;
use crate::reload::read_sections;
use floodgate_http::HttpSection;

/// A loaded configuration, ready to run.
#[derive(Debug)]
pub struct Loaded {
    /// What every command loads: the policies, the settings the gateway
    /// shares with the service (`server:`, `store:`, ...), where they came
    /// from.
    pub runtime: floodgate_runtime::host::Loaded,
    /// The `gateway:` section.
    pub gateway: GatewayConfig,
    /// The `http:` section (none: nothing is limited).
    pub http: Option<HttpSection>,
}

/// Loads the configuration `flags` and `env` point to, as every command
/// does ([`floodgate_runtime::host::load`]), with the gateway's sections;
/// every problem is reported at once. Install the metrics recorder first:
/// rules resolve their metric handles when they are compiled.
pub fn load(flags: &Flags, env: &Env<'_>) -> Result<Loaded, GatewayError> {
    load_beside(flags, env, &[])
}

/// [`load`], the files also holding what `others` read (another binary's
/// frontends: [`Frontend::sections`]), which the gateway ignores.
pub fn load_beside(
    flags: &Flags,
    env: &Env<'_>,
    others: &[&'static str],
) -> Result<Loaded, GatewayError> {
    let mut sections = Proxying::sections();
    sections.extend(others);
    let (read, given) = Given::record(flags, env, |flags, env| {
        let runtime = floodgate_runtime::host::load(flags, env, &sections, crate::DEFAULT_CONFIG)?;
        let mut errors = Errors::default();
        let docs = &runtime.compiled.loaded.documents;
        let (gateway, http) = read_sections(flags, env, docs, &mut errors);
        errors
            .finish((runtime, gateway, http))
            .map_err(GatewayError::Config)
    });
    let (mut runtime, gateway, http) = read?;
    // What the gateway's sections read too.
    runtime.given = given;
    Ok(Loaded {
        runtime,
        gateway: gateway.ok_or(GatewayError::NoSection)?,
        http,
    })
}

/// Runs the gateway on a new runtime (`server.workers` threads; one is a
/// current-thread runtime) until SIGTERM or SIGINT; logging must already be
/// set up.
pub fn run(loaded: Loaded, prometheus: Option<PrometheusHandle>) -> Result<(), GatewayError> {
    let parts = Parts::of(&loaded)?;
    host::run::<Proxying>(loaded.runtime, parts, prometheus, "floodgate-gw")?;
    Ok(())
}

/// A gateway serving in the background.
pub struct Running(host::Running<Proxying>);

impl Running {
    /// The client-facing address.
    pub fn addr(&self) -> SocketAddr {
        self.0.addrs()[0]
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway<AnyBackend>> {
        self.0.frontend().gateway()
    }

    /// Reloads now, as on SIGHUP: the configuration files are checked at
    /// once, contents compared (in the background, on the watcher's
    /// thread; the outcome is logged and counted as any reload's), and the
    /// listener's certificate is re-read.
    pub fn reload_now(&self) {
        self.0.reload_now();
    }

    /// Puts `compiled` in force as a reload does, all or nothing, at once:
    /// every section and the policies read and checked before any is
    /// applied.
    pub fn apply(&self, compiled: Compiled) -> Result<(), GatewayError> {
        Ok(self.0.apply(compiled)?)
    }

    /// Shuts down behind a load balancer: `/ready` answers 503 at once
    /// while the listener keeps serving (new connections included) for
    /// `delay`, so that the balancer takes this instance out of rotation
    /// first; then stops accepting and drains within the grace period.
    /// True when every request in flight finished.
    pub async fn shutdown_after(self, delay: Duration) -> bool {
        self.0.shutdown_after(delay).await
    }

    /// [`shutdown_after`](Self::shutdown_after) without a delay.
    pub async fn shutdown(self) -> bool {
        self.0.shutdown().await
    }
}

/// Builds the store, the engine, the limiter and the proxy, binds the
/// listeners and serves in the background.
pub async fn start(
    loaded: Loaded,
    prometheus: Option<PrometheusHandle>,
) -> Result<Running, GatewayError> {
    let parts = Parts::of(&loaded)?;
    let running = host::start::<Proxying>(loaded.runtime, parts, prometheus).await?;
    Ok(Running(running))
}
