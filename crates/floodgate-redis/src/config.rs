//! Settings of the Redis backend and of the resilience around it.

use std::path::PathBuf;
use std::time::Duration;

use floodgate_policy::SyncMode;

use crate::ConfigError;

/// How the servers are deployed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// One server (or a stable address in front of one, such as a failover
    /// proxy): every batch is one script call.
    #[default]
    Single,
    /// Redis Cluster: keys are spread over hash slots by their group.
    Cluster,
    /// A primary managed by Redis Sentinel: `urls` are the sentinels'
    /// addresses. The backend asks them for the primary, decides there as
    /// on a single server, and follows failovers by itself (see
    /// `docs/redis.md`).
    Sentinel {
        /// The name the sentinels monitor the primary under (`sentinel
        /// monitor <name> …`).
        master_name: String,
    },
}

impl Mode {
    /// [`Mode::Sentinel`] for `master_name`, checked: not empty, no
    /// whitespace, control characters or commas.
    ///
    /// ```
    /// use floodgate_redis::Mode;
    /// assert!(Mode::sentinel("mymaster").is_ok());
    /// assert!(Mode::sentinel("my master").is_err());
    /// ```
    pub fn sentinel(master_name: &str) -> Result<Mode, ConfigError> {
        check_master_name(master_name)?;
        Ok(Mode::Sentinel {
            master_name: master_name.to_owned(),
        })
    }
}

/// Where the time of a decision comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The Redis server's clock (`TIME` inside the script). App servers'
    /// clocks need not agree; the `now` passed to `decide` is ignored. Keys
    /// expire at the absolute instant their state becomes idle.
    #[default]
    Server,
    /// The caller's `now` (microsecond precision; nanoseconds are dropped).
    /// Deterministic, for tests and for deployments with one trusted clock.
    /// Because Redis expires keys by its own clock, a key's expiry is set
    /// relative to the decision (`idle_at − now`) plus `expiry_slack`, which
    /// must cover how far the callers' time can run ahead of Redis's.
    Client {
        /// Extra time to keep keys beyond their idle instant.
        expiry_slack: Duration,
    },
}

/// What a decision does when Redis cannot be asked (error, timeout, or the
/// circuit breaker is open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit the request (counted in `fail_open`).
    FailOpen,
    /// Deny the request (counted in `fail_closed`).
    FailClosed,
    /// Decide with an in-process store holding the same limits, each count
    /// divided by `divide_by` (the expected number of instances sharing the
    /// load; 1 keeps the limits as they are).
    Local {
        /// Divisor of every count, burst and capacity (at least 1).
        divide_by: u32,
    },
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy::Local { divide_by: 1 }
    }
}

/// The circuit breaker in front of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (default 5).
    pub failure_threshold: u32,
    /// How long an open breaker keeps requests away from Redis before it
    /// lets one probe through (default 1 s).
    pub cool_down: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 5,
            cool_down: Duration::from_secs(1),
        }
    }
}

/// TLS settings for `rediss://` URLs (the `tls` feature, on by default).
/// Without a CA file the system's trust store is used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of the CA that signed the servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that require one (mutual TLS).
    pub client_cert_file: Option<PathBuf>,
    /// PEM key of the client certificate.
    pub client_key_file: Option<PathBuf>,
}

/// The default [`RedisConfig::concurrency_lease`]: 10 minutes, far longer
/// than requests usually hold a permit, short enough that permits leaked by
/// a crashed instance come back within minutes.
pub const DEFAULT_CONCURRENCY_LEASE: Duration = Duration::from_secs(600);

/// Everything the Redis backend needs. `Default` is a single local server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// Server addresses (see [`parse_redis_urls`]); for a cluster, any
    /// subset of its nodes; with Sentinel, the sentinels. Default
    /// `redis://127.0.0.1:6379`.
    pub urls: Vec<String>,
    /// Single server, Sentinel-managed primary or cluster.
    pub mode: Mode,
    /// Prepended to every key (default `"fg:"`); must not contain `{`/`}`.
    pub key_prefix: String,
    /// Multiplexed connections per server (default 2). Each carries any
    /// number of concurrent, pipelined requests.
    pub connections: usize,
    /// The most a decision may take, round trips included (default 50 ms);
    /// past it the decision fails with `BackendError::Timeout`.
    pub timeout: Duration,
    /// The most a (re)connection attempt may take (default 250 ms).
    pub connect_timeout: Duration,
    /// Single server only: how long a connection holds a command for
    /// others to join it in one pipeline (Envoy's
    /// `REDIS_PIPELINE_WINDOW`). Zero, the default, sends every command at
    /// once. A window trades up to its length of latency per decision for
    /// less CPU on Redis (and on the client) at moderate load, where
    /// commands would otherwise go one per write; see `docs/redis.md`.
    /// Must be shorter than [`timeout`](Self::timeout).
    pub pipeline_window: Duration,
    /// With a [`pipeline_window`](Self::pipeline_window): a pipeline is
    /// sent as soon as it holds this many commands (Envoy's
    /// `REDIS_PIPELINE_LIMIT`; 0, the default, sets no limit).
    pub pipeline_limit: usize,
    /// The clock decisions use.
    pub time_source: TimeSource,
    /// What to do when Redis cannot decide (used by
    /// [`ResilientBackend`](crate::ResilientBackend)).
    pub failure_policy: FailurePolicy,
    /// The circuit breaker's settings.
    pub breaker: BreakerConfig,
    /// Entries of the local over-limit cache (0 disables it, the default).
    pub local_cache_capacity: usize,
    /// Capacity in keys of the in-process store used by
    /// [`FailurePolicy::Local`] (default 100 000).
    pub fallback_capacity: usize,
    /// How long a concurrency permit lives unless released (default
    /// [`DEFAULT_CONCURRENCY_LEASE`], 10 minutes): each permit (one per
    /// request, [`Item::permit`](floodgate_policy::Item::permit)) has a
    /// lease of its own, from its acquisition (Redis's clock, or the
    /// caller's with [`TimeSource::Client`]), so a permit whose holder dies
    /// without releasing it (or whose release is lost in an outage) is
    /// freed exactly a lease after it was taken, whatever other traffic the
    /// key sees. The trade-off: a request holding a permit longer than the
    /// lease loses it (its units count no more, and its late release finds
    /// nothing). The key expires when the last lease on it ends. Capped at
    /// 2⁴⁰ ms (about 35 years). `None`: permits are held until released,
    /// whatever happens to their holders.
    pub concurrency_lease: Option<Duration>,
    /// How rules without a `sync` of their own share their counters
    /// between instances (default [`SyncMode::Exact`]: every decision in
    /// Redis). `lease` and `sync` apply to the limits they can decide (see
    /// [`supports_mode`](crate::supports_mode)); the others stay exact.
    /// See `docs/redis.md`, "Synchronisation modes".
    pub sync: SyncMode,
    /// Certificates for `rediss://` URLs.
    pub tls: TlsFiles,
    /// [`Mode::Sentinel`] only: credentials of the primary (`password` or
    /// `user:password`); the sentinels' own go in their URLs. The primary
    /// is reached over TLS when the sentinels are (`rediss://`).
    pub primary_auth: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            urls: vec!["redis://127.0.0.1:6379".to_owned()],
            mode: Mode::Single,
            key_prefix: "fg:".to_owned(),
            connections: 2,
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(250),
            pipeline_window: Duration::ZERO,
            pipeline_limit: 0,
            time_source: TimeSource::Server,
            failure_policy: FailurePolicy::default(),
            breaker: BreakerConfig::default(),
            local_cache_capacity: 0,
            fallback_capacity: 100_000,
            concurrency_lease: Some(DEFAULT_CONCURRENCY_LEASE),
            sync: SyncMode::Exact,
            tls: TlsFiles::default(),
            primary_auth: None,
        }
    }
}

impl RedisConfig {
    /// A configuration for `urls` (parsed with [`parse_redis_urls`]) in
    /// `mode`, everything else default.
    pub fn new(urls: &str, mode: Mode) -> Result<Self, ConfigError> {
        Ok(RedisConfig {
            urls: parse_redis_urls(urls)?,
            mode,
            ..RedisConfig::default()
        })
    }

    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if self.urls.is_empty() {
            return Err(ConfigError::NoUrl);
        }
        if let Mode::Sentinel { master_name } = &self.mode {
            check_master_name(master_name)?;
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::Prefix(self.key_prefix.clone()));
        }
        if self.connections == 0 {
            return Err(ConfigError::Zero("connections"));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::Zero("timeout"));
        }
        if !self.pipeline_window.is_zero() && self.pipeline_window >= self.timeout {
            return Err(ConfigError::PipelineWindow {
                window: self.pipeline_window,
                timeout: self.timeout,
            });
        }
        if self.breaker.failure_threshold == 0 {
            return Err(ConfigError::Zero("breaker.failure_threshold"));
        }
        if let FailurePolicy::Local { divide_by: 0 } = self.failure_policy {
            return Err(ConfigError::Zero("failure_policy.divide_by"));
        }
        if self.tls.client_cert_file.is_some() != self.tls.client_key_file.is_some() {
            return Err(ConfigError::Tls(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
        Ok(())
    }
}

/// A master name the sentinels can be asked about: not empty, no
/// whitespace or control characters, no commas (the Envoy format's
/// separator).
fn check_master_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::NoMasterName);
    }
    let bad = name.len() > 256
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',');
    if bad {
        return Err(ConfigError::MasterName(name.chars().take(80).collect()));
    }
    Ok(())
}

/// Parses envoyproxy/ratelimit's Sentinel `REDIS_URL`: the master name,
/// then the sentinels' addresses (as [`parse_redis_urls`] reads them), all
/// separated by commas. Returns the name and the addresses.
///
/// ```
/// use floodgate_redis::parse_sentinel_url;
/// let (name, sentinels) = parse_sentinel_url("mymaster,10.0.0.1:26379,10.0.0.2:26379").unwrap();
/// assert_eq!(name, "mymaster");
/// assert_eq!(sentinels, ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]);
/// assert!(parse_sentinel_url("10.0.0.1:26379").is_err()); // no master name
/// assert!(parse_sentinel_url("mymaster").is_err()); // no sentinel
/// ```
pub fn parse_sentinel_url(value: &str) -> Result<(String, Vec<String>), ConfigError> {
    let (name, rest) = value.split_once(',').unwrap_or((value, ""));
    let name = name.trim();
    if name.contains(':') || name.contains('/') {
        return Err(ConfigError::Url {
            url: name.to_owned(),
            reason: "a Sentinel URL starts with the master name: name,host:port,...".into(),
        });
    }
    check_master_name(name)?;
    if rest.trim().is_empty() {
        return Err(ConfigError::Url {
            url: value.trim().to_owned(),
            reason: "no sentinel address after the master name".into(),
        });
    }
    Ok((name.to_owned(), parse_redis_urls(rest)?))
}

/// Parses Envoy-style Redis addresses: `host:port`, `redis://…`,
/// `rediss://…` or `unix://…` URLs, several separated by commas (a
/// cluster's seed nodes). Bare `host:port` becomes `redis://host:port`.
///
/// ```
/// use floodgate_redis::parse_redis_urls;
/// assert_eq!(
///     parse_redis_urls("10.0.0.1:6379, redis://cache:7000/0").unwrap(),
///     ["redis://10.0.0.1:6379", "redis://cache:7000/0"],
/// );
/// assert!(parse_redis_urls("cache").is_err()); // no port
/// ```
pub fn parse_redis_urls(value: &str) -> Result<Vec<String>, ConfigError> {
    let mut urls = Vec::new();
    for part in value.split(',') {
        let part = part.trim();
        let err = |reason: &str| ConfigError::Url {
            url: part.to_owned(),
            reason: reason.to_owned(),
        };
        if part.is_empty() {
            return Err(err("empty address"));
        }
        if let Some((scheme, rest)) = part.split_once("://") {
            if !matches!(scheme, "redis" | "rediss" | "unix" | "redis+unix") {
                return Err(err("the scheme must be redis, rediss or unix"));
            }
            if rest.is_empty() {
                return Err(err("no host"));
            }
            urls.push(part.to_owned());
            continue;
        }
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| err("expected host:port"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.is_empty() || (bare.contains(':') && !host.starts_with('[')) {
            return Err(err("expected host:port (IPv6 hosts in brackets)"));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => urls.push(format!("redis://{host}:{p}")),
            _ => return Err(err("the port must be a number from 1 to 65535")),
        }
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_redis_urls("a:1,b:2 , [::1]:6379").unwrap(),
            ["redis://a:1", "redis://b:2", "redis://[::1]:6379"]
        );
        assert_eq!(
            parse_redis_urls("rediss://u:p@h:6380/2").unwrap(),
            ["rediss://u:p@h:6380/2"]
        );
        for bad in [
            "",
            "a:1,",
            "h",
            "h:0",
            "h:99999",
            "::1:6379",
            "http://h:1",
            "redis://",
        ] {
            assert!(parse_redis_urls(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sentinel_urls() {
        let (name, urls) = parse_sentinel_url(" mymaster , a:26379, rediss://b:26380").unwrap();
        assert_eq!(name, "mymaster");
        assert_eq!(urls, ["redis://a:26379", "rediss://b:26380"]);
        for bad in [
            "",
            "mymaster",
            "mymaster,",
            "a:26379,b:26379",
            "redis://a:1",
            "my master,a:1",
            ",a:1",
            "m,a",
        ] {
            assert!(parse_sentinel_url(bad).is_err(), "{bad:?}");
        }
        let bad = RedisConfig {
            mode: Mode::Sentinel {
                master_name: String::new(),
            },
            ..RedisConfig::default()
        };
        assert_eq!(bad.check(), Err(ConfigError::NoMasterName));
    }

    #[test]
    fn permits_have_a_lease_by_default() {
        let c = RedisConfig::default();
        assert_eq!(c.concurrency_lease, Some(DEFAULT_CONCURRENCY_LEASE));
        assert_eq!(
            RedisConfig::new("h:1", Mode::Cluster)
                .unwrap()
                .concurrency_lease,
            Some(DEFAULT_CONCURRENCY_LEASE)
        );
    }

    #[test]
    fn checks() {
        assert!(RedisConfig::default().check().is_ok());
        let bad = RedisConfig {
            key_prefix: "a{b}".into(),
            ..RedisConfig::default()
        };
        assert_eq!(bad.check(), Err(ConfigError::Prefix("a{b}".into())));
        let bad = RedisConfig {
            connections: 0,
            ..RedisConfig::default()
        };
        assert!(bad.check().is_err());
        // A pipelining window must leave time for the round trip.
        let window = |ms| RedisConfig {
            pipeline_window: Duration::from_millis(ms),
            ..RedisConfig::default()
        };
        assert!(window(49).check().is_ok());
        let e = window(50).check().unwrap_err();
        assert_eq!(
            e.to_string(),
            "pipeline window 50ms must be shorter than the timeout 50ms"
        );
    }
}
