//! The `server.tracing` group: OpenTelemetry spans exported over OTLP
//! ([`crate::host::otel`]), with envoyproxy/ratelimit's `TRACING_*` variables and
//! the OpenTelemetry SDK's `OTEL_EXPORTER_OTLP_*` (the traces' own, then the
//! general ones).

use std::time::Duration;

use super::Settings;
use super::parse::{boolean, choice, count_in, pairs, positive_duration};
use super::table::{Env, Envoy, EnvoyRead, Kind, Setting};

type S = Setting<Settings>;

/// OpenTelemetry tracing (`Default`: blank, see
/// [`Settings::default`](super::Settings)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TracingSettings {
    /// Whether spans are made and exported at all (off: none is created).
    pub enabled: bool,
    /// The collector's base URL (empty: the protocol's default,
    /// `http://localhost:4318` over HTTP, `http://localhost:4317` over gRPC);
    /// over HTTP, spans go to its `/v1/traces`.
    pub endpoint: String,
    /// How spans are sent.
    pub protocol: OtlpProtocol,
    /// The share of traces started here that are kept (0 to 1); a caller's
    /// sampled or not sampled `traceparent` is followed.
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// `service.namespace` (empty: none).
    pub service_namespace: String,
    /// `service.instance.id` (empty: a random one at startup).
    pub service_instance_id: String,
    /// Most finished spans waiting for export; beyond, new ones are dropped
    /// (and counted).
    pub queue_size: usize,
    /// How often waiting spans are exported.
    pub export_interval: Duration,
    /// Headers (or gRPC metadata) sent with every export, e.g. a
    /// collector's API key.
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// The CA the collector's certificate is verified with, PEM (empty:
    /// the system's roots), for an `https://` endpoint.
    pub tls_ca: String,
    /// The client certificate shown to the collector (mTLS), PEM.
    pub tls_cert: String,
    /// The client certificate's key, PEM.
    pub tls_key: String,
}

/// OTLP's transports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`POST /v1/traces`), envoyproxy/ratelimit's default.
    #[default]
    Http,
    /// gRPC.
    Grpc,
}

/// A sampling ratio, as envoyproxy/ratelimit reads `TRACING_SAMPLING_RATE`:
/// a number, at least 1 keeping every trace, at most 0 none.
fn ratio(text: &str) -> Result<f64, String> {
    let r: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a number from 0 to 1, found `{}`", text.trim()))?;
    if r.is_nan() {
        return Err("expected a number from 0 to 1, found NaN".into());
    }
    Ok(r.clamp(0.0, 1.0))
}

/// `grpc` or `http` (envoyproxy/ratelimit's empty value: `http`).
fn protocol(text: &str) -> Result<OtlpProtocol, String> {
    let p = text.trim().to_ascii_lowercase();
    choice(
        &p,
        &[
            (&["http", ""], OtlpProtocol::Http),
            (&["grpc"], OtlpProtocol::Grpc),
        ],
    )
}

/// Headers `name=value`, values percent-encoded (OpenTelemetry's
/// `OTEL_EXPORTER_OTLP_HEADERS`), each a valid HTTP header.
fn headers(items: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = pairs(items, '=')?;
    for (name, value) in &mut out {
        let decoded = percent_encoding::percent_decode_str(value).decode_utf8();
        *value = decoded
            .map_err(|_| format!("header `{name}`: not UTF-8 once decoded"))?
            .into_owned();
        http::HeaderName::try_from(name.as_str())
            .map_err(|_| format!("`{name}` is not a header name"))?;
        http::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("header `{name}`: not a header value"))?;
    }
    Ok(out)
}

/// The traces' own OpenTelemetry variable `OTEL_EXPORTER_OTLP_TRACES_<name>`,
/// else the general `OTEL_EXPORTER_OTLP_<name>`, as the SDKs read them.
fn otlp(env: &Env<'_>, traces: &'static str, general: &'static str) -> EnvoyRead {
    let found = env.get(traces).map(|v| (traces, v));
    Ok(found.or_else(|| env.get(general).map(|v| (general, v))))
}

fn otlp_headers(env: &Env<'_>) -> EnvoyRead {
    otlp(
        env,
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    )
}

/// The timeout variables are milliseconds.
fn otlp_timeout(env: &Env<'_>) -> EnvoyRead {
    let found = otlp(
        env,
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    )?;
    let Some((var, ms)) = found else {
        return Ok(None);
    };
    let ms: u64 = ms
        .trim()
        .parse()
        .map_err(|_| (var, format!("expected milliseconds, found `{}`", ms.trim())))?;
    Ok(Some((var, format!("{ms}ms"))))
}

fn otlp_ca(env: &Env<'_>) -> EnvoyRead {
    otlp(
        env,
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    )
}

fn otlp_cert(env: &Env<'_>) -> EnvoyRead {
    otlp(
        env,
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    )
}

fn otlp_key(env: &Env<'_>) -> EnvoyRead {
    otlp(
        env,
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    )
}

/// Declares the `server.tracing` group.
#[rustfmt::skip]
pub(super) fn declare(t: &mut Vec<S>) {
    t.push(S::new("server.tracing.enabled", "FLOODGATE_TRACING", "tracing", Kind::Bool, "false",
        "export OpenTelemetry spans over OTLP (off: no span is made)",
        |s, v| { s.server.tracing.enabled = boolean(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("TRACING_ENABLED")));
    t.push(S::new("server.tracing.endpoint", "FLOODGATE_TRACING_ENDPOINT", "tracing-endpoint", Kind::Text, "",
        "the OTLP collector's base URL (empty: `http://localhost:4318` over HTTP, `http://localhost:4317` over gRPC; over HTTP spans go to its `/v1/traces`)",
        |s, v| { s.server.tracing.endpoint = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .samples("http://collector:4318", "http://127.0.0.1:4317"));
    t.push(S::new("server.tracing.protocol", "FLOODGATE_TRACING_PROTOCOL", "tracing-protocol", Kind::Choice, "http",
        "`http` (protobuf over HTTP) or `grpc`",
        |s, v| { s.server.tracing.protocol = protocol(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("TRACING_EXPORTER_PROTOCOL"))
        .samples("grpc", "http"));
    t.push(S::new("server.tracing.sampling_ratio", "FLOODGATE_TRACING_SAMPLING_RATIO", "tracing-sampling-ratio", Kind::Number, "1",
        "the share of traces started here that are kept (1: all, 0: none; above 1 or below 0: as 1 or 0); a caller's `traceparent` decides for its trace",
        |s, v| { s.server.tracing.sampling_ratio = ratio(&v.text())?; Ok(()) })
        .envoy(Envoy::Var("TRACING_SAMPLING_RATE"))
        .samples("0.01", "0.5"));
    t.push(S::new("server.tracing.service_name", "FLOODGATE_TRACING_SERVICE_NAME", "tracing-service-name", Kind::Text, "floodgate",
        "the spans' `service.name`",
        |s, v| { s.server.tracing.service_name = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Var("TRACING_SERVICE_NAME"))
        .samples("ratelimit", "edge"));
    t.push(S::new("server.tracing.service_namespace", "FLOODGATE_TRACING_SERVICE_NAMESPACE", "tracing-service-namespace", Kind::Text, "",
        "the spans' `service.namespace` (empty: none)",
        |s, v| { s.server.tracing.service_namespace = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Var("TRACING_SERVICE_NAMESPACE"))
        .samples("prod", "edge"));
    t.push(S::new("server.tracing.service_instance_id", "FLOODGATE_TRACING_SERVICE_INSTANCE_ID", "tracing-service-instance-id", Kind::Text, "",
        "the spans' `service.instance.id` (empty: a random UUID at startup)",
        |s, v| { s.server.tracing.service_instance_id = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Var("TRACING_SERVICE_INSTANCE_ID"))
        .samples("pod-1", "pod-2"));
    t.push(S::new("server.tracing.queue_size", "FLOODGATE_TRACING_QUEUE_SIZE", "tracing-queue-size", Kind::Count, "2048",
        "most finished spans waiting for export; beyond, new spans are dropped and counted (`floodgate_tracing_spans_dropped_total`)",
        |s, v| { s.server.tracing.queue_size = count_in(&v.text(), 1, 1 << 20)?; Ok(()) }));
    t.push(S::new("server.tracing.export_interval", "FLOODGATE_TRACING_EXPORT_INTERVAL", "tracing-export-interval", Kind::Duration, "5s",
        "how often waiting spans are sent (and sooner when a batch of 512 is ready)",
        |s, v| { s.server.tracing.export_interval = positive_duration(&v.text())?; Ok(()) }));
    collector(t);
}

/// How the collector is reached: headers, timeout, TLS.
#[rustfmt::skip]
fn collector(t: &mut Vec<S>) {
    t.push(S::new("server.tracing.headers", "FLOODGATE_TRACING_HEADERS", "tracing-header", Kind::List, "",
        "headers (gRPC metadata) sent with every export, `name=value` (value percent-encoded), repeatable or commas",
        |s, v| { s.server.tracing.headers = headers(v.items())?; Ok(()) })
        .envoy(Envoy::Read { names: "`OTEL_EXPORTER_OTLP_TRACES_HEADERS`/`OTEL_EXPORTER_OTLP_HEADERS`", read: otlp_headers })
        .samples("api-key=s3cret", "x-tenant=edge"));
    t.push(S::new("server.tracing.timeout", "FLOODGATE_TRACING_TIMEOUT", "tracing-timeout", Kind::Duration, "10s",
        "how long one export may take",
        |s, v| { s.server.tracing.timeout = positive_duration(&v.text())?; Ok(()) })
        .envoy(Envoy::Read { names: "`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`/`OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds)", read: otlp_timeout }));
    t.push(S::new("server.tracing.tls_ca", "FLOODGATE_TRACING_TLS_CA", "tracing-tls-ca", Kind::Text, "",
        "for an `https://` endpoint: the CA the collector's certificate is verified with, PEM (empty: the system's roots)",
        |s, v| { s.server.tracing.tls_ca = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Read { names: "`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`/`OTEL_EXPORTER_OTLP_CERTIFICATE`", read: otlp_ca }));
    t.push(S::new("server.tracing.tls_cert", "FLOODGATE_TRACING_TLS_CERT", "tracing-tls-cert", Kind::Text, "",
        "the client certificate shown to the collector (mTLS, with `tls_key`), PEM",
        |s, v| { s.server.tracing.tls_cert = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Read { names: "`OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE`/`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`", read: otlp_cert }));
    t.push(S::new("server.tracing.tls_key", "FLOODGATE_TRACING_TLS_KEY", "tracing-tls-key", Kind::Text, "",
        "the client certificate's key, PEM",
        |s, v| { s.server.tracing.tls_key = v.text().trim().to_owned(); Ok(()) })
        .envoy(Envoy::Read { names: "`OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY`/`OTEL_EXPORTER_OTLP_CLIENT_KEY`", read: otlp_key }));
}
