//! The gateway as a frontend of the host ([`floodgate_runtime::host`]):
//! what it is built from ([`Parts`]: its `gateway:` and `http:` sections),
//! its reload (a new limiter when the `http:` section changed; the
//! `gateway:` section is read at startup only) and its listener.

use std::sync::Arc;

use floodgate_http::HttpSection;
use floodgate_policy::ConfigErrors;
use floodgate_policy::yaml::Document;
use floodgate_runtime::RuntimeError;
use floodgate_runtime::host::{AnyBackend, Apply, Frontend, Health, Listeners};
use floodgate_runtime::listener::{Counters, Http, Protocols, ProxyProtocol, descriptors, serve};
use floodgate_runtime::settings::{Given, Settings, StartupSections};
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::forward::Hop;
use crate::gateway::Gateway;
use crate::proxy::{ClientInfo, Proxy};
use crate::run::Loaded;
use crate::settings::Draft;
use crate::upstream::Upstream;

/// What the gateway is built from.
pub struct Parts {
    config: GatewayConfig,
    http: Option<HttpSection>,
    started_with: StartupSections<Draft>,
    frontend_keys: Vec<&'static str>,
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
            frontend_keys: loaded.runtime.frontend_keys.clone(),
        })
    }
}

/// The gateway as a frontend of the host: its `gateway:` and `http:`
/// sections, its listener.
pub struct Proxying {
    gateway: Arc<Gateway<AnyBackend>>,
    config: GatewayConfig,
    started_with: StartupSections<Draft>,
    /// The keys of the host's sections another binary reads.
    frontend_keys: Vec<&'static str>,
}

impl Proxying {
    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway<AnyBackend>> {
        &self.gateway
    }

    /// Says at WARN when the gateway limits nothing: a proxy started
    /// without an `http:` section or without a rule forwards every request.
    fn warn_if_unlimited(&self) {
        if self.gateway.limiter().is_none() {
            tracing::warn!(
                "no http: section: the gateway forwards every request and limits nothing"
            );
        } else if self.gateway.engine().policy().rules().is_empty() {
            tracing::warn!(
                "no rule in the policies: the gateway forwards every request and limits nothing"
            );
        }
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
            frontend_keys,
        } = parts;
        // The upstream's pools are reaped by a task of the host's runtime.
        let upstream = Upstream::new(&config.upstream)?;
        let proxy = Proxy::with_limits(upstream, &config.limits, &config.forwarding);
        let engine = health.engine().clone();
        let gateway = Arc::new(Gateway::new(engine, proxy, config.access_log));
        gateway.set_limiter(http, &health.engine().policy());
        Ok(Proxying {
            gateway,
            config,
            started_with,
            frontend_keys,
        })
    }

    fn read_reload(&self, given: &Given, documents: &[Document]) -> Result<Apply, ConfigErrors> {
        let http = crate::reload::read_reload(given, documents, &self.frontend_keys)?;
        let changed = self.started_with.changed(documents);
        let gateway = self.gateway.clone();
        Ok(Box::new(move |policy| {
            if changed {
                tracing::warn!("the gateway section changed: it is only read at startup");
            }
            if gateway.set_limiter(http, policy) {
                tracing::info!("http section reloaded: new limiter");
            }
        }))
    }

    async fn serve(self: &Arc<Self>, listeners: &mut Listeners<'_>) -> Result<(), RuntimeError> {
        let config = &self.config;
        let tls = listeners.tls(config.tls.clone())?;
        // Two descriptors a connection count against the open files limit:
        // the client's and an upstream's (said before the listener is).
        let places = descriptors::fit_max_connections("gateway", config.limits.max_connections, 2);
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
        self.warn_if_unlimited();
        tracing::info!(
            %addr,
            tls = tls.is_some(),
            proxy_protocol = !config.proxy_protocol.is_empty(),
            upstream = %upstreams.join(","),
            protocol = config.upstream.protocol.name(),
            limited = self.gateway.limiter().is_some(),
            rules = self.gateway.engine().policy().rules().len(),
            "gateway listening"
        );
        let http = http(config);
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
                    crate::trace::handle(gateway.clone(), req, client)
                })
            },
        )));
        Ok(())
    }
}

/// The listener's protocols and protections, the PROXY protocol among
/// them when sources are trusted to send it.
fn http(config: &GatewayConfig) -> Http {
    let http = Http::new(&config.limits.connection, Protocols::Http1AndHttp2);
    if config.proxy_protocol.is_empty() {
        return http;
    }
    http.with_proxy_protocol(ProxyProtocol::new(config.proxy_protocol.clone()))
}

/// The gateway listener's metrics.
fn counters() -> Counters {
    Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    }
}
