//! The declarations of the configuration's own settings, the `server:`
//! section and the policy settings forced from outside the file.

use std::path::PathBuf;

use floodgate_policy::engine::LimitOverrides;

use super::listener::{self, ProtectionsAt, ProtectionsInstance, TlsAt, TlsInstance, TlsSettings};
use super::parse::{
    ANY, LOOPBACK, boolean, choice, count_in, duration, parse_listen_on, positive_duration, size,
};
use super::table::{Env, Envoy, InFile, Kind, Setting, Value};
use super::{LogFormat, RlsDelayed, Settings};
use crate::listener::ConnectionLimits;

type S = Setting<Settings>;

/// The protections of the service's listeners, `server.limits.*` (the
/// admin listener's too, its connections capped apart).
pub(super) struct ServeProtections;

impl ProtectionsAt<Settings> for ServeProtections {
    fn limits(s: &mut Settings) -> &mut ConnectionLimits {
        &mut s.server.limits
    }
    fn max_connections(s: &mut Settings) -> &mut usize {
        &mut s.server.max_connections
    }
}

const PROTECTIONS: ProtectionsInstance = ProtectionsInstance {
    key: "server.limits",
    env: "FLOODGATE_",
    flag: "",
    max_concurrent_streams: "1024",
    http2_idle_timeout: "30s",
};

/// Where each of the service's listeners keeps its TLS.
macro_rules! tls_at {
    ($($marker:ident: $field:ident),*) => {$(
        pub(super) struct $marker;
        impl TlsAt<Settings> for $marker {
            fn tls(s: &mut Settings) -> &mut TlsSettings {
                &mut s.server.tls.$field
            }
        }
    )*};
}
tls_at!(GrpcTls: grpc, HttpTls: http, AdminTls: admin);

/// Checks the TLS files of every listener ([`listener::finish_tls`]).
pub(super) fn finish_tls(
    s: &mut Settings,
    origins: &super::table::Origins,
    errors: &mut floodgate_policy::error::Errors,
) {
    let tls = &mut s.server.tls;
    listener::finish_tls(&mut tls.grpc, &GRPC_TLS, origins, errors);
    listener::finish_tls(&mut tls.http, &HTTP_TLS, origins, errors);
    listener::finish_tls(&mut tls.admin, &ADMIN_TLS, origins, errors);
}

/// envoyproxy/ratelimit's TLS file `name`, read with `GRPC_SERVER_USE_TLS`
/// on (and then `required`).
fn envoy_tls(env: &Env<'_>, name: &str, required: bool) -> Result<Option<String>, String> {
    match env
        .get("GRPC_SERVER_USE_TLS")
        .map(|v| boolean(&v))
        .transpose()?
    {
        Some(true) if required && env.get(name).is_none() => {
            Err(format!("GRPC_SERVER_USE_TLS needs {name}"))
        }
        Some(true) => Ok(env.get(name)),
        _ => Ok(None),
    }
}

pub(super) const GRPC_TLS: TlsInstance = TlsInstance {
    key: "server.tls.grpc",
    env: "FLOODGATE_GRPC_TLS",
    flag: "grpc-tls",
    listener: "the gRPC listener",
    envoy: Some([
        Envoy::Read {
            names: "`GRPC_SERVER_TLS_CERT` (with `GRPC_SERVER_USE_TLS`)",
            read: |env| envoy_tls(env, "GRPC_SERVER_TLS_CERT", true),
        },
        Envoy::Read {
            names: "`GRPC_SERVER_TLS_KEY` (with `GRPC_SERVER_USE_TLS`)",
            read: |env| envoy_tls(env, "GRPC_SERVER_TLS_KEY", true),
        },
        Envoy::Read {
            names: "`GRPC_CLIENT_TLS_CACERT` (with `GRPC_SERVER_USE_TLS`)",
            read: |env| envoy_tls(env, "GRPC_CLIENT_TLS_CACERT", false),
        },
    ]),
};

pub(super) const HTTP_TLS: TlsInstance = TlsInstance {
    key: "server.tls.http",
    env: "FLOODGATE_HTTP_TLS",
    flag: "http-tls",
    listener: "the HTTP listener",
    envoy: None,
};

pub(super) const ADMIN_TLS: TlsInstance = TlsInstance {
    key: "server.tls.admin",
    env: "FLOODGATE_ADMIN_TLS",
    flag: "admin-tls",
    listener: "the admin listener",
    envoy: None,
};

fn header_name(v: &Value) -> Result<String, String> {
    let t = v.text();
    http::HeaderName::from_bytes(t.as_bytes())
        .map(|_| t.clone())
        .map_err(|_| format!("`{t}` is not a valid header name"))
}

/// envoyproxy/ratelimit's runtime directory:
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY` (the app
/// directory defaulting to `config`).
fn runtime_root(env: &Env<'_>) -> Result<Option<String>, String> {
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
    Ok(Some(path.display().to_string()))
}

/// envoyproxy/ratelimit's debug listener: `DEBUG_HOST` + `DEBUG_PORT`, or
/// `PROMETHEUS_ADDR` when `USE_PROMETHEUS` is on (a bare port on loopback).
fn debug_listener(env: &Env<'_>) -> Result<Option<String>, String> {
    // No host: on loopback, as a bare port is.
    if let Some(debug) = env.host_port("DEBUG_HOST", "DEBUG_PORT", "")? {
        return Ok(Some(debug));
    }
    let prometheus = env.get("USE_PROMETHEUS").map(|v| boolean(&v));
    Ok(env
        .get("PROMETHEUS_ADDR")
        .filter(|_| prometheus == Some(Ok(true))))
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: envoyproxy/ratelimit
/// increments every matched counter unless told to stop at the limit.
fn stop_increment(env: &Env<'_>) -> Result<Option<String>, String> {
    match env.get("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
        None => Ok(None),
        Some(v) => boolean(&v).map(|stop| Some((!stop).to_string())),
    }
}

// One setting in a few lines each: tables, laid out by hand, one per topic.
pub(super) fn declare(t: &mut Vec<S>) {
    config(t);
    listeners(t);
    requests(t);
    headers(t);
    process(t);
    policy(t);
    rls(t);
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

/// The listeners: their addresses, the names the admin listener answers
/// to, their TLS.
#[rustfmt::skip]
fn listeners(t: &mut Vec<S>) {
    // envoyproxy/ratelimit's ports: 8081 (gRPC), 8080 (HTTP), 6070 (debug,
    // here on loopback only).
    t.push(S::new("server.grpc", "FLOODGATE_GRPC_ADDR", "grpc-addr", Kind::Addr, "0.0.0.0:8081",
        "gRPC listener (`host:port`, `:port` or a port on all interfaces, or `off`)",
        |s, v| { s.server.grpc = parse_listen_on(&v.text(), ANY)?; Ok(()) })
        .envoy(Envoy::HostPort("GRPC_HOST", "GRPC_PORT")));
    t.push(S::new("server.http", "FLOODGATE_HTTP_ADDR", "http-addr", Kind::Addr, "0.0.0.0:8080",
        "HTTP listener (as `grpc`)",
        |s, v| { s.server.http = parse_listen_on(&v.text(), ANY)?; Ok(()) })
        .envoy(Envoy::HostPort("HOST", "PORT")));
    t.push(S::new("server.admin", "FLOODGATE_ADMIN_ADDR", "admin-addr", Kind::Addr, "127.0.0.1:6070",
        "admin listener: `/metrics`, `/healthcheck`, `/ready`, `/dashboard` (`:port` or a port: on loopback; `off`)",
        |s, v| { s.server.admin = parse_listen_on(&v.text(), LOOPBACK)?; Ok(()) })
        .envoy(Envoy::Read { names: "`DEBUG_HOST` + `DEBUG_PORT`; `USE_PROMETHEUS` + `PROMETHEUS_ADDR`", read: debug_listener }));
    listener::declare_tls::<_, GrpcTls>(t, &GRPC_TLS);
    listener::declare_tls::<_, HttpTls>(t, &HTTP_TLS);
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
}

/// What a request may be and take: its size, its descriptors, its
/// caller's overrides, the connections' protections, the calls in flight.
#[rustfmt::skip]
fn requests(t: &mut Vec<S>) {
    t.push(S::new("server.body_limit", "FLOODGATE_BODY_LIMIT", "body-limit", Kind::Size, "1MiB",
        "largest HTTP body or gRPC message",
        |s, v| { s.server.body_limit = size(&v.text())?; Ok(()) }));
    t.push(S::new("server.max_descriptors", "FLOODGATE_MAX_DESCRIPTORS", "max-descriptors", Kind::Count, "256",
        "most descriptors in a request",
        |s, v| { s.server.request_limits.max_descriptors = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
    t.push(S::new("server.max_value_bytes", "FLOODGATE_MAX_VALUE_BYTES", "max-value-bytes", Kind::Size, "16KiB",
        "longest descriptor key or value",
        |s, v| { s.server.request_limits.max_entry_bytes = size(&v.text())?; Ok(()) }));
    t.push(S::new("server.limit_overrides", "FLOODGATE_LIMIT_OVERRIDES", "limit-overrides", Kind::Choice, "allow",
        "a caller's per-request `limit` override: `allow` (replaces the configured limit, as Envoy's API and envoyproxy/ratelimit do: any caller can lift its limit), `ignore` or `refuse` (400 / `INVALID_ARGUMENT`)",
        |s, v| {
            s.server.request_limits.overrides = choice(&v.text(), &[
                (&["allow"], LimitOverrides::Allow),
                (&["ignore"], LimitOverrides::Ignore),
                (&["refuse"], LimitOverrides::Refuse),
            ])?;
            Ok(())
        })
        .samples("ignore", "refuse"));
    listener::declare_protections::<_, ServeProtections>(t, &PROTECTIONS);
    t.push(S::new("server.limits.max_requests", "FLOODGATE_MAX_REQUESTS", "max-requests", Kind::Count, "10000",
        "calls in flight over every connection, answers not yet sent included (beyond: `RESOURCE_EXHAUSTED`, 503, at once)",
        |s, v| { s.server.max_requests = count_in(&v.text(), 1, 10_000_000)?; Ok(()) }));
    t.push(S::new("server.limits.request_timeout", "FLOODGATE_REQUEST_TIMEOUT", "request-timeout", Kind::Duration, "10s",
        "longest a call may take, body included, when the caller sets no shorter `grpc-timeout` (`DEADLINE_EXCEEDED`, 504)",
        |s, v| { s.server.request_timeout = positive_duration(&v.text())?; Ok(()) }));
}

/// The rate limit headers of answers.
#[rustfmt::skip]
fn headers(t: &mut Vec<S>) {
    t.push(S::new("server.response_headers.enabled", "FLOODGATE_RESPONSE_HEADERS", "response-headers", Kind::Bool, "false",
        "add `RateLimit-Limit`, `-Remaining`, `-Reset` of the most restrictive descriptor",
        |s, v| { s.server.headers.enabled = boolean(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_RESPONSE_HEADERS_ENABLED")));
    t.push(S::new("server.response_headers.limit", "FLOODGATE_LIMIT_HEADER", "limit-header", Kind::Text, "RateLimit-Limit",
        "name of the limit header",
        |s, v| { s.server.headers.limit = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_LIMIT_HEADER"))
        .samples("X-Limit", "X-Quota"));
    t.push(S::new("server.response_headers.remaining", "FLOODGATE_REMAINING_HEADER", "remaining-header", Kind::Text, "RateLimit-Remaining",
        "name of the remaining header",
        |s, v| { s.server.headers.remaining = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_REMAINING_HEADER"))
        .samples("X-Left", "X-Rest"));
    t.push(S::new("server.response_headers.reset", "FLOODGATE_RESET_HEADER", "reset-header", Kind::Text, "RateLimit-Reset",
        "name of the reset header",
        |s, v| { s.server.headers.reset = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_RESET_HEADER"))
        .samples("X-Reset", "X-Again"));
    t.push(S::new("server.response_headers.x_ratelimit", "FLOODGATE_X_RATELIMIT_HEADERS", "x-ratelimit-headers", Kind::Bool, "false",
        "add Envoy's `DRAFT_VERSION_03` `X-RateLimit-*` headers",
        |s, v| { s.server.headers.x_ratelimit = boolean(&v.text())?; Ok(()) }));
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
        .envoy(Envoy::Var("LOG_LEVEL"))
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
        "forces envoyproxy/ratelimit's accounting: every matched counter counts every request",
        |s, v| { s.policy.envoy_increment_all = Some(boolean(&v.text())?); Ok(()) })
        .in_file(InFile::Policies)
        .envoy(Envoy::Read { names: "`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (inverted)", read: stop_increment }));
}

/// What RLS callers (`ShouldRateLimit`, `/json`) are told of a shaper's
/// delay, which they cannot wait out.
#[rustfmt::skip]
fn rls(t: &mut Vec<S>) {
    t.push(S::new("server.rls_delayed", "FLOODGATE_RLS_DELAYED", "rls-delayed", Kind::Choice, "over_limit",
        "what a shaper's delay becomes over RLS (`ShouldRateLimit`, `/json`): `over_limit` (refused, its reset the delay, nothing charged: sent again after it, the request passes) or `ok` (admitted at once and charged, as with `nodelay`; the delay in `dynamic_metadata` as `delay_ms`)",
        |s, v| {
            s.server.rls_delayed = choice(&v.text(), &[
                (&["over_limit"], RlsDelayed::OverLimit),
                (&["ok"], RlsDelayed::Ok),
            ])?;
            Ok(())
        })
        .samples("ok", "over_limit"));
}
