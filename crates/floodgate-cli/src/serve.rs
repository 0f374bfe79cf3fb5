//! `floodgate serve`: the decision service.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use floodgate_runtime::logging;
use floodgate_runtime::settings::{
    Overrides, StoreKind, config_path_from_env, overrides_from_env, parse_bool,
    parse_failure_policy, parse_listen, parse_log_format, parse_mode, parse_setting_duration,
    parse_size, warn_unsupported_env,
};
use floodgate_server::ServeOptions;

/// Flags of `floodgate serve`; each overrides the environment and the
/// configuration file.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Configuration files or directories (default: $FLOODGATE_CONFIG,
    /// envoyproxy/ratelimit's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
    /// ./floodgate.yaml, then ./examples/floodgate.yaml).
    #[arg(short, long = "config", value_name = "PATH")]
    pub config: Vec<PathBuf>,
    /// gRPC listen address (host:port, :port, port, or off).
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub grpc_addr: Option<Listen>,
    /// HTTP listen address.
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub http_addr: Option<Listen>,
    /// Admin listen address (metrics); keep it on loopback.
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub admin_addr: Option<Listen>,
    /// The store: memory or redis.
    #[arg(long, value_name = "KIND", value_parser = store)]
    pub store: Option<StoreKind>,
    /// Redis addresses (host:port or redis:// URLs, comma-separated).
    #[arg(long, value_name = "URLS")]
    pub redis_url: Option<String>,
    /// Redis deployment: single, cluster or sentinel.
    #[arg(long, value_name = "MODE")]
    pub redis_mode: Option<String>,
    /// When Redis cannot decide: fail_open, fail_closed, local or local/N.
    #[arg(long, value_name = "POLICY")]
    pub failure_policy: Option<String>,
    /// Largest request body or gRPC message (e.g. 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub body_limit: Option<usize>,
    /// Add RateLimit-Limit/Remaining/Reset headers (`=false` turns them
    /// off over the environment and the file).
    #[arg(long, value_name = "BOOL", value_parser = boolean, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub response_headers: Option<bool>,
    /// Add Envoy's DRAFT_VERSION_03 X-RateLimit-* headers (`=false`: off).
    #[arg(long, value_name = "BOOL", value_parser = boolean, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub x_ratelimit_headers: Option<bool>,
    /// Global shadow mode: count and report, never deny (`=false`: off,
    /// over SHADOW_MODE).
    #[arg(long, value_name = "BOOL", value_parser = boolean, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub shadow_mode: Option<bool>,
    /// Merge several files of one domain (`=false`: do not, over
    /// MERGE_DOMAIN_CONFIG).
    #[arg(long, value_name = "BOOL", value_parser = boolean, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub merge_domains: Option<bool>,
    /// Log filter (info, debug, ...).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Configuration polling interval (0: reload only on SIGHUP).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub reload_interval: Option<Duration>,
    /// Time allowed for in-flight calls after SIGTERM/SIGINT.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub shutdown_grace: Option<Duration>,
    /// After SIGTERM/SIGINT, how long to keep serving while not ready,
    /// before the drain (0: drain at once).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub shutdown_delay: Option<Duration>,
}

/// A listen address, or none (`off`).
#[derive(Clone, Copy, Debug)]
pub struct Listen(Option<SocketAddr>);

fn listen(s: &str) -> Result<Listen, String> {
    parse_listen(s).map(Listen)
}

fn size(s: &str) -> Result<usize, String> {
    parse_size(s).ok_or_else(|| "expected a size such as 1MiB".into())
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_setting_duration(s).ok_or_else(|| "expected a duration such as 0, 500ms or 1.5s".into())
}

fn boolean(s: &str) -> Result<bool, String> {
    parse_bool(s).ok_or_else(|| format!("expected true or false, found `{s}`"))
}

fn store(s: &str) -> Result<StoreKind, String> {
    match s {
        "memory" => Ok(StoreKind::Memory),
        "redis" => Ok(StoreKind::Redis),
        _ => Err("expected memory or redis".into()),
    }
}

impl ServeArgs {
    fn overrides(&self) -> anyhow::Result<Overrides> {
        Ok(Overrides {
            grpc: self.grpc_addr.map(|l| l.0),
            http: self.http_addr.map(|l| l.0),
            admin: self.admin_addr.map(|l| l.0),
            body_limit: self.body_limit,
            store: self.store,
            redis_url: self.redis_url.clone(),
            redis_mode: match &self.redis_mode {
                None => None,
                Some(m) => Some(parse_mode(m).map_err(|e| anyhow::anyhow!("--redis-mode: {e}"))?),
            },
            failure_policy: match &self.failure_policy {
                None => None,
                Some(p) => Some(
                    parse_failure_policy(p)
                        .map_err(|e| anyhow::anyhow!("--failure-policy: {e}"))?,
                ),
            },
            headers_enabled: self.response_headers,
            x_ratelimit: self.x_ratelimit_headers,
            shadow_mode: self.shadow_mode,
            log_level: self.log_level.clone(),
            log_format: match self.log_format.as_deref() {
                None => None,
                Some(f) => {
                    Some(parse_log_format(f).map_err(|e| anyhow::anyhow!("--log-format: {e}"))?)
                }
            },
            reload_interval: self.reload_interval,
            shutdown_grace: self.shutdown_grace,
            shutdown_delay: self.shutdown_delay,
            ..Overrides::default()
        })
    }
}

/// The configuration paths: flags, then the environment, then the
/// defaults.
fn config_paths(args: &ServeArgs) -> anyhow::Result<Vec<PathBuf>> {
    if !args.config.is_empty() {
        return Ok(args.config.clone());
    }
    if let Some(p) = config_path_from_env(|k| std::env::var(k).ok()) {
        return Ok(vec![p]);
    }
    for p in ["floodgate.yaml", "examples/floodgate.yaml"] {
        if Path::new(p).exists() {
            return Ok(vec![p.into()]);
        }
    }
    bail!(
        "no configuration: pass --config FILE (or set FLOODGATE_CONFIG); \
         ./floodgate.yaml and ./examples/floodgate.yaml do not exist"
    )
}

/// Runs the service until SIGTERM/SIGINT.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let env = overrides_from_env(|k| std::env::var(k).ok())?;
    let merge_env = match std::env::var("MERGE_DOMAIN_CONFIG") {
        Ok(v) if !v.trim().is_empty() => Some(parse_bool(&v).ok_or_else(|| {
            anyhow::anyhow!("MERGE_DOMAIN_CONFIG: expected true or false, found `{v}`")
        })?),
        _ => None,
    };
    let opts = ServeOptions {
        paths: config_paths(&args)?,
        merge_domains: args.merge_domains.or(merge_env).unwrap_or(false),
        env,
        flags: args.overrides()?,
        // One file may configure the gateway too.
        other_sections: crate::check::OTHER_SECTIONS.to_vec(),
    };
    // Before loading: rules resolve their metric handles when compiled.
    let prometheus = floodgate_runtime::metrics::install()?;
    let (source, compiled, settings) = floodgate_server::load(&opts)?;
    logging::init(&settings.server.log)?;
    warn_unsupported_env(|k| std::env::var(k).ok());
    floodgate_server::run::run(source, compiled, settings, Some(prometheus))
        .context("floodgate serve")?;
    Ok(())
}
