//! Settings given outside the file (environment variables, flags), applied
//! over it.

use std::net::SocketAddr;
use std::time::Duration;

use floodgate_redis::{
    ConfigError, FailurePolicy, Mode, RedisConfig, parse_redis_urls, parse_sentinel_url,
};

use super::{LogFormat, SettingError, Settings, StoreSettings};

/// Which store to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded in-memory store.
    Memory,
    /// Redis.
    Redis,
}

/// Values that override the file's settings; `None` leaves a setting as it
/// is. Built from the environment ([`overrides_from_env`](super::overrides_from_env))
/// and from flags, and applied in that order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// gRPC listener (`Some(None)`: off).
    pub grpc: Option<Option<SocketAddr>>,
    /// HTTP listener.
    pub http: Option<Option<SocketAddr>>,
    /// Admin listener.
    pub admin: Option<Option<SocketAddr>>,
    /// Request body / message limit in bytes.
    pub body_limit: Option<usize>,
    /// The store.
    pub store: Option<StoreKind>,
    /// In-memory store capacity (keys).
    pub memory_capacity: Option<usize>,
    /// Redis addresses (implies the Redis store).
    pub redis_url: Option<String>,
    /// Single server, cluster or Sentinel (a Sentinel mode without a master
    /// name keeps the one configured, or takes the URL's).
    pub redis_mode: Option<Mode>,
    /// `password` or `user:password`, added to URLs that carry none; with
    /// Sentinel, the primary's credentials.
    pub redis_auth: Option<String>,
    /// With Sentinel, the sentinels' credentials (`password` or
    /// `user:password`), added to their URLs that carry none.
    pub redis_sentinel_auth: Option<String>,
    /// Use TLS (`rediss://`).
    pub redis_tls: Option<bool>,
    /// Connections per Redis server.
    pub redis_connections: Option<usize>,
    /// Timeout of one decision.
    pub redis_timeout: Option<Duration>,
    /// Pipelining window (zero: none).
    pub redis_pipeline_window: Option<Duration>,
    /// Commands per pipeline at most (zero: no limit).
    pub redis_pipeline_limit: Option<usize>,
    /// Key prefix.
    pub redis_prefix: Option<String>,
    /// What to do when Redis cannot decide.
    pub failure_policy: Option<FailurePolicy>,
    /// RateLimit-* headers on or off.
    pub headers_enabled: Option<bool>,
    /// Limit header name.
    pub limit_header: Option<String>,
    /// Remaining header name.
    pub remaining_header: Option<String>,
    /// Reset header name.
    pub reset_header: Option<String>,
    /// X-RateLimit-* (DRAFT_VERSION_03) headers on or off.
    pub x_ratelimit: Option<bool>,
    /// Log filter.
    pub log_level: Option<String>,
    /// Log format.
    pub log_format: Option<LogFormat>,
    /// Global shadow mode.
    pub shadow_mode: Option<bool>,
    /// Near-limit ratio.
    pub near_limit_ratio: Option<f64>,
    /// Count every matched counter on every request (envoyproxy/ratelimit's
    /// default; `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`). Applied
    /// when the configuration is compiled.
    pub envoy_increment_all: Option<bool>,
    /// Capacity of the Redis store's local over-limit cache, in entries.
    pub local_cache_entries: Option<usize>,
    /// Reload polling interval.
    pub reload_interval: Option<Duration>,
    /// Shutdown grace period.
    pub shutdown_grace: Option<Duration>,
    /// Delay between turning not-ready and draining, on shutdown.
    pub shutdown_delay: Option<Duration>,
}

impl Overrides {
    /// Applies the values that are set to `settings`.
    pub fn apply(&self, settings: &mut Settings) -> Result<(), SettingError> {
        let s = &mut settings.server;
        if let Some(a) = self.grpc {
            s.grpc = a;
        }
        if let Some(a) = self.http {
            s.http = a;
        }
        if let Some(a) = self.admin {
            s.admin = a;
        }
        if let Some(b) = self.body_limit {
            s.body_limit = b;
        }
        let h = &mut s.headers;
        set(&mut h.enabled, self.headers_enabled);
        set(&mut h.x_ratelimit, self.x_ratelimit);
        set(&mut h.limit, self.limit_header.clone());
        set(&mut h.remaining, self.remaining_header.clone());
        set(&mut h.reset, self.reset_header.clone());
        set(&mut s.log.level, self.log_level.clone());
        set(&mut s.log.format, self.log_format);
        set(&mut s.reload_interval, self.reload_interval);
        set(&mut s.shutdown_grace, self.shutdown_grace);
        set(&mut s.shutdown_delay, self.shutdown_delay);
        if self.shadow_mode.is_some() {
            settings.policy.shadow_mode = self.shadow_mode;
        }
        if self.near_limit_ratio.is_some() {
            settings.policy.near_limit_ratio = self.near_limit_ratio;
        }
        self.apply_store(&mut settings.store)
    }

    fn apply_store(&self, store: &mut StoreSettings) -> Result<(), SettingError> {
        let redis_wanted = self.store == Some(StoreKind::Redis)
            || (self.store.is_none() && self.redis_url.is_some());
        match (self.store, &*store) {
            (Some(StoreKind::Memory), StoreSettings::Redis(_)) => {
                *store = StoreSettings::default();
            }
            (_, StoreSettings::Memory { .. }) if redis_wanted => {
                *store = StoreSettings::Redis(Box::default());
            }
            _ => {}
        }
        match store {
            StoreSettings::Memory { capacity } => {
                set(capacity, self.memory_capacity);
                Ok(())
            }
            StoreSettings::Redis(r) => self.apply_redis(r),
        }
    }

    fn apply_redis(&self, r: &mut RedisConfig) -> Result<(), SettingError> {
        if let Some(mode) = &self.redis_mode {
            // `sentinel` alone keeps the master name already configured.
            let keep = matches!(
                (mode, &r.mode),
                (Mode::Sentinel { master_name }, Mode::Sentinel { .. }) if master_name.is_empty()
            );
            if !keep {
                r.mode = mode.clone();
            }
        }
        if let Some(u) = &self.redis_url {
            let url_error = |e: ConfigError| SettingError::new("REDIS_URL", e.to_string());
            match &mut r.mode {
                // envoyproxy/ratelimit's format: the master name, then the
                // sentinels.
                Mode::Sentinel { master_name } => {
                    let (name, urls) = parse_sentinel_url(u).map_err(url_error)?;
                    *master_name = name;
                    r.urls = urls;
                }
                _ => r.urls = parse_redis_urls(u).map_err(url_error)?,
            }
        }
        set(&mut r.connections, self.redis_connections);
        set(&mut r.timeout, self.redis_timeout);
        set(&mut r.pipeline_window, self.redis_pipeline_window);
        set(&mut r.pipeline_limit, self.redis_pipeline_limit);
        set(&mut r.key_prefix, self.redis_prefix.clone());
        set(&mut r.failure_policy, self.failure_policy);
        set(&mut r.local_cache_capacity, self.local_cache_entries);
        if self.redis_tls == Some(true) {
            for u in &mut r.urls {
                if let Some(rest) = u.strip_prefix("redis://") {
                    *u = format!("rediss://{rest}");
                }
            }
        }
        let sentinel = matches!(r.mode, Mode::Sentinel { .. });
        if let Some(auth) = &self.redis_auth {
            if sentinel {
                r.primary_auth = Some(auth.clone());
            } else {
                for u in &mut r.urls {
                    *u = with_auth(u, auth);
                }
            }
        }
        if let (Some(auth), true) = (&self.redis_sentinel_auth, sentinel) {
            for u in &mut r.urls {
                *u = with_auth(u, auth);
            }
        }
        Ok(())
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// Adds `auth` (`password` or `user:password`) to a Redis URL that has no
/// credentials.
pub(crate) fn with_auth(url: &str, auth: &str) -> String {
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
    fn redis_url_implies_redis() {
        let mut s = Settings::default();
        let o = Overrides {
            redis_url: Some("cache:6379".into()),
            redis_mode: Some(Mode::Cluster),
            redis_auth: Some("secret".into()),
            ..Overrides::default()
        };
        o.apply(&mut s).unwrap();
        let StoreSettings::Redis(r) = &s.store else {
            panic!("{:?}", s.store)
        };
        assert_eq!(r.urls, ["redis://:secret@cache:6379"]);
        assert_eq!(r.mode, Mode::Cluster);
        Overrides {
            store: Some(StoreKind::Memory),
            ..Overrides::default()
        }
        .apply(&mut s)
        .unwrap();
        assert_eq!(s.store, StoreSettings::default());
    }

    #[test]
    fn sentinel_keeps_the_files_master_name() {
        let mut s = Settings {
            store: StoreSettings::Redis(Box::new(RedisConfig {
                mode: Mode::sentinel("from-file").unwrap(),
                urls: vec!["redis://s1:26379".into()],
                ..RedisConfig::default()
            })),
            ..Settings::default()
        };
        let sentinel = Overrides {
            redis_mode: Some(Mode::Sentinel {
                master_name: String::new(),
            }),
            ..Overrides::default()
        };
        sentinel.apply(&mut s).unwrap();
        let StoreSettings::Redis(r) = &s.store else {
            panic!()
        };
        assert_eq!(r.mode, Mode::sentinel("from-file").unwrap());
        // A URL in sentinel mode names the master (flags after the
        // environment).
        Overrides {
            redis_url: Some("other,s2:26379".into()),
            ..Overrides::default()
        }
        .apply(&mut s)
        .unwrap();
        let StoreSettings::Redis(r) = &s.store else {
            panic!()
        };
        assert_eq!(r.mode, Mode::sentinel("other").unwrap());
        assert_eq!(r.urls, ["redis://s2:26379"]);
        // Back to a single server.
        Overrides {
            redis_mode: Some(Mode::Single),
            redis_url: Some("cache:6379".into()),
            ..Overrides::default()
        }
        .apply(&mut s)
        .unwrap();
        let StoreSettings::Redis(r) = &s.store else {
            panic!()
        };
        assert_eq!(
            (&r.mode, r.urls.as_slice()),
            (&Mode::Single, &["redis://cache:6379".to_owned()][..])
        );
    }

    #[test]
    fn auth_is_added_once() {
        assert_eq!(with_auth("redis://h:1/0", "u:p"), "redis://u:p@h:1/0");
        assert_eq!(with_auth("redis://x@h:1", "p"), "redis://x@h:1");
        assert_eq!(with_auth("unix:///tmp/s", "p"), "unix:///tmp/s");
    }
}
