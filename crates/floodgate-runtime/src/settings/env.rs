//! Settings from environment variables: Floodgate's own (`FLOODGATE_*`)
//! and envoyproxy/ratelimit's names, for teams migrating from it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use floodgate_redis::{FailurePolicy, Mode};

use super::{
    LogFormat, Overrides, SettingError, StoreKind, parse_listen, parse_setting_duration, parse_size,
};

/// The configuration path the environment names, if any:
/// `FLOODGATE_CONFIG`, else envoyproxy/ratelimit's
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY` (the app
/// directory defaulting to `config`).
pub fn config_path_from_env(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("FLOODGATE_CONFIG").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    let root = env("RUNTIME_ROOT").filter(|p| !p.is_empty())?;
    let mut path = PathBuf::from(root);
    if let Some(sub) = env("RUNTIME_SUBDIRECTORY").filter(|p| !p.is_empty()) {
        path.push(sub);
    }
    path.push(env("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
    Some(path)
}

/// Reads every supported variable from `env` (a lookup such as
/// `|k| std::env::var(k).ok()`).
pub fn overrides_from_env(env: impl Fn(&str) -> Option<String>) -> Result<Overrides, SettingError> {
    let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let mut o = Overrides {
        grpc: listen(&get, "FLOODGATE_GRPC_ADDR", "GRPC_HOST", "GRPC_PORT")?,
        http: listen(&get, "FLOODGATE_HTTP_ADDR", "HOST", "PORT")?,
        admin: listen(&get, "FLOODGATE_ADMIN_ADDR", "DEBUG_HOST", "DEBUG_PORT")?,
        ..Overrides::default()
    };
    if o.admin.is_none()
        && flag(&get, "USE_PROMETHEUS")? == Some(true)
        && let Some(a) = get("PROMETHEUS_ADDR")
    {
        o.admin = Some(parse_listen(&a).map_err(|m| SettingError::new("PROMETHEUS_ADDR", m))?);
    }
    if let Some(v) = get("FLOODGATE_BODY_LIMIT") {
        o.body_limit = Some(parse_size(&v).ok_or_else(|| {
            SettingError::new("FLOODGATE_BODY_LIMIT", "expected a size such as 1MiB")
        })?);
    }
    o.store = match get("FLOODGATE_STORE").or_else(|| get("BACKEND_TYPE")) {
        None => None,
        Some(v) => Some(match v.to_ascii_lowercase().as_str() {
            "memory" => StoreKind::Memory,
            "redis" => StoreKind::Redis,
            other => {
                return Err(SettingError::new(
                    "FLOODGATE_STORE",
                    format!("expected memory or redis, found `{other}`"),
                ));
            }
        }),
    };
    o.redis_url = get("REDIS_URL");
    o.redis_mode = match get("REDIS_TYPE") {
        None => None,
        Some(v) => Some(parse_mode(&v).map_err(|m| SettingError::new("REDIS_TYPE", m))?),
    };
    o.redis_auth = get("REDIS_AUTH");
    o.redis_sentinel_auth = get("REDIS_SENTINEL_AUTH");
    o.redis_tls = flag(&get, "REDIS_TLS")?;
    // envoyproxy/ratelimit reads 0 as "no explicit size" and "no explicit
    // timeout": both keep Floodgate's defaults.
    o.redis_connections = count(&get, "REDIS_POOL_SIZE")?.filter(|n| *n > 0);
    o.redis_timeout = duration(&get, "REDIS_TIMEOUT")?.filter(|d| !d.is_zero());
    // Implicit pipelining, as envoyproxy/ratelimit reads it: a window of 0
    // sends every command at once; a limit of 0 sets no limit.
    o.redis_pipeline_window = duration(&get, "REDIS_PIPELINE_WINDOW")?;
    o.redis_pipeline_limit = count(&get, "REDIS_PIPELINE_LIMIT")?;
    o.redis_prefix = get("CACHE_KEY_PREFIX");
    o.failure_policy = match get("FLOODGATE_FAILURE_POLICY") {
        None => None,
        Some(v) => Some(
            parse_failure_policy(&v)
                .map_err(|m| SettingError::new("FLOODGATE_FAILURE_POLICY", m))?,
        ),
    };
    o.headers_enabled = flag(&get, "LIMIT_RESPONSE_HEADERS_ENABLED")?;
    o.limit_header = get("LIMIT_LIMIT_HEADER");
    o.remaining_header = get("LIMIT_REMAINING_HEADER");
    o.reset_header = get("LIMIT_RESET_HEADER");
    o.x_ratelimit = flag(&get, "FLOODGATE_X_RATELIMIT_HEADERS")?;
    o.log_level = get("FLOODGATE_LOG").or_else(|| get("LOG_LEVEL"));
    o.log_format = match get("FLOODGATE_LOG_FORMAT").or_else(|| get("LOG_FORMAT")) {
        None => None,
        Some(v) => Some(parse_log_format(&v).map_err(|m| SettingError::new("LOG_FORMAT", m))?),
    };
    o.shadow_mode = flag(&get, "SHADOW_MODE")?;
    o.near_limit_ratio = match get("NEAR_LIMIT_RATIO") {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    SettingError::new("NEAR_LIMIT_RATIO", "expected a number from 0 to 1")
                })?,
        ),
    };
    // envoyproxy/ratelimit increments every matched counter unless told to
    // stop at the limit; Floodgate's default is to stop.
    o.envoy_increment_all =
        flag(&get, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")?.map(|stop| !stop);
    // Envoy sizes its over-limit cache in bytes; an entry is about 64. 0
    // (envoyproxy/ratelimit's default) turns the cache off.
    o.local_cache_entries =
        count(&get, "LOCAL_CACHE_SIZE_IN_BYTES")?.map(|bytes| bytes.div_ceil(64));
    o.reload_interval = duration(&get, "FLOODGATE_RELOAD_INTERVAL")?;
    o.shutdown_grace = duration(&get, "FLOODGATE_SHUTDOWN_GRACE")?;
    o.shutdown_delay = duration(&get, "FLOODGATE_SHUTDOWN_DELAY")?;
    Ok(o)
}

/// envoyproxy/ratelimit's variables that Floodgate does not implement,
/// each with what to do instead. Setting one changes nothing, so startup
/// warns about each that is set ([`warn_unsupported_env`]).
pub const UNSUPPORTED_ENVOY_VARIABLES: &[(&str, &str)] = &[
    ("PROTO", "the listeners are TCP"),
    ("GRPC_UDS", "the gRPC listener is TCP (FLOODGATE_GRPC_ADDR)"),
    ("GRPC_MAX_CONNECTION_AGE", "connections are not aged out"),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are not aged out",
    ),
    (
        "GRPC_SERVER_USE_TLS",
        "the gRPC listener speaks plaintext HTTP/2; terminate TLS in front of it",
    ),
    ("GRPC_SERVER_TLS_CERT", "the gRPC listener has no TLS"),
    ("GRPC_SERVER_TLS_KEY", "the gRPC listener has no TLS"),
    ("GRPC_CLIENT_TLS_CACERT", "the gRPC listener has no TLS"),
    ("GRPC_CLIENT_TLS_SAN", "the gRPC listener has no TLS"),
    ("CONFIG_TYPE", "the configuration comes from files only"),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "a configuration file is required",
    ),
    ("CONFIG_GRPC_XDS_NODE_ID", "no xDS configuration source"),
    (
        "CONFIG_GRPC_XDS_NODE_METADATA",
        "no xDS configuration source",
    ),
    ("CONFIG_GRPC_XDS_SERVER_URL", "no xDS configuration source"),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        "no xDS configuration source",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
        "no xDS configuration source",
    ),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "no xDS configuration source",
    ),
    (
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "no xDS configuration source",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "no xDS configuration source",
    ),
    ("XDS_CLIENT_BACKOFF_JITTER", "no xDS configuration source"),
    (
        "USE_STATSD",
        "metrics are Prometheus only (admin listener /metrics)",
    ),
    (
        "STATSD_HOST",
        "metrics are Prometheus only (admin listener /metrics)",
    ),
    (
        "STATSD_PORT",
        "metrics are Prometheus only (admin listener /metrics)",
    ),
    (
        "USE_DOG_STATSD",
        "metrics are Prometheus only (admin listener /metrics)",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "metrics are Prometheus only (admin listener /metrics)",
    ),
    ("EXTRA_TAGS", "metric labels are fixed"),
    ("STATS_FLUSH_INTERVAL", "metrics are scraped, not pushed"),
    (
        "DISABLE_STATS",
        "metrics are always kept; turn the admin listener off to hide them",
    ),
    ("PROMETHEUS_PATH", "metrics are served at /metrics"),
    ("PROMETHEUS_MAPPER_YAML", "metric names are fixed"),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files and directories are read as configured",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the configured files are polled (FLOODGATE_RELOAD_INTERVAL)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "counter expiry is exact, without jitter",
    ),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "the service starts only with a valid configuration",
    ),
    (
        "REDIS_SOCKET_TYPE",
        "REDIS_URL decides: host:port for TCP, unix:///path for a socket",
    ),
    (
        "REDIS_TLS_CLIENT_CERT",
        "client certificates for Redis are not supported",
    ),
    (
        "REDIS_TLS_CLIENT_KEY",
        "client certificates for Redis are not supported",
    ),
    (
        "REDIS_TLS_CACERT",
        "Redis TLS uses the system's trusted roots",
    ),
    (
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "Redis TLS always verifies the host name",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "readiness follows the store's circuit breaker",
    ),
    ("REDIS_PERSECOND", "one Redis serves every limit"),
    (
        "REDIS_PERSECOND_SOCKET_TYPE",
        "one Redis serves every limit",
    ),
    ("REDIS_PERSECOND_TYPE", "one Redis serves every limit"),
    ("REDIS_PERSECOND_URL", "one Redis serves every limit"),
    ("REDIS_PERSECOND_POOL_SIZE", "one Redis serves every limit"),
    ("REDIS_PERSECOND_AUTH", "one Redis serves every limit"),
    (
        "REDIS_PERSECOND_SENTINEL_AUTH",
        "one Redis serves every limit",
    ),
    ("REDIS_PERSECOND_TLS", "one Redis serves every limit"),
    ("REDIS_PERSECOND_TIMEOUT", "one Redis serves every limit"),
    (
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "one Redis serves every limit",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "one Redis serves every limit",
    ),
    ("MEMCACHE_HOST_PORT", "the stores are memory and Redis"),
    ("MEMCACHE_MAX_IDLE_CONNS", "the stores are memory and Redis"),
    ("MEMCACHE_SRV", "the stores are memory and Redis"),
    ("MEMCACHE_SRV_REFRESH", "the stores are memory and Redis"),
    ("MEMCACHE_TLS", "the stores are memory and Redis"),
    (
        "MEMCACHE_TLS_CLIENT_CERT",
        "the stores are memory and Redis",
    ),
    ("MEMCACHE_TLS_CLIENT_KEY", "the stores are memory and Redis"),
    ("MEMCACHE_TLS_CACERT", "the stores are memory and Redis"),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "the stores are memory and Redis",
    ),
    (
        "RESPONSE_DYNAMIC_METADATA",
        "responses carry no dynamic metadata",
    ),
    (
        "TRACING_ENABLED",
        "no OpenTelemetry tracing; logs are structured (LOG_FORMAT=json)",
    ),
    ("TRACING_SERVICE_NAME", "no OpenTelemetry tracing"),
    ("TRACING_SERVICE_NAMESPACE", "no OpenTelemetry tracing"),
    ("TRACING_SERVICE_INSTANCE_ID", "no OpenTelemetry tracing"),
    ("TRACING_EXPORTER_PROTOCOL", "no OpenTelemetry tracing"),
    ("TRACING_SAMPLING_RATE", "no OpenTelemetry tracing"),
];

/// The unsupported envoyproxy/ratelimit variables that are set (to
/// anything but blanks), each with what to do instead, in the order of
/// [`UNSUPPORTED_ENVOY_VARIABLES`].
pub fn unsupported_from_env(
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(&'static str, &'static str)> {
    UNSUPPORTED_ENVOY_VARIABLES
        .iter()
        .filter(|(name, _)| env(name).is_some_and(|v| !v.trim().is_empty()))
        .copied()
        .collect()
}

/// Logs one warning per unsupported envoyproxy/ratelimit variable that is
/// set (call once logging is set up); returns how many there were.
pub fn warn_unsupported_env(env: impl Fn(&str) -> Option<String>) -> usize {
    let found = unsupported_from_env(env);
    for (name, instead) in &found {
        tracing::warn!(
            variable = name,
            "{name} is an envoyproxy/ratelimit setting that Floodgate does not support; it is ignored ({instead})"
        );
    }
    found.len()
}

type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// An address from `full` (`host:port`), else from a host and a port
/// variable (the host defaulting to all interfaces).
fn listen(
    get: &Get<'_>,
    full: &str,
    host: &str,
    port: &str,
) -> Result<Option<Option<SocketAddr>>, SettingError> {
    if let Some(v) = get(full) {
        return parse_listen(&v)
            .map(Some)
            .map_err(|m| SettingError::new(full, m));
    }
    let Some(p) = get(port) else {
        return Ok(None);
    };
    let p: u16 = p
        .trim()
        .parse()
        .map_err(|_| SettingError::new(port, format!("expected a port number, found `{p}`")))?;
    let h = get(host).unwrap_or_else(|| "0.0.0.0".into());
    let text = if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]:{p}")
    } else {
        format!("{h}:{p}")
    };
    parse_listen(&text)
        .map(Some)
        .map_err(|m| SettingError::new(host, m))
}

/// A boolean the way envoyproxy/ratelimit reads them (Go's `strconv.ParseBool`).
fn flag(get: &Get<'_>, name: &str) -> Result<Option<bool>, SettingError> {
    match get(name) {
        None => Ok(None),
        Some(v) => parse_bool(&v)
            .map(Some)
            .ok_or_else(|| SettingError::new(name, format!("expected true or false, found `{v}`"))),
    }
}

/// `true`/`false` and the spellings Go accepts (`1`, `t`, `TRUE`, ...).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" | "on" => Some(true),
        "0" | "f" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// A whole number, 0 included (each caller says what 0 means).
fn count(get: &Get<'_>, name: &str) -> Result<Option<usize>, SettingError> {
    match get(name) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            SettingError::new(
                name,
                format!("expected a whole number (0 or more), found `{v}`"),
            )
        }),
    }
}

/// A duration as [`parse_setting_duration`] reads it (Go's syntax
/// included), `0` too.
fn duration(get: &Get<'_>, name: &str) -> Result<Option<Duration>, SettingError> {
    match get(name) {
        None => Ok(None),
        Some(v) => parse_setting_duration(&v).map(Some).ok_or_else(|| {
            SettingError::new(
                name,
                format!("expected a duration such as 0, 250ms, 1.5s or 1m30s, found `{v}`"),
            )
        }),
    }
}

/// `single`, `cluster` or `sentinel`. Sentinel's master name is not part
/// of the mode's spelling: it comes with the URL (envoyproxy/ratelimit's
/// `REDIS_URL=name,host:port,...`) or the file's `store.master`, so the
/// mode returned here has an empty one.
pub fn parse_mode(v: &str) -> Result<Mode, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "single" => Ok(Mode::Single),
        "cluster" => Ok(Mode::Cluster),
        "sentinel" => Ok(Mode::Sentinel {
            master_name: String::new(),
        }),
        other => Err(format!(
            "expected single, cluster or sentinel, found `{other}`"
        )),
    }
}

/// `fail_open`, `fail_closed`, `local` or `local/N` (N instances share the
/// limits).
pub fn parse_failure_policy(v: &str) -> Result<FailurePolicy, String> {
    let v = v.trim().to_ascii_lowercase().replace('-', "_");
    if let Some(n) = v.strip_prefix("local/") {
        return n
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(|divide_by| FailurePolicy::Local { divide_by })
            .ok_or_else(|| format!("expected local/N with N ≥ 1, found `{v}`"));
    }
    match v.as_str() {
        "fail_open" | "open" => Ok(FailurePolicy::FailOpen),
        "fail_closed" | "closed" => Ok(FailurePolicy::FailClosed),
        "local" => Ok(FailurePolicy::Local { divide_by: 1 }),
        other => Err(format!(
            "expected fail_open, fail_closed or local, found `{other}`"
        )),
    }
}

/// `text` or `json`.
pub fn parse_log_format(v: &str) -> Result<LogFormat, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "text" | "" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("expected text or json, found `{other}`")),
    }
}

#[cfg(test)]
mod tests;
