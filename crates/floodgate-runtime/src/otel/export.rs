//! The OTLP exporter, its batches and the sampler: what turns finished
//! spans into requests to a collector.

use std::collections::HashMap;
use std::path::Path;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tonic::metadata::MetadataMap;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::http_client::CollectorClient;
use super::queue::{Bounded, Pending};
use crate::error::RuntimeError;
use crate::settings::{OtlpProtocol, TracingSettings};
use crate::tls::{ClientFiles, client_config};

/// Spans per export request.
const BATCH: usize = 512;

/// The runtime of the gRPC exporter's connection: one thread of its own.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, RuntimeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floodgate-otlp")
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::Runtime(format!("tracing: {e}")))
}

/// The provider exporting as `s` says: parent-based sampling at the
/// ratio, batches of at most [`BATCH`] from a queue of `s.queue_size`.
pub(super) fn provider(
    s: &TracingSettings,
    runtime: &tokio::runtime::Runtime,
) -> Result<SdkTracerProvider, RuntimeError> {
    let pending = Pending::new(s.queue_size);
    let exporter = exporter(s, runtime)?;
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(s.queue_size)
        .with_max_export_batch_size(BATCH.min(s.queue_size))
        .with_scheduled_delay(s.export_interval)
        .build();
    let batches = BatchSpanProcessor::builder(pending.exporter(exporter))
        .with_batch_config(config)
        .build();
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(s.sampling_ratio)));
    Ok(SdkTracerProvider::builder()
        .with_span_processor(Bounded::new(batches, pending))
        .with_sampler(sampler)
        .with_resource(resource(s))
        .build())
}

/// The OTLP exporter of `s.protocol` to `s.endpoint` (the protocol's
/// default when empty), with `s.headers` and `s.timeout`, over TLS for an
/// `https://` endpoint; gRPC's connection lives on `runtime`.
fn exporter(
    s: &TracingSettings,
    runtime: &tokio::runtime::Runtime,
) -> Result<SpanExporter, RuntimeError> {
    let fail = |e: opentelemetry_otlp::ExporterBuildError| {
        RuntimeError::Runtime(format!("tracing: the OTLP exporter: {e}"))
    };
    let base = |default: &str| {
        let given = s.endpoint.trim_end_matches('/');
        if given.is_empty() {
            default.to_owned()
        } else {
            given.to_owned()
        }
    };
    match s.protocol {
        OtlpProtocol::Grpc => {
            let _entered = runtime.enter();
            let endpoint = base("http://localhost:4317");
            let mut builder = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&endpoint)
                .with_timeout(s.timeout)
                .with_metadata(metadata(&s.headers));
            if is_https(&endpoint) {
                builder = builder.with_tls_config(grpc_tls(s)?);
            }
            builder.build().map_err(fail)
        }
        OtlpProtocol::Http => {
            let endpoint = base("http://localhost:4318");
            let tls = if is_https(&endpoint) {
                rustls_config(s)?
            } else {
                no_tls()
            };
            let client = CollectorClient::new(tls, runtime.handle().clone(), s.timeout);
            SpanExporter::builder()
                .with_http()
                .with_endpoint(format!("{endpoint}/v1/traces"))
                .with_timeout(s.timeout)
                .with_headers(s.headers.iter().cloned().collect::<HashMap<_, _>>())
                .with_http_client(client)
                .build()
                .map_err(fail)
        }
    }
}

fn is_https(endpoint: &str) -> bool {
    endpoint
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

/// The collector's TLS as rustls sees it: the CA (or the system's roots)
/// and the client certificate, every file read and checked now.
fn rustls_config(s: &TracingSettings) -> Result<rustls::ClientConfig, RuntimeError> {
    let files = ClientFiles {
        ca: path(&s.tls_ca),
        cert: path(&s.tls_cert),
        key: path(&s.tls_key),
    };
    client_config(files, "server.tracing.tls_ca")
        .map_err(|e| RuntimeError::Runtime(format!("tracing: the collector's TLS: {e}")))
}

/// A file setting's path (none when blank).
fn path(p: &str) -> Option<&Path> {
    (!p.is_empty()).then(|| Path::new(p))
}

/// A configuration that trusts no one, for a client that speaks plain
/// HTTP only.
fn no_tls() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// The gRPC exporter's TLS, from the files [`rustls_config`] checked.
fn grpc_tls(s: &TracingSettings) -> Result<ClientTlsConfig, RuntimeError> {
    rustls_config(s)?;
    let read =
        |p: &str| std::fs::read(p).map_err(|e| RuntimeError::Runtime(format!("tracing: {p}: {e}")));
    let mut tls = ClientTlsConfig::new();
    tls = if s.tls_ca.is_empty() {
        tls.with_native_roots()
    } else {
        tls.ca_certificate(Certificate::from_pem(read(&s.tls_ca)?))
    };
    if !s.tls_cert.is_empty() {
        tls = tls.identity(Identity::from_pem(read(&s.tls_cert)?, read(&s.tls_key)?));
    }
    Ok(tls)
}

/// `headers` as gRPC metadata (checked as header names and values when
/// read).
fn metadata(headers: &[(String, String)]) -> MetadataMap {
    let map: http::HeaderMap = headers
        .iter()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
        .collect();
    MetadataMap::from_headers(map)
}

/// `service.name`, `service.namespace` (when given) and
/// `service.instance.id` (a random UUID when not given).
fn resource(s: &TracingSettings) -> Resource {
    let instance = if s.service_instance_id.is_empty() {
        random_uuid()
    } else {
        s.service_instance_id.clone()
    };
    let mut attributes = vec![KeyValue::new("service.instance.id", instance)];
    if !s.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            s.service_namespace.clone(),
        ));
    }
    Resource::builder_empty()
        .with_service_name(s.service_name.clone())
        .with_attributes(attributes)
        .build()
}

/// A version 4 UUID, as envoyproxy/ratelimit names an instance.
fn random_uuid() -> String {
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
    let mut b = RandomIdGenerator::default().new_trace_id().to_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
