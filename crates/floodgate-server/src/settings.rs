//! The service's own settings: its listeners (gRPC, HTTP) and their TLS,
//! what a request may be, the calls in flight, the rate limit headers.
//! They are keys of the `server:` section (`server.grpc`, ...), with the
//! variables and flags `floodgate serve` always had, declared here once
//! each and read as every setting is
//! ([`table`](mod@floodgate_runtime::settings::table)); the host reads
//! the rest of the section, shared with the gateway.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use floodgate_policy::engine::{Honour, RequestLimits};
use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::Document;
use floodgate_runtime::Settings;
use floodgate_runtime::settings::listener::{
    self, ConnectionsAt, ProtectionsInstance, TlsAt, TlsInstance, TlsSettings,
};
use floodgate_runtime::settings::table::{
    self, Declared, Env, Envoy, EnvoyRead, Flags, InFile, Kind,
};
use floodgate_runtime::settings::{
    ANY, boolean, choice, count_in, duration, parse_listen_on, positive_duration, size,
};

/// The service's settings (`Default`: every setting at its declared
/// default).
#[derive(Clone, Debug, PartialEq)]
pub struct RlsSettings {
    /// The gRPC listener (Envoy RLS v3, health, reflection).
    pub grpc: Option<SocketAddr>,
    /// The gRPC listener's Unix socket, instead of `grpc` (as
    /// envoyproxy/ratelimit's `GRPC_UDS`).
    pub grpc_uds: Option<PathBuf>,
    /// The HTTP listener (`/json`, `/v1/check`, `/healthcheck`, `/ready`).
    pub http: Option<SocketAddr>,
    /// The age of a gRPC connection (give or take a tenth) at which it is
    /// asked to close, and the grace it then has (zero: never; zero grace:
    /// however long its calls take).
    pub grpc_max_connection_age: (Duration, Duration),
    /// Which HTTP/2 server serves the gRPC listener.
    pub grpc_http2: GrpcHttp2,
    /// TLS on the gRPC listener.
    pub grpc_tls: TlsSettings,
    /// TLS on the HTTP listener.
    pub http_tls: TlsSettings,
    /// Largest request body or gRPC message accepted, in bytes.
    pub body_limit: usize,
    /// The engine's bounds on a request: most descriptors, longest key or
    /// value, what a caller's per-request `limit` override does.
    pub request_limits: RequestLimits,
    /// Connections of each listener at once (`None`: 10 000, or what the
    /// open files limit leaves room for).
    pub max_connections: Option<usize>,
    /// Calls in flight at once, over every connection; beyond, a call is
    /// refused at once (`RESOURCE_EXHAUSTED`, 503).
    pub max_requests: usize,
    /// The longest a call may take — its body read, its decision — when
    /// the caller sets no shorter deadline (`DEADLINE_EXCEEDED`, 504).
    pub request_timeout: Duration,
    /// Rate limit headers added to responses.
    pub headers: HeaderSettings,
    /// What a shaper's delay becomes over RLS (`ShouldRateLimit`, `/json`),
    /// whose callers cannot hold a request.
    pub rls_delayed: RlsDelayed,
    /// The rate limit quota service's assignments and bounds.
    pub rlqs: crate::RlqsSettings,
}

/// Which HTTP/2 server serves the gRPC listener (`server.grpc_http2`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GrpcHttp2 {
    /// hyper's, with tonic's services: every method, streaming ones
    /// included (RLQS, reflection, health's `Watch`).
    #[default]
    Hyper,
    /// The service's own: unary calls only, `ShouldRateLimit` with no
    /// per-call allocation in memory and each wake-up's answers written
    /// at once; streaming methods answered `UNIMPLEMENTED`.
    Direct,
}

/// What a shaper's delayed decision becomes over RLS
/// (`server.rls_delayed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RlsDelayed {
    /// `OVER_LIMIT`, its reset the delay, nothing charged: the request
    /// sent again after the delay is admitted.
    #[default]
    OverLimit,
    /// `OK` at once, charged, the delay carried in the answer's
    /// `dynamic_metadata` (`delay_ms`) for the caller to honour.
    Ok,
}

/// Which rate limit headers responses carry (gRPC
/// `response_headers_to_add`, and HTTP response headers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

impl Default for RlsSettings {
    fn default() -> Self {
        RlsSettings::defaults()
    }
}

impl RlsSettings {
    /// Reads the service's settings from `flags`, `env` and the `server:`
    /// section of `documents` (the host's keys there left to it). Every
    /// problem is reported, each where its value came from.
    pub fn resolve(
        flags: &Flags,
        env: &Env<'_>,
        documents: &[Document],
    ) -> Result<RlsSettings, ConfigErrors> {
        let mut errors = Errors::default();
        let read = table::read::<RlsSettings>(flags, env, documents, &HOST_KEYS, &mut errors);
        let settings = read.map_or_else(RlsSettings::blank, |(mut settings, origins)| {
            listener::finish_tls(&mut settings.grpc_tls, &GRPC_TLS, &origins, &mut errors);
            let uds = origins.of("server.grpc_uds");
            settings.grpc_uds =
                (settings.grpc_uds.as_deref()).map(|p| listener::relative_to_origin(p, &uds));
            listener::finish_tls(&mut settings.http_tls, &HTTP_TLS, &origins, &mut errors);
            settings
        });
        errors.finish(settings)
    }

    /// The keys of the files it reads (in the host's `server:` section),
    /// for [`Frontend::sections`](floodgate_runtime::host::Frontend::sections).
    pub fn keys() -> Vec<&'static str> {
        let table = RlsSettings::table().iter();
        table
            .filter(|s| s.in_file == InFile::Yes)
            .map(|s| s.key)
            .collect()
    }
}

/// The keys the host reads in the sections the service shares with it.
static HOST_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let table = Settings::table().iter();
    table
        .filter(|s| s.in_file == InFile::Yes)
        .map(|s| s.key)
        .collect()
});

impl Declared for RlsSettings {
    fn table() -> &'static [table::Setting<Self>] {
        static TABLE: LazyLock<Vec<S>> = LazyLock::new(|| {
            let mut t = Vec::new();
            listeners(&mut t);
            requests(&mut t);
            headers(&mut t);
            rls(&mut t);
            rlqs(&mut t);
            t
        });
        &TABLE
    }

    fn blank() -> Self {
        RlsSettings {
            grpc: None,
            grpc_uds: None,
            http: None,
            grpc_max_connection_age: (Duration::ZERO, Duration::ZERO),
            grpc_http2: GrpcHttp2::default(),
            grpc_tls: TlsSettings::default(),
            http_tls: TlsSettings::default(),
            body_limit: 0,
            request_limits: RequestLimits::default(),
            max_connections: None,
            max_requests: 0,
            request_timeout: Duration::ZERO,
            headers: HeaderSettings::default(),
            rls_delayed: RlsDelayed::default(),
            rlqs: crate::RlqsSettings {
                assignment_ttl: Duration::ZERO,
                max_buckets: 0,
                max_buckets_per_stream: 0,
            },
        }
    }
}

type S = table::Setting<RlsSettings>;

/// Where each listener keeps its TLS.
struct GrpcTls;
struct HttpTls;

impl TlsAt<RlsSettings> for GrpcTls {
    fn tls(s: &mut RlsSettings) -> &mut TlsSettings {
        &mut s.grpc_tls
    }
}

impl TlsAt<RlsSettings> for HttpTls {
    fn tls(s: &mut RlsSettings) -> &mut TlsSettings {
        &mut s.http_tls
    }
}

impl ConnectionsAt<RlsSettings> for RlsSettings {
    fn max_connections(s: &mut RlsSettings) -> &mut Option<usize> {
        &mut s.max_connections
    }
}

/// `server.limits`: the host declares the connections' protections, the
/// service the cap on its listeners' connections.
const PROTECTIONS: ProtectionsInstance = ProtectionsInstance {
    key: "server.limits",
    env: "FLOODGATE_",
    flag: "",
    max_concurrent_streams: "1024",
    http2_idle_timeout: "30s",
};

/// envoyproxy/ratelimit's TLS file `name`, read with `GRPC_SERVER_USE_TLS`
/// on (and then `required`).
fn envoy_tls(env: &Env<'_>, name: &'static str, required: bool) -> EnvoyRead {
    const USE: &str = "GRPC_SERVER_USE_TLS";
    match env
        .get(USE)
        .map(|v| boolean(&v))
        .transpose()
        .map_err(|m| (USE, m))?
    {
        Some(true) if required && env.get(name).is_none() => {
            Err((USE, format!("{USE} needs {name}")))
        }
        Some(true) => Ok(env.get(name).map(|v| (name, v))),
        _ => Ok(None),
    }
}

const GRPC_TLS: TlsInstance = TlsInstance {
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

const HTTP_TLS: TlsInstance = TlsInstance {
    key: "server.tls.http",
    env: "FLOODGATE_HTTP_TLS",
    flag: "http-tls",
    listener: "the HTTP listener",
    envoy: None,
};

fn header_name(v: &table::Value) -> Result<String, String> {
    let t = v.text();
    http::HeaderName::from_bytes(t.as_bytes())
        .map(|_| t.clone())
        .map_err(|_| format!("`{t}` is not a valid header name"))
}

// One setting in a few lines each: tables, laid out by hand, one per topic.

/// The listeners: their addresses and TLS.
#[rustfmt::skip]
fn listeners(t: &mut Vec<S>) {
    // envoyproxy/ratelimit's ports: 8081 (gRPC), 8080 (HTTP).
    t.push(S::new("server.grpc", "FLOODGATE_GRPC_ADDR", "grpc-addr", Kind::Addr, "0.0.0.0:8081",
        "gRPC listener (`host:port`, `:port` or a port on all interfaces, or `off`)",
        |s, v| { s.grpc = parse_listen_on(&v.text(), ANY)?; Ok(()) })
        .envoy(Envoy::HostPort("GRPC_HOST", "GRPC_PORT", 8081)));
    t.push(S::new("server.http", "FLOODGATE_HTTP_ADDR", "http-addr", Kind::Addr, "0.0.0.0:8080",
        "HTTP listener (as `grpc`)",
        |s, v| { s.http = parse_listen_on(&v.text(), ANY)?; Ok(()) })
        .envoy(Envoy::HostPort("HOST", "PORT", 8080)));
    t.push(S::new("server.grpc_uds", "FLOODGATE_GRPC_UDS", "grpc-uds", Kind::Text, "",
        "a Unix socket path the gRPC listener listens on instead of `grpc` (as envoyproxy/ratelimit's `GRPC_UDS`); a file already there is an error, unless it is a socket nobody listens on (removed at shutdown)",
        |s, v| { s.grpc_uds = Some(socket_path(v)?); Ok(()) })
        .envoy(Envoy::Var("GRPC_UDS")));
    t.push(S::new("server.grpc_max_connection_age", "FLOODGATE_GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age", Kind::Duration, "24h",
        "a gRPC connection this old (give or take a tenth) is asked to close (`GOAWAY`): its calls complete, its client reconnects, reaching instances added since; `0`: never",
        |s, v| { s.grpc_max_connection_age.0 = duration(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("GRPC_MAX_CONNECTION_AGE")));
    t.push(S::new("server.grpc_max_connection_age_grace", "FLOODGATE_GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace", Kind::Duration, "1h",
        "how long a gRPC connection asked to close for its age has to finish its calls before it is closed; `0`: however long they take",
        |s, v| { s.grpc_max_connection_age.1 = duration(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("GRPC_MAX_CONNECTION_AGE_GRACE")));
    t.push(S::new("server.grpc_http2", "FLOODGATE_GRPC_HTTP2", "grpc-http2", Kind::Choice, "hyper",
        "the gRPC listener's HTTP/2 server: `hyper` (every method, streaming ones included: RLQS, reflection, health's `Watch`) or `direct` (the service's own, unary calls only: `ShouldRateLimit` and health's `Check` at a lower cost per call; streaming methods answered `UNIMPLEMENTED`)",
        |s, v| {
            s.grpc_http2 = choice(&v.text(), &[
                (&["hyper"], GrpcHttp2::Hyper),
                (&["direct"], GrpcHttp2::Direct),
            ])?;
            Ok(())
        })
        .samples("direct", "hyper"));
    listener::declare_tls::<_, GrpcTls>(t, &GRPC_TLS);
    listener::declare_client_san::<_, GrpcTls>(t, &GRPC_TLS, Some(Envoy::Read {
        names: "`GRPC_CLIENT_TLS_SAN` (with `GRPC_SERVER_USE_TLS`)",
        read: |env| envoy_tls(env, "GRPC_CLIENT_TLS_SAN", false),
    }));
    listener::declare_tls::<_, HttpTls>(t, &HTTP_TLS);
}

fn socket_path(v: &table::Value) -> Result<PathBuf, String> {
    let t = v.text();
    if t.trim().is_empty() {
        return Err("expected a socket path".into());
    }
    Ok(PathBuf::from(t.trim()))
}

/// What a request may be and take: its size, its descriptors, its
/// caller's overrides, the connections and calls at once.
/// What is done with a caller's request to change what it is charged:
/// `allow`, `ignore` or `refuse`.
fn honour(text: &str) -> Result<Honour, String> {
    choice(
        text,
        &[
            (&["allow"], Honour::Allow),
            (&["ignore"], Honour::Ignore),
            (&["refuse"], Honour::Refuse),
        ],
    )
}

#[rustfmt::skip]
fn requests(t: &mut Vec<S>) {
    t.push(S::new("server.body_limit", "FLOODGATE_BODY_LIMIT", "body-limit", Kind::Size, "1MiB",
        "largest HTTP body or gRPC message",
        |s, v| { s.body_limit = size(&v.text())?; Ok(()) }));
    t.push(S::new("server.max_descriptors", "FLOODGATE_MAX_DESCRIPTORS", "max-descriptors", Kind::Count, "256",
        "most descriptors in a request",
        |s, v| { s.request_limits.max_descriptors = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
    t.push(S::new("server.max_value_bytes", "FLOODGATE_MAX_VALUE_BYTES", "max-value-bytes", Kind::Size, "16KiB",
        "longest descriptor key or value",
        |s, v| { s.request_limits.max_entry_bytes = size(&v.text())?; Ok(()) }));
    t.push(S::new("server.limit_overrides", "FLOODGATE_LIMIT_OVERRIDES", "limit-overrides", Kind::Choice, "allow",
        "a caller's per-request `limit` override: `allow` (replaces the configured limit, as Envoy's API and envoyproxy/ratelimit do: any caller can lift its limit), `ignore` or `refuse` (400 / `INVALID_ARGUMENT`)",
        |s, v| { s.request_limits.overrides = honour(&v.text())?; Ok(()) })
        .samples("ignore", "refuse"));
    t.push(S::new("server.negative_hits", "FLOODGATE_NEGATIVE_HITS", "negative-hits", Kind::Choice, "allow",
        "a descriptor's `is_negative_hits` (its hits given back): `allow` (the counters fall by them, as Envoy's API and envoyproxy/ratelimit do: any caller can free units of a counter it shares with others), `ignore` (nothing given back, answered OK) or `refuse` (400 / `INVALID_ARGUMENT`)",
        |s, v| { s.request_limits.negative_hits = honour(&v.text())?; Ok(()) })
        .samples("ignore", "refuse"));
    listener::declare_max_connections::<_, RlsSettings>(t, &PROTECTIONS);
    t.push(S::new("server.limits.max_requests", "FLOODGATE_MAX_REQUESTS", "max-requests", Kind::Count, "10000",
        "calls in flight over every connection, answers not yet sent included (beyond: `RESOURCE_EXHAUSTED`, 503, at once)",
        |s, v| { s.max_requests = count_in(&v.text(), 1, 10_000_000)?; Ok(()) }));
    t.push(S::new("server.limits.request_timeout", "FLOODGATE_REQUEST_TIMEOUT", "request-timeout", Kind::Duration, "10s",
        "longest a call may take, body included, when the caller sets no shorter `grpc-timeout` (`DEADLINE_EXCEEDED`, 504)",
        |s, v| { s.request_timeout = positive_duration(&v.text())?; Ok(()) }));
}

/// The rate limit headers of answers.
#[rustfmt::skip]
fn headers(t: &mut Vec<S>) {
    t.push(S::new("server.response_headers.enabled", "FLOODGATE_RESPONSE_HEADERS", "response-headers", Kind::Bool, "false",
        "add `RateLimit-Limit`, `-Remaining`, `-Reset` of the most restrictive descriptor",
        |s, v| { s.headers.enabled = boolean(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_RESPONSE_HEADERS_ENABLED")));
    t.push(S::new("server.response_headers.limit", "FLOODGATE_LIMIT_HEADER", "limit-header", Kind::Text, "RateLimit-Limit",
        "name of the limit header",
        |s, v| { s.headers.limit = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_LIMIT_HEADER"))
        .samples("X-Limit", "X-Quota"));
    t.push(S::new("server.response_headers.remaining", "FLOODGATE_REMAINING_HEADER", "remaining-header", Kind::Text, "RateLimit-Remaining",
        "name of the remaining header",
        |s, v| { s.headers.remaining = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_REMAINING_HEADER"))
        .samples("X-Left", "X-Rest"));
    t.push(S::new("server.response_headers.reset", "FLOODGATE_RESET_HEADER", "reset-header", Kind::Text, "RateLimit-Reset",
        "name of the reset header",
        |s, v| { s.headers.reset = header_name(v)?; Ok(()) })
        .envoy(Envoy::Var("LIMIT_RESET_HEADER"))
        .samples("X-Reset", "X-Again"));
    t.push(S::new("server.response_headers.x_ratelimit", "FLOODGATE_X_RATELIMIT_HEADERS", "x-ratelimit-headers", Kind::Bool, "false",
        "add Envoy's `DRAFT_VERSION_03` `X-RateLimit-*` headers",
        |s, v| { s.headers.x_ratelimit = boolean(&v.text())?; Ok(()) }));
}

/// What RLS callers (`ShouldRateLimit`, `/json`) are told of a shaper's
/// delay, which they cannot wait out.
#[rustfmt::skip]
fn rls(t: &mut Vec<S>) {
    t.push(S::new("server.rls_delayed", "FLOODGATE_RLS_DELAYED", "rls-delayed", Kind::Choice, "over_limit",
        "what a shaper's delay becomes over RLS (`ShouldRateLimit`, `/json`): `over_limit` (refused, its reset the delay, nothing charged: sent again after it, the request passes) or `ok` (admitted at once and charged, as with `nodelay`; the delay in `dynamic_metadata` as `delay_ms`)",
        |s, v| {
            s.rls_delayed = choice(&v.text(), &[
                (&["over_limit"], RlsDelayed::OverLimit),
                (&["ok"], RlsDelayed::Ok),
            ])?;
            Ok(())
        })
        .samples("ok", "over_limit"));
}

/// The rate limit quota service (RLQS): its assignments' time to live and
/// the buckets it holds.
#[rustfmt::skip]
fn rlqs(t: &mut Vec<S>) {
    t.push(S::new("server.rlqs.assignment_ttl", "FLOODGATE_RLQS_ASSIGNMENT_TTL", "rlqs-assignment-ttl", Kind::Duration, "10s",
        "how long an RLQS assignment holds (set it to two of Envoy's `reporting_interval`); a stream that has not reported a bucket for as long no longer shares its limit",
        |s, v| { s.rlqs.assignment_ttl = positive_duration(&v.text())?; Ok(()) }));
    t.push(S::new("server.rlqs.max_buckets", "FLOODGATE_RLQS_MAX_BUCKETS", "rlqs-max-buckets", Kind::Count, "100000",
        "most RLQS buckets held at once over every stream (beyond: the stream reporting a new one ends `RESOURCE_EXHAUSTED`)",
        |s, v| { s.rlqs.max_buckets = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
    t.push(S::new("server.rlqs.max_buckets_per_stream", "FLOODGATE_RLQS_MAX_BUCKETS_PER_STREAM", "rlqs-max-buckets-per-stream", Kind::Count, "1000",
        "most RLQS buckets one stream may report (beyond: it ends `RESOURCE_EXHAUSTED`)",
        |s, v| { s.rlqs.max_buckets_per_stream = count_in(&v.text(), 1, usize::MAX)?; Ok(()) }));
}
