//! The host: one lifecycle for every frontend. [`start`] loads the
//! store and the engine (the configuration is already [loaded]), keeps the
//! metrics, checks the store's health, watches the configuration (a
//! reload reads every frontend's sections first, then applies them with
//! the policies, all or nothing: [`Frontend::read_reload`]), serves the
//! admin listener with the frontend's routes, and binds the frontend's
//! listeners ([`Frontend::serve`]). [`Running::serve_until`] serves until a
//! shutdown signal (or a listener failing), turns not ready for the
//! shutdown delay, drains within the grace period and gives the store back,
//! once.
//!
//! [loaded]: crate::config::load

mod both;
mod listeners;
pub mod proto;
mod reload;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use floodgate_policy::engine::RequestLimits;
use floodgate_policy::reload::{Compiled, ConfigSource};
use floodgate_policy::yaml::Document;
use floodgate_policy::{ConfigErrors, PolicySet};
use futures_util::future::join_all;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config_thread::ConfigThread;
use crate::error::RuntimeError;
use crate::lifecycle::{Watching, shut_down};
use crate::settings::{Given, Settings, StartupSections};
use crate::tls::Certificates;

pub use crate::admin::health_routes;
pub use crate::backend::{AnyBackend, check_policy, replace_policy};
pub use crate::config::{Loaded, load};
pub use crate::health::Health;
pub use crate::signals::shutdown_signal;
pub use crate::threads::runtime;
pub use both::Both;
pub use listeners::Listeners;
use reload::Reload;

/// Logs: set up once, from the `server.log` settings.
pub mod logging {
    pub use crate::logging::init;
}

/// OpenTelemetry tracing (`server.tracing`): the frontends' request spans
/// and the Redis store's calls are `tracing` spans of the target
/// [`TARGET`](otel::TARGET), exported over OTLP in batches by threads of
/// their own (set up with the log: [`logging::init`]; flushed at shutdown
/// by [`run`]). With tracing off no span is made: each call site is
/// disabled. A span continues its caller's `traceparent`
/// ([`continue_trace`](otel::continue_trace)); the decision's attributes
/// are recorded on it ([`record_decision`](otel::record_decision)).
pub mod otel {
    pub use crate::otel::{
        DROPPED_TOTAL, TARGET, continue_trace, enabled, record_decision, shut_down,
    };
}

/// The dashboard's tables a frontend adds
/// ([`Health::add_dashboard_panel`](crate::host::Health::add_dashboard_panel)).
pub mod dashboard {
    pub use crate::dashboard::{Panel, PanelSource};
}

/// Metrics: the Prometheus recorder, installed once, before the
/// configuration is loaded.
pub mod metrics {
    pub use crate::metrics::install;
}

/// The top-level sections of the files the host reads itself: its
/// settings ([`Settings`]) and the store's.
pub const SECTIONS: &[&str] = &["server", "store"];

/// The sections a configuration may hold besides the policies: the
/// host's and `frontends'` (their top-level ones), once each.
pub fn sections(frontends: &[&'static str]) -> Vec<&'static str> {
    let mut all = SECTIONS.to_vec();
    for s in frontends.iter().filter(|s| !s.contains('.')) {
        if !all.contains(s) {
            all.push(s);
        }
    }
    all
}

/// The keys of the host's sections among what `frontends` read
/// (`server.grpc`: the service's listener).
pub fn keys(frontends: &[&'static str]) -> Vec<&'static str> {
    frontends
        .iter()
        .copied()
        .filter(|s| s.contains('.'))
        .collect()
}

/// What putting a frontend's reloaded sections in force does, given the
/// policy compiled from the same files: the host calls it just before
/// the engine takes that policy, so a frontend that decides its requests
/// under the policy it was given (see `FloodgateLayer::pinned_to` in
/// floodgate-http) never mixes one file's sections with the other's
/// limits.
pub type Apply = Box<dyn FnOnce(&Arc<PolicySet>) + Send>;

/// A protocol served on the host's engine: `floodgate serve`'s RLS, the
/// gateway.
pub trait Frontend: Send + Sync + Sized + 'static {
    /// What of the files it reads besides the policies: its top-level
    /// sections (`gateway`), and the keys of the host's sections
    /// (`server:`, `store:`) it reads itself, dotted (`server.grpc`: the
    /// service's listener; the host leaves them to it).
    fn sections() -> Vec<&'static str>;

    /// The bounds on a request its engine checks: its own settings' (in
    /// `config`), else the engine's defaults.
    fn request_limits(_config: &Self::Config) -> RequestLimits {
        RequestLimits::default()
    }

    /// What it is built from: its sections as startup read them.
    type Config: Send;

    /// Builds it on the engine `health` watches, with the host's
    /// `settings`.
    fn build(
        config: Self::Config,
        health: &Arc<Health>,
        settings: &Settings,
    ) -> Result<Self, RuntimeError>;

    /// Reads its sections of the reloaded configuration `documents`, as
    /// startup read them (with what it was `given`): what putting them in
    /// force does, or every problem. The host applies it only once every
    /// section and the policies are valid.
    fn read_reload(&self, given: &Given, documents: &[Document]) -> Result<Apply, ConfigErrors>;

    /// The routes it adds to the admin listener.
    fn admin_routes(self: &Arc<Self>) -> Router {
        Router::new()
    }

    /// Binds its listeners and serves them in tasks of `listeners` until
    /// the host stops them.
    fn serve(
        self: &Arc<Self>,
        listeners: &mut Listeners<'_>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
}

/// A frontend served by the host, in the background.
pub struct Running<F> {
    frontend: Arc<F>,
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    delay: Duration,
    grace: Duration,
    reload: Arc<Reload<F>>,
    /// Reloads on SIGHUP, when asked and every `server.reload_interval`,
    /// the listeners' certificates with the configuration (stops when
    /// dropped).
    watching: Watching,
    /// The xDS client, when the policies come from an xDS server (stops
    /// when dropped).
    _xds: Option<AbortOnDrop>,
}

/// Builds the engine and `F` from `loaded` and `config`, watches the
/// configuration and serves the admin listener and `F`'s listeners in the
/// background (`prometheus`: the metrics the admin listener shows).
pub async fn start<F: Frontend>(
    loaded: Loaded,
    config: F::Config,
    prometheus: Option<PrometheusHandle>,
) -> Result<Running<F>, RuntimeError> {
    let Loaded {
        source,
        compiled,
        settings,
        given,
        frontend_keys,
        thread,
        without_config,
    } = loaded;
    if let Some(h) = &prometheus {
        crate::metrics::spawn_upkeep(h.clone(), Duration::from_secs(5));
    }
    let startup = (
        StartupSections::of(&compiled.loaded.documents),
        frontend_keys,
    );
    let Compiled { policy, loaded } = compiled;
    let health = Health::start(&settings, F::request_limits(&config), policy).await?;
    announce(without_config.as_deref(), &health, &loaded.files, &settings);
    let frontend = Arc::new(F::build(config, &health, &settings)?);
    let certificates = Arc::new(Certificates::default());
    let reload = Reload::new(frontend.clone(), health.clone(), &settings, given, startup);
    let reload = Arc::new(reload);
    let xds = xds_source(&settings, &source, &reload, &health)?;
    let watching = watch_files(thread, source, loaded, &settings, &reload, &certificates);
    if xds.is_some() && !settings.config.start_without_config {
        // As envoyproxy/ratelimit: the listeners wait for the first
        // configuration (dropping this future stops the client).
        let _ = health.watch_configured().wait_for(|c| *c).await;
    }
    let (stop, stopped) = watch::channel(false);
    let mut listeners = Listeners::new(&settings, &certificates, stopped);
    bind(&frontend, &health, prometheus, &mut listeners).await?;
    let (tasks, addrs) = listeners.into_parts();
    Ok(Running {
        frontend,
        health,
        stop,
        tasks,
        addrs,
        delay: settings.server.shutdown_delay,
        grace: settings.server.shutdown_grace,
        reload,
        watching,
        _xds: xds,
    })
}

/// Watches the configuration's files (`loaded`: as they are now), applying
/// each change through `reload`; renewed certificates are picked up at the
/// policies' pace, and re-read whatever their files look like when a
/// reload is asked for.
fn watch_files<F: Frontend>(
    thread: ConfigThread,
    source: ConfigSource,
    loaded: floodgate_policy::read::Loaded,
    settings: &Settings,
    reload: &Arc<Reload<F>>,
    certificates: &Arc<Certificates>,
) -> Watching {
    let (reloading, reloaded) = (reload.clone(), certificates.clone());
    let now = Compiled {
        policy: floodgate_policy::PolicySet::empty(),
        loaded,
    };
    Watching::start(
        thread,
        source,
        now,
        settings.server.reload_interval,
        move |c: Compiled| reloading.apply(c),
        move |forced| reloaded.reload(forced),
    )
}

/// Logs what the host starts with: the configuration loaded (`files`),
/// or why there is none yet (`without_config`: `health` not ready, and
/// every decision refused, until one is loaded).
fn announce(
    without_config: Option<&str>,
    health: &Health,
    files: &[std::path::PathBuf],
    settings: &Settings,
) {
    if let Some(reason) = without_config {
        tracing::warn!(%reason, "starting without a configuration: not ready, and every decision refused, until one is loaded");
        health.set_unconfigured();
    } else {
        let policy = health.engine().policy();
        crate::config::log_loaded(files, &policy, &settings.store);
    }
}

/// The xDS client of a host whose policies come from an xDS server
/// (`config_type: xds`), started: it applies what the server sends with
/// `reload`, reading as `source` says. A frontend with a section of its
/// own (the gateway's) keeps to files: xDS carries no such section.
fn xds_source<F: Frontend>(
    settings: &Settings,
    source: &floodgate_policy::reload::ConfigSource,
    reload: &Arc<Reload<F>>,
    health: &Arc<Health>,
) -> Result<Option<AbortOnDrop>, RuntimeError> {
    if settings.config.config_type != crate::settings::ConfigType::XdsSotw {
        return Ok(None);
    }
    if let Some(own) = F::sections().into_iter().find(|s| !s.contains('.')) {
        return Err(RuntimeError::Runtime(format!(
            "configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW) carries policies only, and this command reads its `{own}:` section from files: use `--config-type file`"
        )));
    }
    let endpoint =
        crate::xds::channel::endpoint(&settings.config.xds).map_err(RuntimeError::Runtime)?;
    let reload = reload.clone();
    let apply: crate::xds::ApplyFn = Arc::new(move |c: Compiled| reload.apply(c));
    let client = crate::xds::Source::new(
        settings.config.xds.clone(),
        source.options.clone(),
        apply,
        health.clone(),
    );
    Ok(Some(AbortOnDrop(client.spawn(endpoint))))
}

/// A background task that ends with its owner.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves the admin routes (with `frontend`'s), the probes on the
/// metrics listener and `frontend`'s listeners: the first two first, so
/// that once a public listener answers ready the metrics are there too
/// (`prometheus`'s).
async fn bind<F: Frontend>(
    frontend: &Arc<F>,
    health: &Arc<Health>,
    prometheus: Option<PrometheusHandle>,
    listeners: &mut Listeners<'_>,
) -> Result<(), RuntimeError> {
    let path = &listeners.settings().server.metrics_path;
    let probes = crate::admin::probes(health.clone(), prometheus.clone(), path);
    let admin = crate::admin::router(health.clone(), prometheus).merge(frontend.admin_routes());
    listeners.admin(admin).await?;
    listeners.metrics(probes).await?;
    frontend.serve(listeners).await
}

/// Runs `F` on a new runtime (`server.workers` threads named `name`)
/// until SIGTERM or SIGINT ([`Running::serve_until`]), which also ends a
/// start still waiting for its first configuration; logging must already
/// be set up.
pub fn run<F: Frontend>(
    loaded: Loaded,
    config: F::Config,
    prometheus: Option<PrometheusHandle>,
    name: &str,
) -> Result<(), RuntimeError> {
    let runtime = crate::threads::runtime(loaded.settings.server.workers, name)
        .map_err(|e| RuntimeError::Runtime(e.to_string()))?;
    let shutdown = {
        let _entered = runtime.enter();
        crate::signals::shutdown_signal()
    };
    let grace = loaded.settings.server.shutdown_grace;
    let served = runtime.block_on(async move {
        let mut shutdown = std::pin::pin!(shutdown);
        // A start waiting for its first configuration (xDS) ends on a
        // shutdown signal too.
        let running = tokio::select! {
            running = start::<F>(loaded, config, prometheus) => running?,
            () = &mut shutdown => return Ok(()),
        };
        running.serve_until(shutdown).await
    });
    // The spans of the last requests, within the grace again: the drain
    // may have used it all.
    crate::otel::shut_down(grace);
    served
}

impl<F: Frontend> Running<F> {
    /// The frontend.
    pub fn frontend(&self) -> &Arc<F> {
        &self.frontend
    }

    /// The addresses the frontend's listeners are bound to, in the order it
    /// bound them.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Reloads now, as on SIGHUP: the configuration files are checked at
    /// once, contents compared (in the background, on the watcher's
    /// thread; the outcome is logged and counted as any reload's), and the
    /// listeners' certificates are re-read.
    pub fn reload_now(&self) {
        self.watching.reload_now();
    }

    /// Puts `compiled` in force as a reload does, all or nothing (here, at
    /// once).
    pub fn apply(&self, compiled: Compiled) -> Result<(), RuntimeError> {
        self.reload.apply(compiled)
    }

    /// Serves until `shutdown` resolves, then shuts down after
    /// `server.shutdown_delay` ([`shutdown_after`](Self::shutdown_after));
    /// a listener that stops first ends the process at once, an error.
    pub async fn serve_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), RuntimeError> {
        let failed = tokio::select! {
            _ = shutdown => None,
            (res, _, _) = futures_util::future::select_all(self.tasks.iter_mut()) => Some(match res {
                Ok(()) => "a server stopped".to_owned(),
                Err(e) => e.to_string(),
            }),
        };
        let delay = if failed.is_some() {
            Duration::ZERO
        } else {
            self.delay
        };
        self.shutdown_after(delay).await;
        failed.map_or(Ok(()), |e| Err(RuntimeError::Runtime(e)))
    }

    /// Shuts down behind a load balancer: `/ready` answers 503 at once
    /// while the listeners keep serving (new connections included) for
    /// `delay`, so that the balancer takes this instance out of rotation
    /// first; then stops accepting, drains within the grace period and
    /// gives the store back. True when every request in flight finished.
    pub async fn shutdown_after(mut self, delay: Duration) -> bool {
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let drained = shut_down(&self.health, delay, &self.stop, self.grace, join_all(tasks)).await;
        aborts.iter().for_each(tokio::task::AbortHandle::abort);
        drained
    }

    /// [`shutdown_after`](Self::shutdown_after) without a delay.
    pub async fn shutdown(self) -> bool {
        self.shutdown_after(Duration::ZERO).await
    }
}
