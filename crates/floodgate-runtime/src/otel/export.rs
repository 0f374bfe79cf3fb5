//! The OTLP exporter, its batches and the sampler: what turns finished
//! spans into requests to a collector.

use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};

use super::queue::{Bounded, Pending};
use crate::error::RuntimeError;
use crate::settings::{OtlpProtocol, TracingSettings};

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
/// default when empty); gRPC's connection lives on `runtime`.
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
            SpanExporter::builder()
                .with_tonic()
                .with_endpoint(base("http://localhost:4317"))
                .build()
                .map_err(fail)
        }
        OtlpProtocol::Http => SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{}/v1/traces", base("http://localhost:4318")))
            .build()
            .map_err(fail),
    }
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
