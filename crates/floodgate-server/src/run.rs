//! Running the service: load the configuration, build the store, bind the
//! listeners, serve until SIGTERM/SIGINT, turn not-ready and keep serving
//! for the shutdown delay, then drain within the grace period and return.
//! The configuration is reloaded while serving: polled every
//! `server.reload_interval`, and at once on SIGHUP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource, Reloader};
use futures_util::future::join_all;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::AnyBackend;
use crate::error::ServerError;
use crate::service::Service;
use crate::settings::{self, Overrides, Settings, StoreSettings};

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
pub fn load(opts: &ServeOptions) -> Result<(ConfigSource, Compiled, Settings), ServerError> {
    let mut source = config_source(&opts.paths, opts.merge_domains, &opts.other_sections);
    source.options.envoy_increment_all = opts
        .flags
        .envoy_increment_all
        .or(opts.env.envoy_increment_all);
    let compiled = source.compile().map_err(ServerError::Config)?;
    let mut s = settings::read_sections(&compiled.loaded.documents).map_err(ServerError::Config)?;
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
) -> Result<(), ServerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("floodgate")
        .build()
        .map_err(|e| ServerError::Runtime(e.to_string()))?;
    runtime.block_on(serve(
        source,
        compiled,
        settings,
        prometheus,
        shutdown_signal(),
    ))
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received: shutting down"),
    }
}

/// Runs `on_hangup` on every SIGHUP until the returned task is aborted
/// (none: the signal cannot be listened to). A SIGHUP then no longer ends
/// the process, as it would by default.
pub fn spawn_on_hangup(on_hangup: impl Fn() + Send + 'static) -> Option<JoinHandle<()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| tracing::warn!(error = %e, "cannot listen to SIGHUP"))
        .ok()?;
    Some(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the configuration");
            on_hangup();
        }
    }))
}

/// Aborts a task when dropped.
pub struct AbortOnDrop(pub Option<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Serves until `shutdown` resolves, then drains.
pub async fn serve(
    source: ConfigSource,
    compiled: Compiled,
    settings: Settings,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServerError> {
    if let Some(h) = &prometheus {
        crate::metrics::spawn_upkeep(h.clone(), Duration::from_secs(5));
    }
    let store = match &settings.store {
        StoreSettings::Memory { capacity } => format!("memory (capacity {capacity} keys)"),
        StoreSettings::Redis(r) => {
            let urls: Vec<String> = r.urls.iter().map(|u| redact(u)).collect();
            format!("redis {:?} {}", r.mode, urls.join(","))
        }
    };
    crate::backend::check_policy(&settings.store, &compiled.policy)?;
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
    let watch = spawn_reloader(source, compiled, &svc, settings.server.reload_interval);
    let trigger = watch.trigger();
    let _hangup = AbortOnDrop(spawn_on_hangup(move || trigger.request()));
    let _watch = watch;

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    let s = &settings.server;
    if let Some(addr) = s.grpc {
        let listener = bind(addr).await?;
        log_listening("grpc", &listener);
        tasks.push(
            crate::grpc_server::spawn(svc.clone(), listener, s.body_limit, stop_rx.clone()).await?,
        );
    }
    if let Some(addr) = s.http {
        let listener = bind(addr).await?;
        log_listening("http", &listener);
        let router = crate::http::router(svc.clone(), s.body_limit);
        tasks.push(spawn_axum(listener, router, stop_rx.clone()));
    }
    if let Some(addr) = s.admin {
        let listener = bind(addr).await?;
        log_listening("admin", &listener);
        let router = crate::admin::router(svc.clone(), prometheus);
        tasks.push(spawn_axum(listener, router, stop_rx.clone()));
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
    // Not ready first: load balancers and Envoy stop sending new calls
    // while the listeners still answer those already on their way.
    svc.start_draining();
    let delay = settings.server.shutdown_delay;
    if failed.is_none() && !delay.is_zero() {
        tracing::info!(delay = ?delay, "not ready; serving on for the shutdown delay");
        tokio::time::sleep(delay).await;
    }
    let _ = stop_tx.send(true);
    let grace = settings.server.shutdown_grace;
    tracing::info!(grace = ?grace, "draining in-flight calls");
    match tokio::time::timeout(grace, join_all(tasks)).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => tracing::warn!("grace period over; calls still in flight were abandoned"),
    }
    match failed {
        Some(e) => Err(ServerError::Runtime(e)),
        None => Ok(()),
    }
}

fn log_listening(what: &str, l: &TcpListener) {
    if let Ok(a) = l.local_addr() {
        tracing::info!(listener = what, addr = %a, "listening");
    }
}

fn spawn_axum(
    listener: TcpListener,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|v| *v).await;
            })
            .await
            .map_err(|e| e.to_string())
    })
}

/// Watches the configuration: every `interval` (zero: only on SIGHUP).
fn spawn_reloader(
    source: ConfigSource,
    compiled: Compiled,
    svc: &Arc<Service>,
    interval: Duration,
) -> floodgate_policy::reload::WatchHandle {
    let svc = svc.clone();
    let reloader = Reloader::new(source, &compiled, move |c: Compiled| {
        if let Err(e) = settings::read_sections(&c.loaded.documents) {
            tracing::warn!(errors = %e, "server/store sections are invalid (they are only read at startup)");
        }
        crate::backend::replace_policy(&svc, c.policy)
    });
    reloader.spawn(interval)
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
    use super::redact;

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
