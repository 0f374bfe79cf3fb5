//! Running the service: load the configuration, build the store, bind the
//! listeners, serve until SIGTERM/SIGINT, turn not-ready and keep serving
//! for the shutdown delay, then drain within the grace period and return.
//! The configuration is reloaded while serving: polled every
//! `server.reload_interval`, and at once on SIGHUP.

use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::reload::Compiled;
use floodgate_runtime::config::Loaded;
use floodgate_runtime::lifecycle::{Watching, shut_down};
use floodgate_runtime::listener::{Http, Protocols, bind, descriptors, spawn_service};
use floodgate_runtime::settings::StartupSections;
use floodgate_runtime::tls::Certificates;
use floodgate_runtime::{Health, RuntimeError};
use futures_util::future::join_all;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::decision::DecisionService;

/// Runs the service on a new runtime (`server.workers` threads) until a
/// shutdown signal; logging must already be set up (see
/// [`floodgate_runtime::logging::init`]).
pub fn run(loaded: Loaded, prometheus: Option<PrometheusHandle>) -> Result<(), RuntimeError> {
    let runtime = floodgate_runtime::threads::runtime(loaded.settings.server.workers, "floodgate")
        .map_err(|e| RuntimeError::Runtime(e.to_string()))?;
    let shutdown = {
        let _entered = runtime.enter();
        floodgate_runtime::signals::shutdown_signal()
    };
    runtime.block_on(serve(loaded, prometheus, shutdown))
}

/// Serves until `shutdown` resolves, then drains.
pub async fn serve(
    loaded: Loaded,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RuntimeError> {
    let Loaded {
        source,
        compiled,
        settings,
        given,
        thread,
    } = loaded;
    if let Some(h) = &prometheus {
        floodgate_runtime::metrics::spawn_upkeep(h.clone(), Duration::from_secs(5));
    }
    let startup = StartupSections::of(&compiled.loaded.documents);
    let Compiled { policy, loaded } = compiled;
    let health = Health::start(&settings, policy).await?;
    let svc = Arc::new(DecisionService::new(health, &settings)?);
    // The reloader only needs the files that were read.
    let compiled = Compiled {
        policy: floodgate_policy::PolicySet::empty(),
        loaded,
    };
    floodgate_runtime::config::log_loaded(
        &compiled.loaded.files,
        &svc.engine().policy(),
        &settings.store,
    );
    let reloaded = svc.clone();
    let apply = move |c: Compiled| {
        startup.check_reload(&given, &c.loaded.documents);
        reloaded.replace_policy(c.policy)
    };
    let s = &settings.server;
    let mut certificates = Certificates::default();
    let grpc_tls = certificates.add(s.tls.grpc.files())?;
    let http_tls = certificates.add(s.tls.http.files())?;
    let admin_tls = certificates.add(s.tls.admin.files())?;
    // Renewed certificates are picked up at the policies' pace.
    let reload_certificates = move |forced| certificates.reload(forced);
    let interval = s.reload_interval;
    let _watching = Watching::start(thread, source, compiled, interval, apply, reload_certificates);

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    // Each public listener has its cap, the admin listener its own;
    // together they fit the open files limit.
    let listeners = u64::from(s.grpc.is_some()) + u64::from(s.http.is_some());
    let public = descriptors::fit_max_connections("grpc, http", s.max_connections, listeners);
    // The admin listener first: once a public listener answers ready, the
    // metrics are there too.
    let admin = crate::admin::router(svc.clone(), prometheus);
    let hosts = &s.admin_hosts;
    let stop = stop_rx.clone();
    let admin = floodgate_runtime::admin::spawn(s.admin, hosts, admin, &s.limits, admin_tls, stop);
    tasks.extend(admin.await?);
    if let Some(addr) = s.grpc {
        let listener = bind("grpc", addr).await?;
        let http = Http::new(&s.limits, Protocols::Http2);
        let stop = stop_rx.clone();
        tasks.push(crate::grpc::spawn(svc.clone(), listener, http, grpc_tls, public, stop).await?);
    }
    if let Some(addr) = s.http {
        let listener = bind("http", addr).await?;
        let api = crate::http::router(svc.clone());
        let api = hyper_util::service::TowerToHyperService::new(api);
        let http = Http::new(&s.limits, Protocols::Http1AndHttp2);
        let stop = stop_rx.clone();
        tasks.push(spawn_service("http", listener, api, http, http_tls, public, stop));
    }

    // Serve until the signal, or until a server fails.
    let failed = tokio::select! {
        _ = shutdown => None,
        (res, _, _) = futures_util::future::select_all(tasks.iter_mut()) => Some(match res {
            Ok(()) => "a server stopped".to_owned(),
            Err(e) => e.to_string(),
        }),
    };
    // A failed listener ends the process at once; a signal after the
    // shutdown delay.
    let delay = match failed {
        None => settings.server.shutdown_delay,
        Some(_) => Duration::ZERO,
    };
    let grace = settings.server.shutdown_grace;
    shut_down(svc.health(), delay, &stop_tx, grace, join_all(tasks)).await;
    failed.map_or(Ok(()), |e| Err(RuntimeError::Runtime(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_policy::{Engine, PolicySet};
    use floodgate_redis::{RedisBackend, ResilientBackend};
    use floodgate_runtime::AnyBackend;
    use floodgate_runtime::settings::{Env, Flags, Settings, StoreKind, Value};

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
        floodgate_runtime::config::load(&flags, &Env::new(&|_| None))
    }

    fn policy_of(text: &str) -> PolicySet {
        let dir = tempfile::tempdir().unwrap();
        load(&write(&dir, text)).unwrap().compiled.policy
    }

    #[tokio::test]
    async fn a_rule_redis_cannot_decide_fails_startup_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&write(&dir, &format!("{REDIS}{BAD}"))).unwrap();
        assert_eq!(loaded.settings.store.backend, StoreKind::Redis);
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
        let svc = DecisionService::new(health, &Settings::default()).unwrap();
        let labels = |svc: &DecisionService| -> Vec<String> {
            let p = svc.engine().policy();
            p.rules().iter().map(|r| r.label().to_owned()).collect()
        };
        assert_eq!(labels(&svc), ["per-user"]);
        let err = svc.replace_policy(policy_of(BAD)).unwrap_err();
        assert!(err.to_string().contains("too-fine"), "{err}");
        assert_eq!(labels(&svc), ["per-user"]);
        let fixed = BAD.replace("1500ns", "2us");
        svc.replace_policy(policy_of(&fixed)).unwrap();
        assert_eq!(labels(&svc), ["per-user", "too-fine"]);
    }
}
