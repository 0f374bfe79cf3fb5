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

use floodgate_policy::ConfigErrors;
use floodgate_policy::error::Errors;
use floodgate_policy::reload::Compiled;
use floodgate_policy::yaml::Document;
use floodgate_runtime::RuntimeError;
use floodgate_runtime::host::{self, Apply, Frontend, Listeners};
use floodgate_runtime::host::{AnyBackend, Health};
use floodgate_runtime::listener::{Counters, Http, Protocols, descriptors, serve};
use floodgate_runtime::settings::{Env, Flags, Given, Settings, StartupSections};
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::forward::Hop;
use crate::gateway::Gateway;
use crate::proxy::{ClientInfo, Proxy};
use crate::reload::read_sections;
use crate::settings::Draft;
use crate::upstream::Upstream;
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
    let (read, given) = Given::record(flags, env, |flags, env| {
        let runtime = floodgate_runtime::host::load(flags, env, &Proxying::sections())?;
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

/// What the gateway is built from.
pub struct Parts {
    config: GatewayConfig,
    http: Option<HttpSection>,
    started_with: StartupSections<Draft>,
}

impl Parts {
    /// The sections of `loaded`, to build the gateway from (with another
    /// frontend, [`Both`](floodgate_runtime::host::Both)).
    pub fn of(loaded: &Loaded) -> Result<Parts, GatewayError> {
        let config = loaded.gateway.clone();
        if config.upstream.urls.is_empty() {
            return Err(GatewayError::Startup("no upstream URL".into()));
        }
        let documents = &loaded.runtime.compiled.loaded.documents;
        Ok(Parts {
            config,
            http: loaded.http.clone(),
            started_with: StartupSections::of(documents),
        })
    }
}

/// The gateway as a frontend of the host: its `gateway:` and `http:`
/// sections, its listener.
pub struct Proxying {
    gateway: Arc<Gateway<AnyBackend>>,
    config: GatewayConfig,
    started_with: StartupSections<Draft>,
}

impl Proxying {
    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway<AnyBackend>> {
        &self.gateway
    }
}

impl Frontend for Proxying {
    fn sections() -> Vec<&'static str> {
        vec![crate::settings::SECTION, floodgate_http::identity::SECTION]
    }

    type Config = Parts;

    fn build(parts: Parts, health: &Arc<Health>, _: &Settings) -> Result<Self, RuntimeError> {
        let Parts {
            config,
            http,
            started_with,
        } = parts;
        // The upstream's pools are reaped by a task of the host's runtime.
        let upstream = Upstream::new(&config.upstream)?;
        let proxy = Proxy::with_limits(upstream, &config.limits, &config.forwarding);
        let engine = health.engine().clone();
        let gateway = Arc::new(Gateway::new(engine, proxy, config.access_log));
        gateway.set_limiter(http);
        Ok(Proxying {
            gateway,
            config,
            started_with,
        })
    }

    fn read_reload(&self, given: &Given, documents: &[Document]) -> Result<Apply, ConfigErrors> {
        let http = crate::reload::read_reload(given, documents)?;
        let changed = self.started_with.changed(documents);
        let gateway = self.gateway.clone();
        Ok(Box::new(move || {
            if changed {
                tracing::warn!("the gateway section changed: it is only read at startup");
            }
            if gateway.set_limiter(http) {
                tracing::info!("http section reloaded: new limiter");
            }
        }))
    }

    async fn serve(self: &Arc<Self>, listeners: &mut Listeners<'_>) -> Result<(), RuntimeError> {
        let config = &self.config;
        let tls = listeners.tls(config.tls.clone())?;
        let listener = listeners.bind("gateway", config.listen).await?;
        let addr = listener.local_addr().map_err(|source| RuntimeError::Bind {
            addr: config.listen,
            source,
        })?;
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
            limited = self.gateway.limiter().is_some(),
            rules = self.gateway.engine().policy().rules().len(),
            "gateway listening"
        );
        // Two descriptors a connection count against the open files limit:
        // the client's and an upstream's.
        let places = descriptors::fit_max_connections("gateway", config.limits.max_connections, 2);
        let http = Http::new(&config.limits.connection, Protocols::Http1AndHttp2);
        let served = self.gateway.clone();
        let https = tls.is_some();
        let stop = listeners.stop();
        listeners.push(tokio::spawn(serve(
            listener,
            places,
            counters(),
            http,
            tls,
            stop,
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
        )));
        Ok(())
    }
}

/// The gateway listener's metrics.
fn counters() -> Counters {
    Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    }
}
