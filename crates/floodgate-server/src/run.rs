//! Running the service: load the configuration, build the store, bind the
//! listeners, serve until SIGTERM/SIGINT, turn not-ready and keep serving
//! for the shutdown delay, then drain within the grace period and return.
//! The configuration is reloaded while serving: polled every
//! `server.reload_interval`, and at once on SIGHUP.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::PolicySet;
use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource};
use floodgate_runtime::lifecycle::{Watching, shut_down};
use floodgate_runtime::listen::{bind, spawn_router};
use floodgate_runtime::settings::{self, Overrides, Settings, StoreSettings};
use floodgate_runtime::{AnyBackend, RuntimeError};
use futures_util::future::join_all;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::service::Service;

/// What `floodgate serve` was asked to do.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Configuration files or directories.
    pub paths: Vec<PathBuf>,
    /// Merge several files of one domain (`MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Settings from the environment (over the file's).
    pub env: Overrides,
    /// Settings from flags (over the environment's).
    pub flags: Overrides,
    /// Top-level sections of the same files that other components read
    /// (accepted and left alone).
    pub other_sections: Vec<&'static str>,
}

/// The configuration source for `paths`, accepting the service's sections
/// and `other_sections`.
pub fn config_source(
    paths: &[PathBuf],
    merge_domains: bool,
    other_sections: &[&'static str],
) -> ConfigSource {
    let mut sections = settings::SECTIONS.to_vec();
    sections.extend(
        other_sections
            .iter()
            .filter(|s| !settings::SECTIONS.contains(s)),
    );
    ConfigSource {
        paths: paths.to_vec(),
        options: LoadOptions {
            merge_domains,
            other_sections: sections,
            envoy_increment_all: None,
        },
    }
}

/// Loads the configuration and the settings (file, then environment,
/// then flags). Install the metrics recorder first
/// ([`crate::metrics::install`]): rules resolve their metric handles when
/// they are compiled.
pub fn load(opts: &ServeOptions) -> Result<(ConfigSource, Compiled, Settings), RuntimeError> {
    let mut source = config_source(&opts.paths, opts.merge_domains, &opts.other_sections);
    source.options.envoy_increment_all = opts
        .flags
        .envoy_increment_all
        .or(opts.env.envoy_increment_all);
    let compiled = source.compile().map_err(RuntimeError::Config)?;
    let mut s =
        settings::read_sections(&compiled.loaded.documents).map_err(RuntimeError::Config)?;
    opts.env.apply(&mut s)?;
    opts.flags.apply(&mut s)?;
    Ok((source, compiled, s))
}

/// Runs the service on a new multi-threaded runtime until a shutdown
/// signal; logging must already be set up (see [`crate::logging::init`]).
pub fn run(
    source: ConfigSource,
    compiled: Compiled,
    settings: Settings,
    prometheus: Option<PrometheusHandle>,
) -> Result<(), RuntimeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("floodgate")
        .build()
        .map_err(|e| RuntimeError::Runtime(e.to_string()))?;
    runtime.block_on(serve(
        source,
        compiled,
        settings,
        prometheus,
        floodgate_runtime::signals::shutdown_signal(),
    ))
}

/// Serves until `shutdown` resolves, then drains.
pub async fn serve(
    source: ConfigSource,
    compiled: Compiled,
    settings: Settings,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RuntimeError> {
    if let Some(h) = &prometheus {
        floodgate_runtime::metrics::spawn_upkeep(h.clone(), Duration::from_secs(5));
    }
    let store = match &settings.store {
        StoreSettings::Memory { capacity } => format!("memory (capacity {capacity} keys)"),
        StoreSettings::Redis(r) => {
            let urls: Vec<String> = r.urls.iter().map(|u| redact(u)).collect();
            format!("redis {:?} {}", r.mode, urls.join(","))
        }
    };
    floodgate_runtime::backend::check_policy(&settings.store, &compiled.policy)?;
    let backend = AnyBackend::build(&settings.store).await?;
    let files: Vec<String> = compiled
        .loaded
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let Compiled { policy, loaded } = compiled;
    let svc = Arc::new(Service::new(policy, backend, &settings)?);
    // The reloader only needs the files that were read.
    let compiled = Compiled {
        policy: floodgate_policy::PolicySet::empty(),
        loaded,
    };
    tracing::info!(
        files = %files.join(","),
        domains = svc.engine().policy().domains().count(),
        rules = svc.engine().policy().rules().len(),
        store = %store,
        "configuration loaded"
    );
    let _watching = watch_config(source, compiled, &svc, settings.server.reload_interval);

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    let s = &settings.server;
    if let Some(addr) = s.grpc {
        let listener = bind("grpc", addr).await?;
        tasks.push(
            crate::grpc_server::spawn(svc.clone(), listener, s.body_limit, stop_rx.clone()).await?,
        );
    }
    if let Some(addr) = s.http {
        let listener = bind("http", addr).await?;
        let router = crate::http::router(svc.clone(), s.body_limit);
        tasks.push(spawn_router(listener, router, stop_rx.clone()));
    }
    if let Some(addr) = s.admin {
        let listener = bind("admin", addr).await?;
        let router = crate::admin::router(svc.clone(), prometheus);
        tasks.push(spawn_router(listener, router, stop_rx.clone()));
    }

    // Serve until the signal, or until a server fails.
    let mut failed = None;
    {
        let any_done = futures_util::future::select_all(tasks.iter_mut());
        tokio::select! {
            _ = shutdown => {}
            (res, _, _) = any_done => {
                failed = Some(match res {
                    Ok(Ok(())) => "a server stopped".to_owned(),
                    Ok(Err(e)) => e,
                    Err(e) => e.to_string(),
                });
            }
        }
    }
    // A failed listener ends the process at once; a signal after the
    // shutdown delay.
    let delay = match failed {
        None => settings.server.shutdown_delay,
        Some(_) => Duration::ZERO,
    };
    let grace = settings.server.shutdown_grace;
    shut_down(svc.health(), delay, &stop_tx, grace, join_all(tasks)).await;
    match failed {
        Some(e) => Err(RuntimeError::Runtime(e)),
        None => Ok(()),
    }
}

/// Watches the configuration: every `interval` (zero: only on SIGHUP).
fn watch_config(
    source: ConfigSource,
    compiled: Compiled,
    svc: &Arc<Service>,
    interval: Duration,
) -> Watching {
    let svc = svc.clone();
    let apply = move |c: Compiled| {
        if let Err(e) = settings::read_sections(&c.loaded.documents) {
            tracing::warn!(errors = %e, "server/store sections are invalid (they are only read at startup)");
        }
        replace_policy(&svc, c.policy)
    };
    Watching::start(source, &compiled, interval, apply, || {})
}

/// Swaps a reloaded `policy` into `svc`, unless its store cannot decide
/// one of its limits: the running policy then stays.
pub fn replace_policy(svc: &Service, policy: PolicySet) -> Result<(), RuntimeError> {
    svc.engine().backend().check_policy(&policy)?;
    svc.replace_policy(policy);
    Ok(())
}

/// `url` without its credentials (`redis://user:secret@host` becomes
/// `redis://***@host`), for logs.
fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let redacted = match rest[..authority_end].rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    match scheme {
        Some(s) => format!("{s}://{redacted}"),
        None => redacted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_redis::{RedisBackend, ResilientBackend};

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

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("floodgate.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn policy_of(text: &str) -> PolicySet {
        let dir = tempfile::tempdir().unwrap();
        let opts = ServeOptions {
            paths: vec![write(&dir, text)],
            ..ServeOptions::default()
        };
        load(&opts).unwrap().1.policy
    }

    #[tokio::test]
    async fn a_rule_redis_cannot_decide_fails_startup_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ServeOptions {
            paths: vec![write(&dir, &format!("{REDIS}{BAD}"))],
            ..ServeOptions::default()
        };
        let (source, compiled, settings) = load(&opts).unwrap();
        assert!(matches!(settings.store, StoreSettings::Redis(_)));
        // Refused before any connection is attempted (none could succeed).
        let err = serve(source, compiled, settings, None, std::future::pending())
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
        let svc = Service::new(policy_of(GOOD), backend, &Settings::default()).unwrap();
        let labels = |svc: &Service| -> Vec<String> {
            let p = svc.engine().policy();
            p.rules().iter().map(|r| r.label().to_owned()).collect()
        };
        assert_eq!(labels(&svc), ["per-user"]);
        let err = replace_policy(&svc, policy_of(BAD)).unwrap_err();
        assert!(err.to_string().contains("too-fine"), "{err}");
        assert_eq!(labels(&svc), ["per-user"]);
        let fixed = BAD.replace("1500ns", "2us");
        replace_policy(&svc, policy_of(&fixed)).unwrap();
        assert_eq!(labels(&svc), ["per-user", "too-fine"]);
    }

    #[test]
    fn concurrency_permits_have_a_lease_by_default() {
        let lease = |extra: &str| {
            let dir = tempfile::tempdir().unwrap();
            let opts = ServeOptions {
                paths: vec![write(&dir, &format!("{REDIS}{extra}{GOOD}"))],
                ..ServeOptions::default()
            };
            match load(&opts).unwrap().2.store {
                StoreSettings::Redis(r) => r.concurrency_lease,
                StoreSettings::Memory { .. } => panic!("a Redis store"),
            }
        };
        let default = Some(floodgate_redis::DEFAULT_CONCURRENCY_LEASE);
        assert_eq!(lease(""), default);
        assert_eq!(
            lease("  concurrency_lease: 30s\n"),
            Some(Duration::from_secs(30))
        );
        // 0 turns the lease off: permits live until released.
        assert_eq!(lease("  concurrency_lease: 0s\n"), None);
    }

    #[test]
    fn credentials_never_reach_the_logs() {
        assert_eq!(
            redact("redis://user:s3cret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:pw@host:6380"), "rediss://***@host:6380");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("host:6379"), "host:6379");
        assert_eq!(redact("redis://host/path@x"), "redis://host/path@x");
    }
}
