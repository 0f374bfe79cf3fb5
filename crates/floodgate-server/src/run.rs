//! `floodgate serve`: the host ([`floodgate_runtime::host`]) running the
//! rate limit service, [`Rls`]: its gRPC listener (Envoy RLS v3, health,
//! reflection), its HTTP listener (`/json`, `/v1/check`, ...) and
//! `/rlconfig` on the admin listener. Its settings ([`RlsSettings`]) are
//! keys of the `server:` section, read at startup only (a change is
//! logged); a reload puts the new policies in force.

use std::sync::Arc;

use floodgate_policy::ConfigErrors;
use floodgate_policy::engine::RequestLimits;
use floodgate_policy::yaml::Document;
use floodgate_runtime::RuntimeError;
use floodgate_runtime::host::{self, Apply, Frontend, Listeners};
use floodgate_runtime::host::{AnyBackend, Health};
use floodgate_runtime::listener::{Http, Protocols, UnixSocket, descriptors, spawn_service};
use floodgate_runtime::settings::{Env, Flags, Given, Settings};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::decision::DecisionService;
use crate::settings::RlsSettings;

/// A configuration loaded for the service: what every command loads, and
/// the service's settings.
#[derive(Debug)]
pub struct Loaded {
    /// The policies, the settings the service shares with the gateway
    /// (`store:`, the admin listener, logs, ...), where they came from.
    pub runtime: host::Loaded,
    /// The service's own settings.
    pub rls: RlsSettings,
}

/// Loads the configuration `flags` and `env` point to, as every command
/// does ([`floodgate_runtime::host::load`], with `sections`: the
/// frontends' a file may hold, the service's among them, see
/// [`Frontend::sections`]; none given: the first of `default_config`),
/// and the service's settings; every problem is reported. Install the
/// metrics recorder first: rules resolve their metric handles when they
/// are compiled.
pub fn load(
    flags: &Flags,
    env: &Env<'_>,
    sections: &[&'static str],
    default_config: &[&str],
) -> Result<Loaded, RuntimeError> {
    let (read, given) = Given::record(flags, env, |flags, env| {
        let runtime = host::load(flags, env, sections, default_config)?;
        let rls = RlsSettings::resolve(flags, env, &runtime.compiled.loaded.documents);
        Ok::<_, RuntimeError>((runtime, rls.map_err(RuntimeError::Config)?))
    });
    let (mut runtime, rls) = read?;
    // What the service's settings read too.
    runtime.given = given;
    Ok(Loaded { runtime, rls })
}

/// The rate limit service as a frontend of the host.
pub struct Rls {
    svc: Arc<DecisionService>,
    settings: RlsSettings,
}

impl Rls {
    /// The engine it decides with.
    pub fn engine(&self) -> &floodgate_policy::Engine<AnyBackend> {
        self.svc.engine()
    }
}

impl Frontend for Rls {
    /// Its keys of the `server:` section.
    fn sections() -> Vec<&'static str> {
        RlsSettings::keys()
    }

    type Config = RlsSettings;

    fn request_limits(settings: &RlsSettings) -> RequestLimits {
        settings.request_limits
    }

    fn build(
        settings: RlsSettings,
        health: &Arc<Health>,
        _: &Settings,
    ) -> Result<Self, RuntimeError> {
        let svc = Arc::new(DecisionService::new(health.clone(), &settings)?);
        Ok(Rls { svc, settings })
    }

    /// Its settings are read at startup only: a reload that changes them
    /// (or makes them invalid) is logged, and applies the rest.
    fn read_reload(&self, given: &Given, documents: &[Document]) -> Result<Apply, ConfigErrors> {
        let read = given.replay(|flags, env| RlsSettings::resolve(flags, env, documents));
        let changed = read.map(|s| s != self.settings);
        Ok(Box::new(move |_| match changed {
            Err(e) => tracing::warn!(
                errors = %e,
                "the service's settings are invalid (they are only read at startup)"
            ),
            Ok(true) => tracing::warn!(
                "the service's settings changed: they are only read at startup (restart to apply them)"
            ),
            Ok(false) => {}
        }))
    }

    fn admin_routes(self: &Arc<Self>) -> axum::Router {
        crate::admin::routes(self.svc.clone())
    }

    async fn serve(self: &Arc<Self>, listeners: &mut Listeners<'_>) -> Result<(), RuntimeError> {
        let s = &self.settings;
        let limits = &listeners.settings().server.limits;
        // Each public listener has its cap, the admin listener its own;
        // together they fit the open files limit.
        let grpc = s.grpc.is_some() || s.grpc_uds.is_some();
        let public = u64::from(grpc) + u64::from(s.http.is_some());
        let places = descriptors::fit_max_connections("grpc, http", s.max_connections, public);
        self.serve_grpc(listeners, places).await?;
        if let Some(addr) = s.http {
            let tls = listeners.tls(s.http_tls.files())?;
            let listener = listeners.bind("http", addr).await?;
            let api = crate::http::router(self.svc.clone());
            let api = hyper_util::service::TowerToHyperService::new(api);
            let http = Http::new(limits, Protocols::Http1AndHttp2);
            let stop = listeners.stop();
            listeners.push(spawn_service(
                "http", listener, api, http, tls, places, stop,
            ));
        }
        Ok(())
    }
}

impl Rls {
    /// Serves the gRPC listener, if any: on its Unix socket (`grpc_uds`,
    /// instead of TCP, as envoyproxy/ratelimit's `GRPC_UDS`), else on
    /// `grpc`; TLS as set either way; connections aged as set.
    async fn serve_grpc(
        &self,
        listeners: &mut Listeners<'_>,
        places: usize,
    ) -> Result<(), RuntimeError> {
        let s = &self.settings;
        let mut limits = listeners.settings().server.limits.clone();
        (limits.max_connection_age, limits.max_connection_age_grace) = s.grpc_max_connection_age;
        let http = Http::new(&limits, Protocols::Http2);
        let (svc, stop) = (self.svc.clone(), listeners.stop());
        let grpc = crate::grpc::Grpc {
            rlqs: s.rlqs,
            http2: s.grpc_http2,
        };
        let task = if let Some(path) = &s.grpc_uds {
            let tls = listeners.tls(s.grpc_tls.files())?;
            let socket = UnixSocket::bind("grpc", path)?;
            crate::grpc::spawn(svc, grpc, socket, http, tls, places, stop).await?
        } else if let Some(addr) = s.grpc {
            let tls = listeners.tls(s.grpc_tls.files())?;
            let listener = listeners.bind("grpc", addr).await?;
            crate::grpc::spawn(svc, grpc, listener, http, tls, places, stop).await?
        } else {
            return Ok(());
        };
        listeners.push(task);
        Ok(())
    }
}

/// Runs the service on a new runtime (`server.workers` threads) until a
/// shutdown signal; logging must already be set up (see
/// [`floodgate_runtime::host::logging::init`]).
pub fn run(loaded: Loaded, prometheus: Option<PrometheusHandle>) -> Result<(), RuntimeError> {
    host::run::<Rls>(loaded.runtime, loaded.rls, prometheus, "floodgate")
}

/// Serves until `shutdown` resolves, then drains.
pub async fn serve(
    loaded: Loaded,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RuntimeError> {
    let running = host::start::<Rls>(loaded.runtime, loaded.rls, prometheus).await?;
    running.serve_until(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_policy::{Engine, PolicySet};
    use floodgate_redis::{RedisBackend, ResilientBackend};
    use floodgate_runtime::host::replace_policy;
    use floodgate_runtime::settings::PolicyOverrides;
    use floodgate_runtime::settings::{Env, Flags, StoreKind, Value};

    const GOOD: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 1m}
";
    /// A rule Redis cannot decide exactly: a period of 1.5 µs.
    const BAD: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 1m}
      - key: odd
        rate_limit: {name: too-fine, algorithm: token_bucket, requests: 1, per: 1500ns}
";
    const REDIS: &str = "
store:
  backend: redis
  url: 127.0.0.1:1
  timeout: 20ms
  connect_timeout: 20ms
";

    fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
        let path = dir.path().join("floodgate.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load(path: &std::path::Path) -> Result<Loaded, RuntimeError> {
        let mut flags = Flags::new();
        flags.set("config", Value::one(path.display().to_string()));
        super::load(&flags, &Env::new(&|_| None), &Rls::sections(), &[])
    }

    fn policy_of(text: &str) -> PolicySet {
        let dir = tempfile::tempdir().unwrap();
        load(&write(&dir, text)).unwrap().runtime.compiled.policy
    }

    #[tokio::test]
    async fn a_rule_redis_cannot_decide_fails_startup_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&write(&dir, &format!("{REDIS}{BAD}"))).unwrap();
        assert_eq!(loaded.runtime.settings.store.backend, StoreKind::Redis);
        // Refused before any connection is attempted (none could succeed).
        let err = serve(loaded, None, std::future::pending())
            .await
            .expect_err("startup fails");
        let text = err.to_string();
        assert!(text.contains("too-fine"), "{text}");
        assert!(!text.contains("per-user"), "{text}");
    }

    #[tokio::test]
    async fn a_reload_redis_cannot_decide_keeps_the_running_policy() {
        let config =
            floodgate_redis::RedisConfig::new("127.0.0.1:1", floodgate_redis::Mode::Single)
                .unwrap();
        let redis = RedisBackend::connect_lazy(&config).await.unwrap();
        let backend = AnyBackend::Redis(Box::new(ResilientBackend::new(redis, &config).unwrap()));
        let health = Arc::new(Health::new(Arc::new(Engine::new(policy_of(GOOD), backend))));
        let svc = DecisionService::new(health, &RlsSettings::default()).unwrap();
        let labels = |svc: &DecisionService| -> Vec<String> {
            let p = svc.engine().policy();
            p.rules().iter().map(|r| r.label().to_owned()).collect()
        };
        assert_eq!(labels(&svc), ["per-user"]);
        let replace = |policy| replace_policy(svc.engine(), &PolicyOverrides::default(), policy);
        let err = replace(policy_of(BAD)).unwrap_err();
        assert!(err.to_string().contains("too-fine"), "{err}");
        assert_eq!(labels(&svc), ["per-user"]);
        let fixed = BAD.replace("1500ns", "2us");
        replace(policy_of(&fixed)).unwrap();
        assert_eq!(labels(&svc), ["per-user", "too-fine"]);
    }
}
