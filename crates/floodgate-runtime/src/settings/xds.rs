//! Where the configuration comes from: files (watched), or an xDS
//! management server streaming envoyproxy/ratelimit's `RateLimitConfig`
//! resources (state of the world); and whether to start before any
//! configuration is loaded. envoyproxy/ratelimit's variables, names and
//! defaults (its `src/settings/settings.go`).

use std::time::Duration;

use super::Settings;
use super::parse::{boolean, choice, duration, pairs, positive_duration, size};
use super::table::{Envoy, InFile, Kind, Setting};

type S = Setting<Settings>;

/// Where the policies come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConfigType {
    /// The configuration files (`FILE`).
    #[default]
    File,
    /// An xDS management server, state of the world (`GRPC_XDS_SOTW`).
    XdsSotw,
}

/// The xDS client (`CONFIG_TYPE=GRPC_XDS_SOTW`).
#[derive(Clone, Debug, PartialEq)]
pub struct XdsSettings {
    /// The management server: `host:port`, or a URL (`http://`,
    /// `https://`).
    pub server: String,
    /// The node id the server chooses the snapshot by.
    pub node_id: String,
    /// The node's metadata: `key=value` pairs.
    pub node_metadata: Vec<(String, String)>,
    /// Headers sent with the stream: `name:value` pairs.
    pub headers: Vec<(String, String)>,
    /// How long one attempt to connect may take, and the pause between
    /// attempts to connect (jittered by half).
    pub connect_retry_interval: Duration,
    /// TLS to the server.
    pub tls: bool,
    /// The client certificate (mTLS), PEM.
    pub tls_cert: String,
    /// Its key, PEM.
    pub tls_key: String,
    /// The CA the server's certificate is verified with, PEM.
    pub tls_ca: String,
    /// The name the server's certificate must carry (none: the server's
    /// host).
    pub tls_san: String,
    /// The pause before reconnecting after the stream ends.
    pub backoff: Backoff,
    /// The largest message taken from the server.
    pub max_message_size: usize,
}

/// Reconnection pauses, as envoyproxy/ratelimit computes them (the Go
/// package `jpillora/backoff`): `initial × factor^attempt`, jittered
/// between that and `initial`, within `[initial, max]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The first pause, and the shortest.
    pub initial: Duration,
    /// The longest pause.
    pub max: Duration,
    /// What each attempt multiplies the pause by.
    pub factor: f64,
    /// Whether the pause is drawn at random below its computed value.
    pub jitter: bool,
}

impl Default for XdsSettings {
    fn default() -> Self {
        XdsSettings {
            server: "localhost:18000".into(),
            node_id: "default".into(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            connect_retry_interval: Duration::from_secs(3),
            tls: false,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca: String::new(),
            tls_san: String::new(),
            backoff: Backoff {
                initial: Duration::from_secs(10),
                max: Duration::from_secs(60),
                factor: 0.5,
                jitter: true,
            },
            max_message_size: DEFAULT_MAX_MESSAGE,
        }
    }
}

/// gRPC's own default limit on a received message.
const DEFAULT_MAX_MESSAGE: usize = 4 << 20;

/// The configuration's source and the xDS client.
#[rustfmt::skip]
pub(super) fn declare(t: &mut Vec<S>) {
    t.push(S::new("config_type", "FLOODGATE_CONFIG_TYPE", "config-type", Kind::Choice, "file",
        "where the policies come from: `file` (the configuration files, watched) or `xds` (an xDS management server, `GRPC_XDS_SOTW`)",
        |s, v| { s.config.config_type = choice(&v.text(), &[(&["file", "FILE"], ConfigType::File), (&["xds", "GRPC_XDS_SOTW"], ConfigType::XdsSotw)])?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_TYPE")).samples("file", "xds"));
    t.push(S::new("start_without_config", "FLOODGATE_START_WITHOUT_CONFIG", "start-without-config", Kind::Bool, "false",
        "start before a first configuration is loaded: listeners up, not ready and every decision refused (`no rate limit configuration loaded`) until one is",
        |s, v| { s.config.start_without_config = boolean(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("FORCE_START_WITHOUT_INITIAL_CONFIG")));
    t.push(S::new("xds.server", "FLOODGATE_XDS_SERVER", "xds-server", Kind::Text, "localhost:18000",
        "the xDS management server (`host:port`)",
        |s, v| { s.config.xds.server = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_SERVER_URL")));
    t.push(S::new("xds.node_id", "FLOODGATE_XDS_NODE_ID", "xds-node-id", Kind::Text, "default",
        "the node id sent to the xDS server, which chooses the configuration by it",
        |s, v| { s.config.xds.node_id = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_NODE_ID")));
    t.push(S::new("xds.node_metadata", "FLOODGATE_XDS_NODE_METADATA", "xds-node-metadata", Kind::List, "",
        "the node's metadata sent to the xDS server (`key=value`, repeatable or commas)",
        |s, v| { s.config.xds.node_metadata = pairs(v.items(), '=')?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_NODE_METADATA")).samples("a=1", "b=2"));
    t.push(S::new("xds.headers", "FLOODGATE_XDS_HEADERS", "xds-header", Kind::List, "",
        "headers sent with the xDS stream (`name:value`, repeatable or commas)",
        |s, v| { s.config.xds.headers = pairs(v.items(), ':')?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")).samples("x-a:1", "x-b:2"));
    t.push(S::new("xds.connect_retry_interval", "FLOODGATE_XDS_CONNECT_RETRY_INTERVAL", "xds-connect-retry-interval", Kind::Duration, "3s",
        "how long one attempt to connect to the xDS server may take, and the pause between attempts (jittered by half)",
        |s, v| { s.config.xds.connect_retry_interval = positive_duration(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")));
    tls(t);
    backoff(t);
}

/// TLS and mTLS to the xDS server.
#[rustfmt::skip]
fn tls(t: &mut Vec<S>) {
    t.push(S::new("xds.tls", "FLOODGATE_XDS_TLS", "xds-tls", Kind::Bool, "false",
        "TLS to the xDS server",
        |s, v| { s.config.xds.tls = boolean(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_SERVER_USE_TLS")));
    t.push(S::new("xds.tls_cert", "FLOODGATE_XDS_TLS_CERT", "xds-tls-cert", Kind::Text, "",
        "the client certificate shown to the xDS server (mTLS), PEM",
        |s, v| { s.config.xds.tls_cert = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")));
    t.push(S::new("xds.tls_key", "FLOODGATE_XDS_TLS_KEY", "xds-tls-key", Kind::Text, "",
        "the client certificate's key, PEM",
        |s, v| { s.config.xds.tls_key = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")));
    t.push(S::new("xds.tls_ca", "FLOODGATE_XDS_TLS_CA", "xds-tls-ca", Kind::Text, "",
        "the CA the xDS server's certificate is verified with, PEM (required with TLS: the system's roots are not read)",
        |s, v| { s.config.xds.tls_ca = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")));
    t.push(S::new("xds.tls_san", "FLOODGATE_XDS_TLS_SAN", "xds-tls-san", Kind::Text, "",
        "the name the xDS server's certificate must carry (none: the server's host)",
        |s, v| { s.config.xds.tls_san = v.text(); Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("CONFIG_GRPC_XDS_SERVER_TLS_SAN")));
}

/// The pauses before reconnecting, and the message size limit.
#[rustfmt::skip]
fn backoff(t: &mut Vec<S>) {
    t.push(S::new("xds.backoff_initial", "FLOODGATE_XDS_BACKOFF_INITIAL", "xds-backoff-initial", Kind::Duration, "10s",
        "the first and shortest pause before reconnecting to the xDS server",
        |s, v| { s.config.xds.backoff.initial = positive_duration(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")));
    t.push(S::new("xds.backoff_max", "FLOODGATE_XDS_BACKOFF_MAX", "xds-backoff-max", Kind::Duration, "60s",
        "the longest pause before reconnecting to the xDS server",
        |s, v| { s.config.xds.backoff.max = duration(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("XDS_CLIENT_BACKOFF_MAX_INTERVAL")));
    t.push(S::new("xds.backoff_factor", "FLOODGATE_XDS_BACKOFF_FACTOR", "xds-backoff-factor", Kind::Number, "0.5",
        "what each failed attempt multiplies the pause by (below 1, as by default, the pause stays at its initial value, as in envoyproxy/ratelimit)",
        |s, v| { s.config.xds.backoff.factor = number(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")));
    t.push(S::new("xds.backoff_jitter", "FLOODGATE_XDS_BACKOFF_JITTER", "xds-backoff-jitter", Kind::Bool, "true",
        "draw each pause at random between the initial and its computed value",
        |s, v| { s.config.xds.backoff.jitter = boolean(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::Var("XDS_CLIENT_BACKOFF_JITTER")));
    t.push(S::new("xds.max_message_size", "FLOODGATE_XDS_MAX_MESSAGE_SIZE", "xds-max-message-size", Kind::Size, "4MiB",
        "the largest message taken from the xDS server; a larger one ends the stream, the running configuration kept",
        |s, v| { s.config.xds.max_message_size = size(&v.text())?; Ok(()) })
        .in_file(InFile::No).envoy(Envoy::NonZero("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")));
}

/// A number above zero.
fn number(v: &str) -> Result<f64, String> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| format!("expected a number above zero, found `{}`", v.trim()))
}
