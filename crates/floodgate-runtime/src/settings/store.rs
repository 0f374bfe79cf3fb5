//! The declarations of the `store:` section, and the Redis configuration
//! assembled from them once every setting is read (addresses, mode and
//! credentials combine, wherever each came from).

use std::path::PathBuf;
use std::time::Duration;

use floodgate::store::WhenFull;
use floodgate_policy::SyncMode;
use floodgate_policy::error::Errors;
use floodgate_redis::{FailurePolicy, Mode, TimeSource, parse_redis_urls, parse_sentinel_url};

use super::parse::{
    boolean, choice, count, count_in, duration, parse_failure_policy, positive_duration,
};
use super::table::{Declared, Env, Envoy, EnvoyRead, Kind, Origin, Origins, Setting};
use super::{Settings, StoreSettings};

type S = Setting<Settings>;

/// Which store to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded in-memory store.
    #[default]
    Memory,
    /// Redis.
    Redis,
}

/// What makes the Redis addresses: kept as read until every setting is,
/// then assembled ([`finish`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RedisAddress {
    url: String,
    master: Option<String>,
    master_auth: Option<String>,
    auth: Option<String>,
    sentinel_auth: Option<String>,
    tls: bool,
    divide_by: u32,
}

/// `sync: <mode>` stands for `sync: {mode: <mode>}`.
pub(super) const SHORTHANDS: &[(&str, &str)] = &[("store.sync", "store.sync.mode")];

const SENTINEL: &[(&str, &str)] = &[
    ("store.backend", "redis"),
    ("store.mode", "sentinel"),
    ("store.url", "m,s1:26379"),
];
/// The context of every setting of the Redis store that declares none.
const REDIS: &[(&str, &str)] = &[("store.backend", "redis")];
const SYNC: &[(&str, &str)] = &[("store.backend", "redis"), ("store.sync.mode", "sync")];
const LEASE: &[(&str, &str)] = &[("store.backend", "redis"), ("store.sync.mode", "lease")];

/// envoyproxy/ratelimit sizes its over-limit cache in bytes; an entry is
/// about 64. 0 (its default) turns the cache off.
fn cache_bytes(env: &Env<'_>) -> EnvoyRead {
    const VAR: &str = "LOCAL_CACHE_SIZE_IN_BYTES";
    match env.get(VAR) {
        None => Ok(None),
        Some(v) => count(&v)
            .map(|bytes| Some((VAR, bytes.div_ceil(64).to_string())))
            .map_err(|m| (VAR, m)),
    }
}

// One setting in a few lines each: tables, laid out by hand, one per topic.
pub(super) fn declare(t: &mut Vec<S>) {
    memory(t);
    redis_address(t);
    redis_connections(t);
    redis_failures(t);
    sync(t);
    let redis = |s: &&mut S| s.key.starts_with("store.") && !MEMORY.contains(&s.key);
    for s in t.iter_mut().filter(redis).filter(|s| s.context.is_empty()) {
        s.context = REDIS;
    }
}

/// Which store, and the in-memory store's.
#[rustfmt::skip]
fn memory(t: &mut Vec<S>) {
    t.push(S::new("store.backend", "FLOODGATE_STORE", "store", Kind::Choice, "memory",
        "`memory` (this process) or `redis` (shared by every instance; implied by a Redis URL given more strongly)",
        |s, v| {
            let backend = v.text().to_ascii_lowercase();
            s.store.backend = choice(&backend, &[(&["memory"], StoreKind::Memory), (&["redis"], StoreKind::Redis)])?;
            Ok(())
        })
        .envoy(Envoy::Var("BACKEND_TYPE"))
        .samples("redis", "memory"));
    t.push(S::new("store.capacity", "FLOODGATE_MEMORY_CAPACITY", "memory-capacity", Kind::Count, "1000000",
        "memory: most keys kept (beyond, `store.when_full` decides new keys)",
        |s, v| { s.store.capacity = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
    t.push(S::new("store.when_full", "FLOODGATE_MEMORY_WHEN_FULL", "memory-when-full", Kind::Choice, "admit",
        "memory: a new key when every key held is still restricted: `admit` (decided as a fresh key, no state kept), `deny`, or `evict` (the least recently used, restrictions included)",
        |s, v| {
            let rule = v.text().to_ascii_lowercase();
            let rules = [(&["admit"][..], WhenFull::Admit), (&["deny"], WhenFull::Deny), (&["evict"], WhenFull::Evict)];
            s.store.when_full = choice(&rule, &rules)?;
            Ok(())
        })
        .samples("deny", "evict"));
}

/// Where Redis is and how it is reached: mode, addresses, credentials, TLS.
#[rustfmt::skip]
fn redis_address(t: &mut Vec<S>) {
    t.push(S::new("store.mode", "FLOODGATE_REDIS_MODE", "redis-mode", Kind::Choice, "single",
        "redis: `single`, `cluster` or `sentinel`",
        |s, v| {
            // Sentinel's master name comes with the URL
            // (envoyproxy/ratelimit's `REDIS_URL=name,host:port,...`) or
            // `store.master`.
            let sentinel = Mode::Sentinel { master_name: String::new() };
            let mode = v.text().trim().to_ascii_lowercase();
            let modes = [(&["single"][..], Mode::Single), (&["cluster"], Mode::Cluster), (&["sentinel"], sentinel)];
            s.store.redis.mode = choice(&mode, &modes)?;
            Ok(())
        })
        .envoy(Envoy::Var("REDIS_TYPE"))
        .samples("cluster", "single"));
    t.push(S::new("store.url", "FLOODGATE_REDIS_URL", "redis-url", Kind::List, "127.0.0.1:6379",
        "redis: `host:port`, `redis://`, `rediss://` or `unix://` URLs (a list or commas: a cluster's nodes; with Sentinel, the sentinels, or `master,host:port,...`)",
        |s, v| { s.store.address.url = v.text(); Ok(()) })
        .envoy(Envoy::Var("REDIS_URL"))
        .samples("a:1", "b:2,c:3"));
    t.push(S::new("store.master", "FLOODGATE_REDIS_MASTER", "redis-master", Kind::Text, "",
        "redis, `mode: sentinel`: the name the sentinels monitor the primary under",
        |s, v| { s.store.address.master = Some(v.text()); Ok(()) })
        .samples("primary", "main")
        .context(SENTINEL));
    t.push(S::new("store.master_auth", "FLOODGATE_REDIS_MASTER_AUTH", "", Kind::Text, "",
        "redis, `mode: sentinel`: the primary's credentials (`password` or `user:password`)",
        |s, v| { s.store.address.master_auth = Some(v.text()); Ok(()) })
        .context(SENTINEL));
    t.push(S::new("store.auth", "FLOODGATE_REDIS_AUTH", "", Kind::Text, "",
        "redis: credentials added to URLs without any (`password` or `user:password`); with Sentinel, the primary's",
        |s, v| { s.store.address.auth = Some(v.text()); Ok(()) })
        .envoy(Envoy::Var("REDIS_AUTH")));
    t.push(S::new("store.sentinel_auth", "FLOODGATE_REDIS_SENTINEL_AUTH", "", Kind::Text, "",
        "redis, `mode: sentinel`: the sentinels' credentials, added to their URLs without any",
        |s, v| { s.store.address.sentinel_auth = Some(v.text()); Ok(()) })
        .envoy(Envoy::Var("REDIS_SENTINEL_AUTH"))
        .context(SENTINEL));
    t.push(S::new("store.tls", "FLOODGATE_REDIS_TLS", "redis-tls", Kind::Bool, "false",
        "redis: TLS (`redis://` URLs become `rediss://`)",
        |s, v| { s.store.address.tls = boolean(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("REDIS_TLS")));
    t.push(S::new("store.tls_ca", "FLOODGATE_REDIS_TLS_CA", "redis-tls-ca", Kind::Text, "",
        "redis, TLS: PEM file of the certificate authority (default: the system's roots)",
        |s, v| { s.store.redis.tls.ca_file = Some(PathBuf::from(v.text())); Ok(()) })
        .envoy(Envoy::Var("REDIS_TLS_CACERT")));
    t.push(S::new("store.tls_cert", "FLOODGATE_REDIS_TLS_CERT", "redis-tls-cert", Kind::Text, "",
        "redis, TLS: PEM client certificate, for servers that require one",
        |s, v| { s.store.redis.tls.client_cert_file = Some(PathBuf::from(v.text())); Ok(()) })
        .envoy(Envoy::Var("REDIS_TLS_CLIENT_CERT")));
    t.push(S::new("store.tls_key", "FLOODGATE_REDIS_TLS_KEY", "redis-tls-key", Kind::Text, "",
        "redis, TLS: the client certificate's PEM key",
        |s, v| { s.store.redis.tls.client_key_file = Some(PathBuf::from(v.text())); Ok(()) })
        .envoy(Envoy::Var("REDIS_TLS_CLIENT_KEY")));
}

/// The Redis connections: the key prefix, the pool, timeouts, pipelining.
#[rustfmt::skip]
fn redis_connections(t: &mut Vec<S>) {
    t.push(S::new("store.prefix", "FLOODGATE_REDIS_PREFIX", "redis-prefix", Kind::Text, "fg:",
        "redis: prefix of every key",
        |s, v| {
            let p = v.text();
            if p.contains(['{', '}']) {
                return Err("the key prefix must not contain `{` or `}`".into());
            }
            s.store.redis.key_prefix = p;
            Ok(())
        })
        .envoy(Envoy::Var("CACHE_KEY_PREFIX")));
    t.push(S::new("store.connections", "FLOODGATE_REDIS_CONNECTIONS", "redis-connections", Kind::Count, "2",
        "redis: multiplexed connections per server",
        |s, v| { s.store.redis.connections = count_in(&v.text(), 1, 1024)?; Ok(()) })
        .envoy(Envoy::NonZero("REDIS_POOL_SIZE")));
    t.push(S::new("store.timeout", "FLOODGATE_REDIS_TIMEOUT", "redis-timeout", Kind::Duration, "50ms",
        "redis: longest time for a decision, round trips included",
        |s, v| { s.store.redis.timeout = positive_duration(&v.text())?; Ok(()) })
        .envoy(Envoy::NonZero("REDIS_TIMEOUT")));
    t.push(S::new("store.connect_timeout", "FLOODGATE_REDIS_CONNECT_TIMEOUT", "redis-connect-timeout", Kind::Duration, "250ms",
        "redis: longest time to connect",
        |s, v| { s.store.redis.connect_timeout = positive_duration(&v.text())?; Ok(()) }));
    t.push(S::new("store.pipeline_window", "FLOODGATE_REDIS_PIPELINE_WINDOW", "redis-pipeline-window", Kind::Duration, "0",
        "redis: hold commands up to this long to write them together (`0`: off; shorter than `timeout`)",
        |s, v| { s.store.redis.pipeline_window = duration(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("REDIS_PIPELINE_WINDOW"))
        .samples("150us", "300us"));
    t.push(S::new("store.pipeline_limit", "FLOODGATE_REDIS_PIPELINE_LIMIT", "redis-pipeline-limit", Kind::Count, "0",
        "redis: ... or until this many commands wait (`0`: no limit)",
        |s, v| { s.store.redis.pipeline_limit = count(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("REDIS_PIPELINE_LIMIT")));
}

/// What happens when Redis fails, the local caches and the clock.
#[rustfmt::skip]
fn redis_failures(t: &mut Vec<S>) {
    t.push(S::new("store.failure_policy", "FLOODGATE_FAILURE_POLICY", "failure-policy", Kind::Choice, "local",
        "redis: when Redis cannot decide, `fail_open`, `fail_closed`, or `local` (an in-process store decides; `local/N` sets `divide_by`)",
        |s, v| { s.store.redis.failure_policy = parse_failure_policy(&v.text())?; Ok(()) })
        .samples("fail_open", "fail_closed"));
    t.push(S::new("store.divide_by", "FLOODGATE_DIVIDE_BY", "divide-by", Kind::Count, "1",
        "redis, `failure_policy: local`: each limit divided by this many instances",
        |s, v| {
            s.store.address.divide_by = count_in(&v.text(), 1, u32::MAX as usize)? as u32;
            Ok(())
        }));
    t.push(S::new("store.local_cache", "FLOODGATE_REDIS_LOCAL_CACHE", "redis-local-cache", Kind::Count, "0",
        "redis: entries of the local over-limit cache (`0`: off)",
        |s, v| { s.store.redis.local_cache_capacity = count(&v.text())?; Ok(()) })
        .envoy(Envoy::Read { names: "`LOCAL_CACHE_SIZE_IN_BYTES` (÷ 64 bytes an entry)", read: cache_bytes }));
    t.push(S::new("store.fallback_capacity", "FLOODGATE_REDIS_FALLBACK_CAPACITY", "redis-fallback-capacity", Kind::Count, "100000",
        "redis: keys of the local fallback store",
        |s, v| { s.store.redis.fallback_capacity = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
    t.push(S::new("store.breaker.failures", "FLOODGATE_REDIS_BREAKER_FAILURES", "redis-breaker-failures", Kind::Count, "5",
        "redis: consecutive failures that open the circuit breaker",
        |s, v| { s.store.redis.breaker.failure_threshold = count_in(&v.text(), 1, u32::MAX as usize)? as u32; Ok(()) }));
    t.push(S::new("store.breaker.cool_down", "FLOODGATE_REDIS_BREAKER_COOL_DOWN", "redis-breaker-cool-down", Kind::Duration, "1s",
        "redis: how long an open breaker keeps requests from Redis before a probe",
        |s, v| { s.store.redis.breaker.cool_down = positive_duration(&v.text())?; Ok(()) }));
    t.push(S::new("store.clock", "FLOODGATE_REDIS_CLOCK", "redis-clock", Kind::Choice, "server",
        "redis: whose clock times the windows, `server` (Redis `TIME`) or `client`",
        |s, v| {
            let client = TimeSource::Client { expiry_slack: Duration::from_secs(1) };
            s.store.redis.time_source = choice(&v.text(), &[(&["server"], TimeSource::Server), (&["client"], client)])?;
            Ok(())
        })
        .samples("client", "server"));
    t.push(S::new("store.concurrency_lease", "FLOODGATE_CONCURRENCY_LEASE", "concurrency-lease", Kind::Duration, "10m",
        "redis: lease of a concurrency permit not released (`0`: until released)",
        |s, v| { let d = duration(&v.text())?; s.store.redis.concurrency_lease = (!d.is_zero()).then_some(d); Ok(()) }));
}

/// How instances share counters (`store.sync`).
#[rustfmt::skip]
fn sync(t: &mut Vec<S>) {
    t.push(S::new("store.sync.mode", "FLOODGATE_SYNC", "sync", Kind::Choice, "exact",
        "redis: how rules without their own `sync` share counters: `exact` (a round trip per decision), `lease` (in memory within leases: never past the limit) or `sync` (in memory on views pushed every interval: past the limit by a computed bound); `sync: lease` is short for `sync: {mode: lease}`",
        |s, v| {
            s.store.redis.sync = SyncMode::read(&v.text().trim().to_ascii_lowercase())?;
            Ok(())
        })
        .samples("lease", "sync"));
    t.push(S::new("store.sync.interval", "FLOODGATE_SYNC_INTERVAL", "sync-interval", Kind::Duration, "100ms",
        "redis, `sync: sync`: how often each instance pushes its hits and pulls the counts (1ms to 1h)",
        // After the mode (the table's order): a period belongs to its mode.
        |s, v| {
            let period = SyncMode::read_period(&v.text())?;
            if let SyncMode::Sync { interval } = &mut s.store.redis.sync { *interval = period }
            Ok(())
        })
        .context(SYNC));
    t.push(S::new("store.sync.duration", "FLOODGATE_LEASE_DURATION", "lease-duration", Kind::Duration, "1s",
        "redis, `sync: lease`: how long a lease may be used before its unused units go back (1ms to 1h)",
        |s, v| {
            let period = SyncMode::read_period(&v.text())?;
            if let SyncMode::Lease { duration } = &mut s.store.redis.sync { *duration = period }
            Ok(())
        })
        .context(LEASE));
    t.push(S::new("store.sync.instances", "FLOODGATE_INSTANCES", "instances", Kind::Count, "0",
        "redis: how many instances share the counters, for the over-admission bound of `sync` that `floodgate config check` prints (`0`: not said)",
        |s, v| { s.store.instances = count_in(&v.text(), 0, u32::MAX as usize)? as u32; Ok(()) }));
}

/// The settings of the store that are not the Redis store's.
const MEMORY: &[&str] = &["store.backend", "store.capacity", "store.when_full"];

/// Completes the store once every setting is read: a Redis URL given more
/// strongly than the backend chooses Redis; the addresses, mode and
/// credentials make the Redis configuration; a setting of the other store
/// in the file is an error.
pub(super) fn finish(store: &mut StoreSettings, origins: &Origins, errors: &mut Errors) {
    let address = std::mem::take(&mut store.address);
    if origins.of("store.url").rank() > origins.of("store.backend").rank() {
        store.backend = StoreKind::Redis;
    }
    match store.backend {
        StoreKind::Memory => {
            let keys = Settings::table().iter().map(|s| s.key);
            let redis_only = keys.filter(|k| k.starts_with("store.") && !MEMORY.contains(k));
            let why = "only applies to backend: redis";
            not_applicable(redis_only, false, why, origins, errors);
        }
        StoreKind::Redis => {
            let why = "only applies to backend: memory";
            not_applicable(
                ["store.capacity", "store.when_full"],
                false,
                why,
                origins,
                errors,
            );
            assemble(store, &address, origins, errors);
        }
    }
}

/// An error at each of `keys` given in the file (`anywhere`: given at
/// all): `<name> <why>`.
fn not_applicable<'k>(
    keys: impl IntoIterator<Item = &'k str>,
    anywhere: bool,
    why: &str,
    origins: &Origins,
    errors: &mut Errors,
) {
    for key in keys {
        let o = origins.of(key);
        if matches!(o, Origin::File(_)) || (anywhere && o != Origin::Default) {
            let name = key.trim_start_matches("store.");
            errors.push(o.error(format!("{name} {why}")));
        }
    }
}

/// The Redis configuration from the addresses, mode and credentials.
fn assemble(store: &mut StoreSettings, a: &RedisAddress, origins: &Origins, errors: &mut Errors) {
    let r = &mut store.redis;
    // The credentials added to the URLs without any.
    let url_auth = if let Mode::Sentinel { .. } = r.mode {
        sentinels(r, a, origins, errors)
    } else {
        let sentinel_only = ["store.master", "store.master_auth", "store.sentinel_auth"];
        let why = "only applies to mode: sentinel";
        not_applicable(sentinel_only, true, why, origins, errors);
        let urls = parse_redis_urls(&a.url).map_err(|e| url_error(origins, e));
        if let Some(urls) = errors.take(urls) {
            r.urls = urls;
        }
        &a.auth
    };
    for u in &mut r.urls {
        if let Some(auth) = url_auth {
            *u = with_auth(u, auth);
        }
        if let Some(rest) = u.strip_prefix("redis://").filter(|_| a.tls) {
            *u = format!("rediss://{rest}");
        }
    }
    failure_policy(r, a, origins, errors);
    modes_and_pipelining(r, origins, errors);
}

/// An error about `store.url`.
fn url_error(
    origins: &Origins,
    e: floodgate_redis::ConfigError,
) -> floodgate_policy::error::ConfigError {
    origins.of("store.url").error(e.to_string())
}

/// Sentinel mode: the master's name and the sentinels' addresses, and the
/// primary's credentials; the sentinels' credentials, for their URLs.
fn sentinels<'a>(
    r: &mut floodgate_redis::RedisConfig,
    a: &'a RedisAddress,
    origins: &Origins,
    errors: &mut Errors,
) -> &'a Option<String> {
    let url_error = |e| url_error(origins, e);
    let (name, urls) = match &a.master {
        Some(master) => {
            let master =
                Mode::sentinel(master).map_err(|e| origins.of("store.master").error(e.to_string()));
            // The sentinels, possibly written the envoyproxy/ratelimit
            // way (`name,host:port,...`, the name then replaced).
            let urls = if a.url.split(',').next().unwrap_or("").contains([':', '/']) {
                parse_redis_urls(&a.url)
            } else {
                parse_sentinel_url(&a.url).map(|(_, urls)| urls)
            };
            (errors.take(master), errors.take(urls.map_err(url_error)))
        }
        None if origins.given("store.url") => match parse_sentinel_url(&a.url) {
            Ok((name, urls)) => (Some(Mode::Sentinel { master_name: name }), Some(urls)),
            Err(e) => {
                errors.push(url_error(e));
                (None, None)
            }
        },
        None => {
            errors.push(origins.of("store.mode").error(
                "mode: sentinel needs `master` (the name the sentinels monitor) and `url` (the sentinels)",
            ));
            (None, None)
        }
    };
    if let (Some(mode), Some(urls)) = (name, urls) {
        r.mode = mode;
        r.urls = urls;
    }
    // The primary's credentials: the more strongly given of
    // `master_auth` and `auth`.
    let auth_first = origins.of("store.auth").rank() > origins.of("store.master_auth").rank();
    let (first, second) = if auth_first {
        (&a.auth, &a.master_auth)
    } else {
        (&a.master_auth, &a.auth)
    };
    r.primary_auth = first.clone().or(second.clone()).or(r.primary_auth.take());
    &a.sentinel_auth
}

/// `store.divide_by` belongs to `failure_policy: local`.
fn failure_policy(
    r: &mut floodgate_redis::RedisConfig,
    a: &RedisAddress,
    origins: &Origins,
    errors: &mut Errors,
) {
    match r.failure_policy {
        FailurePolicy::Local { .. } if origins.given("store.divide_by") => {
            r.failure_policy = FailurePolicy::Local {
                divide_by: a.divide_by,
            }
        }
        FailurePolicy::Local { .. } => {}
        _ => {
            let why = "only applies to failure_policy: local";
            not_applicable(["store.divide_by"], true, why, origins, errors);
        }
    }
}

/// A sync mode's period given to another mode, and a pipelining window
/// no shorter than the timeout, are errors.
fn modes_and_pipelining(r: &floodgate_redis::RedisConfig, origins: &Origins, errors: &mut Errors) {
    // A period given in the file belongs to its mode (`interval` to `sync`,
    // `duration` to `lease`).
    let why = format!("does not apply to sync mode {}", r.sync.name());
    let misplaced = match r.sync {
        SyncMode::Exact => &["store.sync.interval", "store.sync.duration"][..],
        SyncMode::Lease { .. } => &["store.sync.interval"],
        SyncMode::Sync { .. } => &["store.sync.duration"],
    };
    not_applicable(misplaced.iter().copied(), false, &why, origins, errors);
    if !r.pipeline_window.is_zero() && r.pipeline_window >= r.timeout {
        errors.push(origins.of("store.pipeline_window").error(format!(
            "pipeline_window must be shorter than the timeout ({:?})",
            r.timeout
        )));
    }
}

/// Adds `auth` (`password` or `user:password`) to a Redis URL that has no
/// credentials.
fn with_auth(url: &str, auth: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    if scheme.starts_with("unix") || scheme.ends_with("+unix") {
        return url.to_owned();
    }
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        return url.to_owned();
    }
    let userinfo = if auth.contains(':') {
        auth.to_owned()
    } else {
        format!(":{auth}")
    };
    format!("{scheme}://{userinfo}@{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_is_added_once() {
        assert_eq!(with_auth("redis://h:1/0", "u:p"), "redis://u:p@h:1/0");
        assert_eq!(with_auth("redis://x@h:1", "p"), "redis://x@h:1");
        assert_eq!(with_auth("unix:///tmp/s", "p"), "unix:///tmp/s");
    }
}
