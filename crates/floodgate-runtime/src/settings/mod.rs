//! The settings of both binaries: the `server:` and `store:` sections of
//! the Floodgate file, the configuration's own (paths, merging), and the
//! policy settings forced over the file's `settings:`.
//!
//! Each setting is declared once ([`table`](mod@table)): its file key, its
//! environment variables (Floodgate's and envoyproxy/ratelimit's), its
//! flag, its default and its documentation. Every setting is read the same
//! way, **flags > environment > file > defaults** ([`table::read`]); the
//! structures' own `Default` is blank, and [`Settings::default`] is every
//! declared default, read from nothing.

mod envoy;
mod given;
pub mod listener;
mod parse;
mod server;
mod store;
pub mod table;
mod trace;
mod xds;

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::Document;
use floodgate_redis::RedisConfig;

use crate::listener::ConnectionLimits;

pub use envoy::{UNSUPPORTED_ENVOY_VARIABLES, unsupported, warn_unsupported};
pub use given::Given;
pub use listener::TlsSettings;
pub use parse::{
    ANY, boolean, choice, count_in, duration, header_bytes, parse_listen_on, parse_size,
    positive_duration, size,
};
pub use store::StoreKind;
pub use table::{Declared, Env, Flags, Origins, Setting, Value};
pub use trace::{OtlpProtocol, TracingSettings};
pub use xds::{Backoff, ConfigType, XdsSettings};

/// Everything a binary reads at startup besides its own sections;
/// `Default` is every setting at its declared default.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Where the configuration is and how it is loaded.
    pub config: ConfigSettings,
    /// Listeners, limits, headers, logging, reload and shutdown.
    pub server: ServerSettings,
    /// Where counters live.
    pub store: StoreSettings,
    /// Policy settings forced over the file's `settings:`.
    pub policy: PolicyOverrides,
}

/// The configuration files and how they are loaded.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ConfigSettings {
    /// Files or directories (none: the command's defaults, the first that
    /// exists).
    pub paths: Vec<PathBuf>,
    /// Merge several files of one domain instead of rejecting them
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Accept an empty configuration (see
    /// [`LoadOptions::allow_empty`](floodgate_policy::read::LoadOptions::allow_empty)).
    pub allow_empty: bool,
    /// Where the policies come from.
    pub config_type: ConfigType,
    /// Start before a first configuration is loaded (not ready until one
    /// is).
    pub start_without_config: bool,
    /// The xDS client, when the policies come from an xDS server.
    pub xds: XdsSettings,
}

impl ConfigSettings {
    /// The paths to load: those given, else the first of `defaults` (the
    /// command's) that exists.
    pub fn resolved_paths(&self, defaults: &[&str]) -> Result<Vec<PathBuf>, String> {
        if !self.paths.is_empty() {
            return Ok(self.paths.clone());
        }
        defaults
            .iter()
            .find(|p| Path::new(p).exists())
            .map(|p| vec![PathBuf::from(p)])
            .ok_or_else(|| {
                let tried: Vec<String> = defaults.iter().map(|p| format!("./{p}")).collect();
                format!(
                    "no configuration: pass --config FILE (or set FLOODGATE_CONFIG); {} not found",
                    tried.join(" and ")
                )
            })
    }
}

/// The `server:` section's keys both binaries read (`Default`: blank, see
/// [`Settings::default`]); the service's listeners and requests are its
/// frontend's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerSettings {
    /// The admin listener (`/metrics`, `/healthcheck`, `/ready`,
    /// `/dashboard`); loopback by default.
    pub admin: Option<SocketAddr>,
    /// The names the admin listener answers to besides loopback names and
    /// IP addresses (others: 421).
    pub admin_hosts: Vec<String>,
    /// TLS on the admin listener.
    pub admin_tls: TlsSettings,
    /// The metrics listener (`/metrics`, `/healthcheck`, `/ready` only,
    /// any `Host`): for Prometheus and probes from the pod network; off by
    /// default.
    pub metrics: Option<SocketAddr>,
    /// The path of the metrics on the metrics listener (`/metrics`).
    pub metrics_path: String,
    /// TLS on the metrics listener.
    pub metrics_tls: TlsSettings,
    /// The protections of every connection of the admin listener (and of
    /// the service's listeners).
    pub limits: ConnectionLimits,
    /// How often the configuration files are checked for changes (zero:
    /// never).
    pub reload_interval: Duration,
    /// How long in-flight calls may take to finish after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// After SIGTERM/SIGINT, how long the listeners keep serving while
    /// readiness already reports the shutdown (so load balancers stop
    /// sending new calls first); the drain starts after it.
    pub shutdown_delay: Duration,
    /// Worker threads of the binary's runtime (`None`: one per core; 1: a
    /// current-thread runtime).
    pub workers: Option<usize>,
    /// Logging.
    pub log: LogSettings,
    /// OpenTelemetry tracing.
    pub tracing: TracingSettings,
}

/// Log output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// A `tracing` filter: `info`, `debug`, `floodgate_server=debug,info`.
    pub level: String,
    /// Text or JSON lines.
    pub format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `store:` section (`Default`: blank, see [`Settings::default`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreSettings {
    /// Which store decides.
    pub backend: StoreKind,
    /// The in-memory store: most keys kept.
    pub capacity: usize,
    /// The in-memory store: what it does with a new key when full.
    pub when_full: floodgate::store::WhenFull,
    /// The Redis store (complete once the settings are resolved).
    pub redis: RedisConfig,
    /// How many instances share the counters (0: not said): for the bound
    /// on `sync` mode's over-admission that `floodgate config check`
    /// prints.
    pub instances: u32,
    /// What assembles into `redis` (addresses, credentials), as read until
    /// the settings are finished (blank after: two stores made the same
    /// way are equal, however it was written).
    address: store::RedisAddress,
}

impl StoreSettings {
    /// The Redis store with `redis`.
    pub fn redis(redis: RedisConfig) -> Self {
        StoreSettings {
            backend: StoreKind::Redis,
            redis,
            ..StoreSettings::default()
        }
    }

    /// The in-memory store of `capacity` keys.
    pub fn memory(capacity: usize) -> Self {
        StoreSettings {
            capacity,
            ..StoreSettings::default()
        }
    }

    /// A description for logs (Redis credentials hidden).
    pub fn describe(&self) -> String {
        match self.backend {
            StoreKind::Memory => format!(
                "memory (capacity {} keys, when full: {})",
                self.capacity,
                self.when_full.name()
            ),
            StoreKind::Redis => {
                let urls: Vec<String> = self.redis.urls.iter().map(|u| redact(u)).collect();
                format!("redis {:?} {}", self.redis.mode, urls.join(","))
            }
        }
    }
}

/// Policy settings forced over the configuration file's `settings:`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyOverrides {
    /// Force global shadow mode on or off.
    pub shadow_mode: Option<bool>,
    /// Force the near-limit ratio.
    pub near_limit_ratio: Option<f64>,
    /// Force envoyproxy/ratelimit's accounting (every matched counter
    /// counts every request: the fixed windows of its files whose rules
    /// set no `penalty`); applied when the files are compiled.
    pub envoy_increment_all: Option<bool>,
    /// Also count each rule under envoyproxy/ratelimit's Prometheus names.
    pub envoy_stats: Option<bool>,
}

impl PolicyOverrides {
    /// Applies the forced values to a compiled policy's settings.
    pub fn apply(&self, settings: &mut floodgate_policy::spec::Settings) {
        if let Some(s) = self.shadow_mode {
            settings.shadow_mode = s;
        }
        if let Some(r) = self.near_limit_ratio {
            settings.near_limit_ratio = r;
        }
        if let Some(e) = self.envoy_increment_all {
            settings.envoy_increment_all = e;
        }
        if let Some(e) = self.envoy_stats {
            settings.envoy_stats = e;
        }
    }
}

impl Declared for Settings {
    fn table() -> &'static [Setting<Settings>] {
        static TABLE: LazyLock<Vec<Setting<Settings>>> = LazyLock::new(|| {
            let mut t = Vec::new();
            server::declare(&mut t);
            store::declare(&mut t);
            t
        });
        &TABLE
    }

    const SHORTHANDS: &'static [(&'static str, &'static str)] = store::SHORTHANDS;

    fn blank() -> Self {
        Settings {
            config: ConfigSettings::default(),
            server: ServerSettings::default(),
            store: StoreSettings::default(),
            policy: PolicyOverrides::default(),
        }
    }

    fn finish(&mut self, origins: &Origins, errors: &mut Errors) {
        store::finish(&mut self.store, origins, errors);
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::defaults()
    }
}

impl Settings {
    /// Resolves every setting from `flags`, `env` and the `server:` and
    /// `store:` sections of `documents` (none: only the settings read
    /// before the files, such as their paths, are meaningful), leaving the
    /// keys of those sections that `frontends` read to them (see
    /// [`Frontend::sections`](crate::host::Frontend::sections)). Every
    /// problem is reported, each where its value came from.
    pub fn resolve(
        flags: &Flags,
        env: &Env<'_>,
        documents: &[Document],
        frontends: &[&'static str],
    ) -> Result<Settings, ConfigErrors> {
        let mut errors = Errors::default();
        let read = table::read(flags, env, documents, frontends, &mut errors);
        // None only with errors.
        let settings = read.map_or_else(Settings::blank, |(mut settings, origins)| {
            server::finish_tls(&mut settings, &origins, &mut errors);
            settings
        });
        errors.finish(settings)
    }

    /// [`resolve`](Self::resolve) with the `server:` and `store:` sections
    /// of `documents` only (defaults elsewhere), every key of them the
    /// host's: what the file says.
    pub fn from_documents(documents: &[Document]) -> Result<Settings, ConfigErrors> {
        Settings::resolve(&Flags::new(), &Env::new(&|_| None), documents, &[])
    }
}

/// Sections read at startup only (`T`'s: the runtime's `server:` and
/// `store:`, the gateway's `gateway:`), so a reload that changes them is
/// logged, and applies the rest.
#[derive(Debug)]
pub struct StartupSections<T = Settings>(table::FileValues, PhantomData<fn() -> T>);

impl<T: Declared> StartupSections<T> {
    /// The sections of the configuration `documents` the process started
    /// with.
    pub fn of(documents: &[Document]) -> Self {
        StartupSections(
            table::FileValues::read::<T>(documents, &[], &mut Errors::default()),
            PhantomData,
        )
    }

    /// Whether `documents` give the sections other values (wherever they
    /// give them).
    pub fn changed(&self, documents: &[Document]) -> bool {
        !table::FileValues::read::<T>(documents, &[], &mut Errors::default()).same_values(&self.0)
    }
}

impl StartupSections {
    /// Logs what a reload to `documents` cannot apply, reading them with
    /// what startup was `given` (the keys `frontends` read left to them).
    pub fn check_reload(&self, given: &Given, documents: &[Document], frontends: &[&'static str]) {
        let resolve =
            |flags: &Flags, env: &Env<'_>| Settings::resolve(flags, env, documents, frontends);
        if let Err(e) = given.replay(resolve) {
            tracing::warn!(errors = %e, "the server and store sections are invalid (they are only read at startup)");
        } else if self.changed(documents) {
            tracing::warn!(
                "the server or store section changed: it is only read at startup (restart to apply it)"
            );
        }
    }
}

/// `url` without its credentials (`redis://user:secret@host` becomes
/// `redis://***@host`), for logs.
pub fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_owned(),
    }
}
