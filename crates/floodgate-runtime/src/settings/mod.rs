//! The service's settings: the `server:` and `store:` sections of the
//! Floodgate file, then environment variables, then command-line flags
//! (each overriding the one before).

mod env;
mod file;
mod overrides;
mod store;

use std::net::SocketAddr;
use std::time::Duration;

use floodgate_redis::RedisConfig;

pub use env::{
    UNSUPPORTED_ENVOY_VARIABLES, config_path_from_env, overrides_from_env, parse_bool,
    parse_failure_policy, parse_log_format, parse_mode, unsupported_from_env, warn_unsupported_env,
};
pub use file::{SECTIONS, read_sections};
pub use overrides::{Overrides, StoreKind};

/// Everything the service reads at startup.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Settings {
    /// Listeners, limits, headers, logging.
    pub server: ServerSettings,
    /// Where counters live.
    pub store: StoreSettings,
    /// Policy settings forced from the environment or flags, over the
    /// file's `settings:` (envoyproxy/ratelimit's `SHADOW_MODE`,
    /// `NEAR_LIMIT_RATIO`).
    pub policy: PolicyOverrides,
}

/// The `server:` section.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// The gRPC listener (Envoy RLS v3, health, reflection).
    pub grpc: Option<SocketAddr>,
    /// The HTTP listener (`/json`, `/v1/check`, `/healthcheck`, `/ready`).
    pub http: Option<SocketAddr>,
    /// The admin listener (`/metrics`, `/rlconfig`); loopback by default.
    pub admin: Option<SocketAddr>,
    /// Largest request body or gRPC message accepted, in bytes.
    pub body_limit: usize,
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Longest descriptor key or value, in bytes.
    pub max_value_bytes: usize,
    /// Rate limit headers added to responses.
    pub headers: HeaderSettings,
    /// How often the configuration files are checked for changes (zero:
    /// never).
    pub reload_interval: Duration,
    /// How long in-flight calls may take to finish after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// After SIGTERM/SIGINT, how long the listeners keep serving while
    /// readiness already reports the shutdown (so load balancers stop
    /// sending new calls first); the drain starts after it.
    pub shutdown_delay: Duration,
    /// Logging.
    pub log: LogSettings,
}

/// Which rate limit headers responses carry (gRPC
/// `response_headers_to_add`, and HTTP response headers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderSettings {
    /// envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED` headers:
    /// limit, remaining and reset (seconds) of the most restrictive
    /// descriptor.
    pub enabled: bool,
    /// Name of the limit header (`RateLimit-Limit`).
    pub limit: String,
    /// Name of the remaining header (`RateLimit-Remaining`).
    pub remaining: String,
    /// Name of the reset header (`RateLimit-Reset`).
    pub reset: String,
    /// Envoy's `DRAFT_VERSION_03` headers: `X-RateLimit-Limit` (with quota
    /// policies), `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    pub x_ratelimit: bool,
}

/// Log output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// A `tracing` filter: `info`, `debug`, `floodgate_server=debug,info`.
    pub level: String,
    /// Text or JSON lines.
    pub format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// The `store:` section.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreSettings {
    /// Counters in this process's memory.
    Memory {
        /// Most keys kept (the least recently used are evicted beyond).
        capacity: usize,
    },
    /// Counters in Redis, shared by every instance.
    Redis(Box<RedisConfig>),
}

/// Policy settings forced over the configuration file's `settings:`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyOverrides {
    /// Force global shadow mode on or off.
    pub shadow_mode: Option<bool>,
    /// Force the near-limit ratio.
    pub near_limit_ratio: Option<f64>,
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
    }
}

/// Default gRPC address (envoyproxy/ratelimit's `GRPC_PORT` 8081).
pub const DEFAULT_GRPC: &str = "0.0.0.0:8081";
/// Default HTTP address (envoyproxy/ratelimit's `PORT` 8080).
pub const DEFAULT_HTTP: &str = "0.0.0.0:8080";
/// Default admin address (loopback only; envoyproxy/ratelimit's debug
/// port 6070).
pub const DEFAULT_ADMIN: &str = "127.0.0.1:6070";

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            grpc: DEFAULT_GRPC.parse().ok(),
            http: DEFAULT_HTTP.parse().ok(),
            admin: DEFAULT_ADMIN.parse().ok(),
            body_limit: 1 << 20,
            max_descriptors: 256,
            max_value_bytes: 16 * 1024,
            headers: HeaderSettings::default(),
            reload_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            log: LogSettings {
                level: "info".into(),
                format: LogFormat::Text,
            },
        }
    }
}

impl Default for HeaderSettings {
    fn default() -> Self {
        HeaderSettings {
            enabled: false,
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
            x_ratelimit: false,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings::Memory {
            capacity: 1_000_000,
        }
    }
}

/// A setting from the environment or a flag that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct SettingError {
    /// The variable or flag.
    pub name: String,
    /// What is wrong with it.
    pub message: String,
}

impl SettingError {
    /// A problem with the setting `name`.
    pub fn new(name: &str, message: impl Into<String>) -> Self {
        SettingError {
            name: name.to_owned(),
            message: message.into(),
        }
    }
}

/// Parses a listen address: `host:port`, `:port` (all interfaces), a bare
/// port, or `off` (no listener).
pub fn parse_listen(text: &str) -> Result<Option<SocketAddr>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("off") || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    if let Ok(port) = t.parse::<u16>() {
        return Ok(Some(SocketAddr::from(([0, 0, 0, 0], port))));
    }
    let full = if let Some(port) = t.strip_prefix(':') {
        format!("0.0.0.0:{port}")
    } else {
        t.replace("localhost:", "127.0.0.1:")
    };
    full.parse::<SocketAddr>()
        .map(Some)
        .map_err(|_| format!("expected host:port, :port, a port number or off, found `{t}`"))
}

/// Parses a size: bytes, or with a suffix `KiB`, `MiB`, `GiB` (also `K`,
/// `M`, `G`, `KB`, `MB`, `GB`, all powers of 1024).
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let n: usize = t[..digits].parse().ok()?;
    let mult: usize = match t[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Parses a duration setting: `0`; Go's `time.ParseDuration` syntax, the
/// one envoyproxy/ratelimit's variables use (`250ms`, `1.5s`, `1m30s`,
/// `2h45m`, units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`, decimal fractions
/// allowed); and Floodgate's own spellings (`1d`, `1w`, `minute`). A
/// negative duration is refused.
pub fn parse_setting_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    if t == "0" || t == "+0" {
        return Some(Duration::ZERO);
    }
    parse_go_duration(t).or_else(|| floodgate_policy::unit::parse_duration(t))
}

/// Go's duration syntax: an optional `+`, then one or more decimal numbers
/// (with an optional fraction), each with a unit.
fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let nanos_per: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        // Whole units, then the fraction (truncated to a nanosecond, as Go
        // does).
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        total = total.checked_add(whole.checked_mul(nanos_per)?)?;
        let mut scale = nanos_per;
        let mut frac_nanos: u128 = 0;
        for d in frac_part.bytes() {
            if scale < 10 {
                break;
            }
            scale /= 10;
            frac_nanos += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(frac_nanos)?;
    }
    u64::try_from(total).ok().map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_setting_duration("1.5s"), Some(ms(1500)));
        assert_eq!(parse_setting_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(parse_setting_duration("250ms"), Some(ms(250)));
        assert_eq!(parse_setting_duration("0.5m"), Some(ms(30_000)));
        assert_eq!(parse_setting_duration(".25s"), Some(ms(250)));
        assert_eq!(parse_setting_duration("1h0.5m"), Some(ms(3_630_000)));
        assert_eq!(
            parse_setting_duration("1.5µs"),
            Some(Duration::from_nanos(1500))
        );
        assert_eq!(
            parse_setting_duration("2.0000000009s"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_setting_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_setting_duration("0s"), Some(Duration::ZERO));
        // Floodgate's own spellings still read.
        assert_eq!(
            parse_setting_duration("1d"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_setting_duration("minute"),
            Some(Duration::from_secs(60))
        );
        for bad in [
            "",
            "1.5",
            "-1s",
            "1.s.",
            ".s",
            "s",
            "1x",
            "1..5s",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_setting_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("8081").unwrap(),
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(
            parse_listen(":9090").unwrap(),
            Some("0.0.0.0:9090".parse().unwrap())
        );
        assert_eq!(
            parse_listen("localhost:1").unwrap(),
            Some("127.0.0.1:1".parse().unwrap())
        );
        assert_eq!(parse_listen("off").unwrap(), None);
        assert!(parse_listen("nowhere").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("64 KiB"), Some(64 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("1 parsec"), None);
    }
}
