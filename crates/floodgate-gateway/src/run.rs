//! Running the gateway: load the configuration (the `gateway:`, `http:`,
//! `server:`, `store:` sections and the policies), build the store
//! (memory or Redis, as `floodgate serve` does), bind, serve until
//! SIGTERM/SIGINT, stay up not ready for `server.shutdown_delay`, then drain
//! within `server.shutdown_grace`. Policies and the `http:` section are
//! reloaded while running, all or nothing ([`crate::reload`]): polled every
//! `server.reload_interval`, and at once on SIGHUP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::error::Errors;
use floodgate_policy::reload::Compiled;
use floodgate_runtime::lifecycle::{Watching, shut_down};
use floodgate_runtime::listener::{Counters, Http, Protocols, bind, descriptors, serve};
use floodgate_runtime::settings::{Env, Flags, Given};
use floodgate_runtime::{AnyBackend, Health, RuntimeError};
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::forward::Hop;
use crate::gateway::Gateway;
use crate::proxy::{ClientInfo, Proxy};
use crate::reload::{Reload, read_sections};
use floodgate_runtime::tls::Certificates;
use crate::upstream::Upstream;
use floodgate_http::HttpSection;

/// A loaded configuration, ready to run.
#[derive(Debug)]
pub struct Loaded {
    /// What every command loads: the policies, the settings the gateway
    /// shares with the service (`server:`, `store:`, ...), where they came
    /// from.
    pub runtime: floodgate_runtime::config::Loaded,
    /// The `gateway:` section.
    pub gateway: GatewayConfig,
    /// The `http:` section (none: nothing is limited).
    pub http: Option<HttpSection>,
}

/// Loads the configuration `flags` and `env` point to, as every command
/// does ([`floodgate_runtime::config::load`]), with the gateway's sections;
/// every problem is reported at once. Install the metrics recorder first:
/// rules resolve their metric handles when they are compiled.
pub fn load(flags: &Flags, env: &Env<'_>) -> Result<Loaded, GatewayError> {
    let (read, given) = Given::record(flags, env, |flags, env| {
        let runtime = floodgate_runtime::config::load(flags, env)?;
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
/// current-thread runtime) until
/// SIGTERM or SIGINT; logging must already be set up.
pub fn run(loaded: Loaded, prometheus: Option<PrometheusHandle>) -> Result<(), GatewayError> {
    let server = &loaded.runtime.settings.server;
    let runtime = floodgate_runtime::threads::runtime(server.workers, "floodgate-gw")
        .map_err(|e| GatewayError::Startup(e.to_string()))?;
    let delay = server.shutdown_delay;
    runtime.block_on(async move {
        let shutdown = floodgate_runtime::signals::shutdown_signal();
        let running = start(loaded, prometheus).await?;
        shutdown.await;
        running.shutdown_after(delay).await;
        Ok(())
    })
}

/// A gateway serving in the background.
pub struct Running {
    addr: SocketAddr,
    gateway: Arc<Gateway<AnyBackend>>,
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    grace: Duration,
    task: JoinHandle<()>,
    admin_task: Option<JoinHandle<()>>,
    /// Reloads on SIGHUP, when asked and every `server.reload_interval`,
    /// the listener's certificate with the configuration (stops when the
    /// gateway is dropped).
    watching: Watching,
}

impl Running {
    /// The client-facing address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway<AnyBackend>> {
        &self.gateway
    }

    /// Reloads now, as on SIGHUP: the configuration files are checked at
    /// once, contents compared (in the background, on the watcher's
    /// thread; the outcome is logged and counted as any reload's), and the
    /// listener's certificate is re-read.
    pub fn reload_now(&self) {
        self.watching.reload_now();
    }

    /// Shuts down behind a load balancer: `/ready` answers 503 at once
    /// while the listener keeps serving (new connections included) for
    /// `delay`, so that the balancer takes this instance out of rotation
    /// first; then stops accepting and drains within the grace period.
    /// True when every request in flight finished.
    pub async fn shutdown_after(mut self, delay: Duration) -> bool {
        let drained = shut_down(&self.health, delay, &self.stop, self.grace, &mut self.task).await;
        self.task.abort();
        if let Some(a) = self.admin_task.take() {
            a.abort();
        }
        drained
    }

    /// [`shutdown_after`](Self::shutdown_after) without a delay.
    pub async fn shutdown(self) -> bool {
        self.shutdown_after(Duration::ZERO).await
    }
}

/// Builds the store, the engine, the limiter and the proxy, binds the
/// listeners and serves in the background.
pub async fn start(
    loaded: Loaded,
    prometheus: Option<PrometheusHandle>,
) -> Result<Running, GatewayError> {
    let Loaded {
        runtime,
        gateway: config,
        http,
    } = loaded;
    let floodgate_runtime::config::Loaded {
        source,
        compiled,
        settings,
        given,
        thread,
    } = runtime;
    if config.upstream.urls.is_empty() {
        return Err(GatewayError::Startup("no upstream URL".into()));
    }
    if let Some(h) = &prometheus {
        floodgate_runtime::metrics::spawn_upkeep(h.clone(), Duration::from_secs(5));
    }
    let Compiled { policy, loaded } = compiled;
    let health = Health::start(&settings, policy).await?;
    let engine = health.engine().clone();
    let limited = http.is_some();
    floodgate_runtime::config::log_loaded(&loaded.files, &engine.policy(), &settings.store);
    let proxy = Proxy::with_limits(
        Upstream::new(&config.upstream)?,
        &config.limits,
        &config.forwarding,
    );
    let mut certificates = Certificates::default();
    let tls = certificates.add(config.tls.clone()).map_err(RuntimeError::from)?;
    let admin_tls = certificates.add(settings.server.tls.admin.files());
    let admin_tls = admin_tls.map_err(RuntimeError::from)?;
    let gateway = Arc::new(Gateway::new(engine, proxy, config.access_log));
    gateway.set_limiter(http);
    let reload = Reload::new(gateway.clone(), settings.policy, given, &loaded.documents);
    // A renewed certificate is picked up at the policies' pace, and re-read
    // whatever its files look like when a reload is asked for.
    let watching = Watching::start(
        thread,
        source,
        Compiled {
            policy: floodgate_policy::PolicySet::empty(),
            loaded,
        },
        settings.server.reload_interval,
        move |c: Compiled| reload.apply(c),
        move |forced| certificates.reload(forced),
    );
    let listener = bind("gateway", config.listen).await?;
    let addr = listener.local_addr().map_err(|source| RuntimeError::Bind {
        addr: config.listen,
        source,
    })?;
    let (stop, stopped) = watch::channel(false);
    let router = floodgate_runtime::admin::router(health.clone(), prometheus);
    let server = &settings.server;
    let admin = floodgate_runtime::admin::spawn(
        server.admin,
        &server.admin_hosts,
        router,
        &server.limits,
        admin_tls,
        stopped.clone(),
    );
    let admin_task = admin.await?;
    let upstreams: Vec<&str> = config
        .upstream
        .urls
        .iter()
        .map(|u| u.authority.as_str())
        .collect();
    tracing::info!(
        %addr,
        tls = tls.is_some(),
        upstream = %upstreams.join(","),
        protocol = config.upstream.protocol.name(),
        limited,
        rules = gateway.engine().policy().rules().len(),
        "gateway listening"
    );
    // Two descriptors a connection count against the open files limit:
    // the client's and an upstream's.
    let places = descriptors::fit_max_connections("gateway", config.limits.max_connections, 2);
    let counters = Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    };
    let http = Http::new(&config.limits.connection, Protocols::Http1AndHttp2);
    let served = gateway.clone();
    let https = tls.is_some();
    let task = tokio::spawn(serve(
        listener,
        places,
        counters,
        http,
        tls,
        stopped,
        move |peer, slot| {
            // Each request goes to the gateway with what the proxy needs to
            // know of its connection; the connection's place is held by a
            // tunnel it is upgraded to too, whichever ends last.
            let (gateway, slot) = (served.clone(), slot.clone());
            let hop = Arc::new(Hop::new(peer.ip(), https));
            service_fn(move |req: Request<Incoming>| {
                let client = ClientInfo {
                    peer,
                    hop: hop.clone(),
                    tls: https,
                    trusted_hop: false,
                    slot: Some(slot.clone()),
                };
                gateway.clone().handle(req, client)
            })
        },
    ));
    Ok(Running {
        addr,
        gateway,
        health,
        stop,
        grace: settings.server.shutdown_grace,
        task,
        admin_task,
        watching,
    })
}
