//! The declarations of the configuration's own settings, the `server:`
//! section's keys both binaries read (the admin listener, its protections,
//! reload, shutdown, threads, logs; the service's own listeners and
//! requests are its frontend's: `floodgate_server::RlsSettings`) and the
//! policy settings forced from outside the file.

use std::path::PathBuf;

use super::listener::{self, ProtectionsAt, ProtectionsInstance, TlsAt, TlsInstance, TlsSettings};
use super::parse::{ANY, LOOPBACK, boolean, choice, count_in, duration, parse_listen_on};
use super::table::{Env, Envoy, EnvoyRead, InFile, Kind, Setting};
use super::{LogFormat, Settings};
use crate::listener::ConnectionLimits;

type S = Setting<Settings>;

/// The protections of the admin listener's connections (and the
/// service's listeners'), `server.limits.*`.
pub(super) struct ServerProtections;

impl ProtectionsAt<Settings> for ServerProtections {
    fn limits(s: &mut Settings) -> &mut ConnectionLimits {
        &mut s.server.limits
    }
}

/// The `server.limits` group: its keys, variables and flags, and the
/// defaults of its HTTP/2 protections.
pub(super) const PROTECTIONS: ProtectionsInstance = ProtectionsInstance {
    key: "server.limits",
    env: "FLOODGATE_",
    flag: "",
    max_concurrent_streams: "1024",
    http2_idle_timeout: "30s",
};

/// Where the admin listener keeps its TLS.
pub(super) struct AdminTls;

impl TlsAt<Settings> for AdminTls {
    fn tls(s: &mut Settings) -> &mut TlsSettings {
        &mut s.server.admin_tls
    }
}

/// Where the metrics listener keeps its TLS.
pub(super) struct MetricsTls;

impl TlsAt<Settings> for MetricsTls {
    fn tls(s: &mut Settings) -> &mut TlsSettings {
        &mut s.server.metrics_tls
    }
}

/// Checks the TLS files of the admin and metrics listeners
/// ([`listener::finish_tls`]).
pub(super) fn finish_tls(
    s: &mut Settings,
    origins: &super::table::Origins,
    errors: &mut floodgate_policy::error::Errors,
) {
    listener::finish_tls(&mut s.server.admin_tls, &ADMIN_TLS, origins, errors);
    listener::finish_tls(&mut s.server.metrics_tls, &METRICS_TLS, origins, errors);
}

pub(super) const ADMIN_TLS: TlsInstance = TlsInstance {
    key: "server.tls.admin",
    env: "FLOODGATE_ADMIN_TLS",
    flag: "admin-tls",
    listener: "the admin listener",
    envoy: None,
};

pub(super) const METRICS_TLS: TlsInstance = TlsInstance {
    key: "server.tls.metrics",
    env: "FLOODGATE_METRICS_TLS",
    flag: "metrics-tls",
    listener: "the metrics listener",
    envoy: None,
};

/// envoyproxy/ratelimit's runtime directory:
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY` (the app
/// directory defaulting to `config`).
fn runtime_root(env: &Env<'_>) -> EnvoyRead {
    let Some(root) = env.get("RUNTIME_ROOT") else {
        return Ok(None);
    };
    let mut path = PathBuf::from(root);
    if let Some(sub) = env.get("RUNTIME_SUBDIRECTORY") {
        path.push(sub);
    }
    path.push(
        env.get("RUNTIME_APPDIRECTORY")
            .unwrap_or_else(|| "config".into()),
    );
    Ok(Some(("RUNTIME_ROOT", path.display().to_string())))
}

/// envoyproxy/ratelimit's debug listener, the admin listener here:
/// `DEBUG_HOST` + `DEBUG_PORT`. Its `DEBUG_HOST` defaults to every
/// interface; here the internals stay on loopback unless `DEBUG_HOST` says
/// otherwise (`DEBUG_PORT` alone: a bare port, on loopback).
fn debug_listener(env: &Env<'_>) -> EnvoyRead {
    env.host_port("DEBUG_HOST", "DEBUG_PORT", "", 6070)
}

/// envoyproxy/ratelimit's Prometheus listener, the metrics listener here:
/// with `USE_PROMETHEUS` on, `PROMETHEUS_ADDR` (Go's `host:port`), by
/// default `:9090` as there. Go's empty host listens on every interface,
/// IPv4 and IPv6: `[::]`, one dual-stack socket.
fn prometheus_listener(env: &Env<'_>) -> EnvoyRead {
    const USE: &str = "USE_PROMETHEUS";
    let Some(on) = env.get(USE) else {
        return Ok(None);
    };
    if !boolean(&on).map_err(|m| (USE, m))? {
        return Ok(None);
    }
    let (var, addr) = match env.get("PROMETHEUS_ADDR") {
        Some(addr) => ("PROMETHEUS_ADDR", addr.trim().to_owned()),
        None => (USE, ":9090".to_owned()),
    };
    let every_interface = addr.starts_with(':');
    Ok(Some((
        var,
        if every_interface {
            format!("[::]{addr}")
        } else {
            addr
        },
    )))
}

/// A path for the metrics: `/` then letters, digits, `-`, `.`, `_`, `~`
/// and `/`, neither probe's.
fn metrics_path(text: &str) -> Result<String, String> {
    let path = text.trim();
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~/".contains(&b);
    if !path.starts_with('/') || !path.bytes().all(allowed) {
        let m = "expected a path: `/` then letters, digits, `-`, `.`, `_`, `~` or `/`";
        return Err(format!("{m}, found `{path}`"));
    }
    if path == "/healthcheck" || path == "/ready" {
        return Err(format!("`{path}` is a probe's path"));
    }
    Ok(path.to_owned())
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: envoyproxy/ratelimit
/// increments every matched counter unless told to stop at the limit.
fn stop_increment(env: &Env<'_>) -> EnvoyRead {
    const VAR: &str = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT";
    match env.get(VAR) {
        None => Ok(None),
        Some(v) => boolean(&v)
            .map(|stop| Some((VAR, (!stop).to_string())))
            .map_err(|m| (VAR, m)),
    }
}

/// `LOG_LEVEL`: a logrus level name, any case, as its `ParseLevel` reads
/// it, as the `tracing` filter of the same level (`fatal` and `panic`,
/// which `tracing` lacks: `error`).
fn logrus_level(env: &Env<'_>) -> EnvoyRead {
    const VAR: &str = "LOG_LEVEL";
    let Some(v) = env.get(VAR) else {
        return Ok(None);
    };
    let level = match v.trim().to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warning" | "warn" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => {
            let m = format!(
                "expected a logrus level (trace, debug, info, warning, warn, error, fatal, panic), found `{v}`"
            );
            return Err((VAR, m));
        }
    };
    Ok(Some((VAR, level.to_owned())))
}

// One setting in a few lines each: tables, laid out by hand, one per topic.
pub(super) fn declare(t: &mut Vec<S>) {
    config(t);
    super::xds::declare(t);
    listeners(t);
    protections(t);
    process(t);
    super::trace::declare(t);
    policy(t);
}

/// The configuration's own settings: where the files are, how they are
/// read.
#[rustfmt::skip]
fn config(t: &mut Vec<S>) {
    t.push(S::new("config", "FLOODGATE_CONFIG", "config", Kind::List, "",
        "configuration files or directories (repeatable; default: `./floodgate.yaml`, else the command's example: `./examples/floodgate.yaml` for `serve` and `config check`, `./examples/gateway.yaml` for `gateway`)",
        |s, v| { s.config.paths = v.items().iter().map(PathBuf::from).collect(); Ok(()) })
        .in_file(InFile::No)
        .envoy(Envoy::Read { names: "`RUNTIME_ROOT`/`RUNTIME_SUBDIRECTORY`/`RUNTIME_APPDIRECTORY`", read: runtime_root })
        .samples("a.yaml", "b.yaml"));
    t.push(S::new("merge_domains", "FLOODGATE_MERGE_DOMAINS", "merge-domains", Kind::Bool, "false",
        "merge several files of one domain instead of rejecting them",
        |s, v| { s.config.merge_domains = boolean(&v.text())?; Ok(()) })
        .in_file(InFile::No)
        .envoy(Envoy::Var("MERGE_DOMAIN_CONFIG")));
    t.push(S::new("allow_empty_config", "FLOODGATE_ALLOW_EMPTY_CONFIG", "allow-empty-config", Kind::Bool, "false",
        "accept an empty configuration (a file with nothing in it, no domain, a domain without rules), an error otherwise and refused on reload; never in a file, which cannot vouch for its own emptiness",
        |s, v| { s.config.allow_empty = boolean(&v.text())?; Ok(()) })
        .in_file(InFile::No));
}

/// The admin listener (its address, the names it answers to, its TLS)
/// and the metrics listener (its address, its TLS).
#[rustfmt::skip]
fn listeners(t: &mut Vec<S>) {
    // envoyproxy/ratelimit's debug port, here on loopback unless its host is given.
    t.push(S::new("server.admin", "FLOODGATE_ADMIN_ADDR", "admin-addr", Kind::Addr, "127.0.0.1:6070",
        "admin listener: `/metrics`, `/healthcheck`, `/ready`, `/dashboard` and the binary's internals (`:port` or a port: on loopback; `off`)",
        |s, v| { s.server.admin = parse_listen_on(&v.text(), LOOPBACK)?; Ok(()) })
        .envoy(Envoy::Read { names: "`DEBUG_HOST` + `DEBUG_PORT` (`DEBUG_PORT` alone: on loopback)", read: debug_listener }));
    listener::declare_tls::<_, AdminTls>(t, &ADMIN_TLS);
    t.push(S::new("server.admin_hosts", "FLOODGATE_ADMIN_HOSTS", "admin-hosts", Kind::List, "",
        "names the admin listener answers to (`Host`) besides `localhost`, `*.localhost` and IP addresses, e.g. a Service's DNS name; any other: 421 (a page rebinding its name to the listener reads nothing)",
        |s, v| {
            for name in v.items() {
                crate::admin_hosts::check_name(name)?;
            }
            s.server.admin_hosts = v.items().to_vec();
            Ok(())
        })
        .samples("admin.internal", "metrics.example"));
    t.push(S::new("server.metrics", "FLOODGATE_METRICS_ADDR", "metrics-addr", Kind::Addr, "off",
        "metrics listener, for Prometheus and probes from the pod network: `/metrics`, `/healthcheck`, `/ready` only, any `Host` (`:port` or a port: on every IPv4 interface, `[::]:port` for IPv6 too; `off`)",
        |s, v| { s.server.metrics = parse_listen_on(&v.text(), ANY)?; Ok(()) })
        .envoy(Envoy::Read { names: "`USE_PROMETHEUS` + `PROMETHEUS_ADDR` (`:port`: `[::]:port`, as Go)", read: prometheus_listener })
        .samples(":9901", "127.0.0.1:9901"));
    t.push(S::new("server.metrics_path", "FLOODGATE_METRICS_PATH", "metrics-path", Kind::Text, "/metrics",
        "the metrics listener's path of the metrics (its probes stay `/healthcheck` and `/ready`; the admin listener's stays `/metrics`)",
        |s, v| { s.server.metrics_path = metrics_path(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("PROMETHEUS_PATH"))
        .samples("/stats/prometheus", "/metrics"));
    listener::declare_tls::<_, MetricsTls>(t, &METRICS_TLS);
}

/// The protections of every connection of the listeners (the admin
/// listener's in both binaries; the service's declares the rest of its
/// `server.limits`).
fn protections(t: &mut Vec<S>) {
    listener::declare_protections::<_, ServerProtections>(t, &PROTECTIONS);
}

/// Reload, shutdown, threads and logs.
#[rustfmt::skip]
fn process(t: &mut Vec<S>) {
    t.push(S::new("server.reload_interval", "FLOODGATE_RELOAD_INTERVAL", "reload-interval", Kind::Duration, "1s",
        "how often the files are checked for changes (`0`: only on SIGHUP)",
        |s, v| { s.server.reload_interval = duration(&v.text())?; Ok(()) }));
    t.push(S::new("server.shutdown_delay", "FLOODGATE_SHUTDOWN_DELAY", "shutdown-delay", Kind::Duration, "0",
        "after SIGTERM/SIGINT, how long the listeners keep serving, not ready, before the drain",
        |s, v| { s.server.shutdown_delay = duration(&v.text())?; Ok(()) }));
    t.push(S::new("server.shutdown_grace", "FLOODGATE_SHUTDOWN_GRACE", "shutdown-grace", Kind::Duration, "10s",
        "how long requests in flight may take after the delay",
        |s, v| { s.server.shutdown_grace = duration(&v.text())?; Ok(()) }));
    t.push(S::new("server.workers", "FLOODGATE_WORKERS", "workers", Kind::Count, "",
        "worker threads of `floodgate serve` or `floodgate gateway` (empty: one per core; 1: a single-threaded runtime)",
        |s, v| { s.server.workers = Some(count_in(&v.text(), 1, 1024)?); Ok(()) }));
    t.push(S::new("server.log.level", "FLOODGATE_LOG", "log-level", Kind::Text, "info",
        "a `tracing` filter (`debug`, `floodgate_server=debug,info`)",
        |s, v| { s.server.log.level = v.text(); Ok(()) })
        .envoy(Envoy::Read { names: "`LOG_LEVEL` (logrus' level names)", read: logrus_level })
        .samples("debug", "warn"));
    t.push(S::new("server.log.format", "FLOODGATE_LOG_FORMAT", "log-format", Kind::Choice, "text",
        "`text` or `json` (one object per line)",
        |s, v| {
            let format = v.text().trim().to_ascii_lowercase();
            s.server.log.format = choice(&format, &[(&["text", ""], LogFormat::Text), (&["json"], LogFormat::Json)])?;
            Ok(())
        })
        .envoy(Envoy::Var("LOG_FORMAT"))
        .samples("json", "text"));
}

/// The policy settings forced over the file's `settings:`.
#[rustfmt::skip]
fn policy(t: &mut Vec<S>) {
    t.push(S::new("settings.shadow_mode", "FLOODGATE_SHADOW_MODE", "shadow-mode", Kind::Bool, "",
        "forces the policies' global shadow mode (count and report, never deny)",
        |s, v| { s.policy.shadow_mode = Some(boolean(&v.text())?); Ok(()) })
        .in_file(InFile::Policies)
        .envoy(Envoy::Var("SHADOW_MODE")));
    t.push(S::new("settings.near_limit_ratio", "FLOODGATE_NEAR_LIMIT_RATIO", "near-limit-ratio", Kind::Number, "",
        "forces the policies' near-limit ratio",
        |s, v| {
            let r = v
                .text()
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or("expected a number from 0 to 1")?;
            s.policy.near_limit_ratio = Some(r);
            Ok(())
        })
        .in_file(InFile::Policies)
        .envoy(Envoy::Var("NEAR_LIMIT_RATIO")));
    t.push(S::new("settings.envoy_increment_all", "FLOODGATE_ENVOY_INCREMENT_ALL", "envoy-increment-all", Kind::Bool, "",
        "forces envoyproxy/ratelimit's accounting: every matched counter counts every request (the fixed windows of its files whose rules set no `penalty`)",
        |s, v| { s.policy.envoy_increment_all = Some(boolean(&v.text())?); Ok(()) })
        .in_file(InFile::Policies)
        .envoy(Envoy::Read { names: "`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (inverted)", read: stop_increment }));
    t.push(S::new("settings.envoy_stats", "FLOODGATE_ENVOY_STATS", "envoy-stats", Kind::Bool, "",
        "also counts each rule's hits under envoyproxy/ratelimit's Prometheus names and labels (`ratelimit_service_rate_limit_*{domain,key1,key2}`), with its semantics",
        |s, v| { s.policy.envoy_stats = Some(boolean(&v.text())?); Ok(()) })
        .in_file(InFile::Policies)
        .envoy(Envoy::Read { names: "`USE_PROMETHEUS`", read: use_prometheus }));
}

/// `USE_PROMETHEUS`: envoyproxy/ratelimit's statistics under its own
/// Prometheus names.
fn use_prometheus(env: &Env<'_>) -> EnvoyRead {
    const VAR: &str = "USE_PROMETHEUS";
    match env.get(VAR) {
        None => Ok(None),
        Some(v) => boolean(&v)
            .map(|on| Some((VAR, on.to_string())))
            .map_err(|m| (VAR, m)),
    }
}
