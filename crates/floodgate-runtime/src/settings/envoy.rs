//! envoyproxy/ratelimit's environment variables that Floodgate does not
//! implement: each one set is named in a warning at startup. With the
//! variables the settings read, they cover every variable of its
//! `src/settings/settings.go` (listed in `envoy_variables.txt`; checked
//! by floodgate-server's settings tests).

/// envoyproxy/ratelimit's variables that Floodgate does not implement,
/// in groups, each with what to do instead. Setting one changes nothing, so startup
/// warns about each that is set ([`warn_unsupported`]).
#[rustfmt::skip]
pub const UNSUPPORTED_ENVOY_VARIABLES: &[(&[&str], &str)] = &[
    (&["PROTO"], "the listeners are TCP"),
    (&[
        "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS",
    ], "metrics are Prometheus only (admin listener /metrics)"),
    (&["EXTRA_TAGS"], "metric labels are fixed"),
    (&["STATS_FLUSH_INTERVAL"], "metrics are scraped, not pushed"),
    (&["DISABLE_STATS"], "metrics are always kept; turn the admin listener off to hide them"),
    (&["PROMETHEUS_MAPPER_YAML"],
        "metric names are fixed: with USE_PROMETHEUS, the default mapper's too"),
    (&["PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"],
        "response times are histograms in seconds (ratelimit_service_response_time_seconds, floodgate_request_duration_seconds)"),
    (&["RUNTIME_IGNOREDOTFILES"],
        "the dot-entries of a configuration directory are always skipped, as with `true`"),
    (&["RUNTIME_WATCH_ROOT"],
        "the configuration directory is polled (FLOODGATE_RELOAD_INTERVAL), kubelet's ConfigMap swaps included, as with `false`"),
    (&["EXPIRATION_JITTER_MAX_SECONDS"], "counter expiry is exact, without jitter"),
    (&["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"],
        "the service starts only with a valid configuration"),
    (&["REDIS_SOCKET_TYPE"], "REDIS_URL decides: host:port for TCP, unix:///path for a socket"),
    (&["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"], "Redis TLS always verifies the host name"),
    (&["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"], "readiness follows the store's circuit breaker"),
    (&["REDIS_POOL_ON_EMPTY_BEHAVIOR"],
        "the connections are multiplexed (FLOODGATE_REDIS_CONNECTIONS): a call never waits for a free one"),
    (&["REDIS_CLUSTER_PIPELINE_PARALLELISM"],
        "a cluster's commands go out at once, on one multiplexed connection per node"),
    (&["REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"],
        "startup does not wait for Redis: calls follow FLOODGATE_FAILURE_POLICY until it answers"),
    (&[
        "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE",
        "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
        "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_TIMEOUT",
        "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    ], "one Redis serves every limit"),
    (&[
        "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
        "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY",
        "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    ], "the stores are memory and Redis"),
    (&["RESPONSE_DYNAMIC_METADATA"], "responses carry no dynamic metadata"),
    (&["QUOTA_MODE"], "set quota_mode: true on the rules that are quotas"),
];

/// Unsupported variables whose value asks for what Floodgate does anyway
/// (the Istio sample's): set so, they are not warned about.
const WHAT_FLOODGATE_DOES: &[(&str, bool)] = &[
    ("RUNTIME_IGNOREDOTFILES", true),
    ("RUNTIME_WATCH_ROOT", false),
    // Envoy Gateway's and most manifests': no StatsD, stats kept.
    ("USE_STATSD", false),
    ("USE_DOG_STATSD", false),
    ("DISABLE_STATS", false),
];

/// The unsupported envoyproxy/ratelimit variables that are set (to
/// anything but blanks, or what Floodgate does anyway), each with what to
/// do instead, in the order of [`UNSUPPORTED_ENVOY_VARIABLES`].
pub fn unsupported(env: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, &'static str)> {
    let variables = UNSUPPORTED_ENVOY_VARIABLES.iter();
    let each = variables.flat_map(|(names, instead)| names.iter().map(move |n| (*n, *instead)));
    each.filter(|(name, _)| env(name).is_some_and(|v| !v.trim().is_empty() && !as_done(name, &v)))
        .collect()
}

/// Whether `name` set to `value` asks for what Floodgate does anyway.
fn as_done(name: &str, value: &str) -> bool {
    let done = WHAT_FLOODGATE_DOES.iter().find(|(n, _)| *n == name);
    done.is_some_and(|(_, does)| super::boolean(value) == Ok(*does))
}

/// Logs one warning per unsupported envoyproxy/ratelimit variable that is
/// set (call once logging is set up); returns how many there were.
pub fn warn_unsupported(env: impl Fn(&str) -> Option<String>) -> usize {
    let found = unsupported(env);
    for (name, instead) in &found {
        tracing::warn!(
            variable = name,
            "{name} is an envoyproxy/ratelimit setting that Floodgate does not support; it is ignored ({instead})"
        );
    }
    found.len()
}
