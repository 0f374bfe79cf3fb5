//! One xDS stream: the request naming the node and the type, then for each
//! response its resources read, compiled and applied, and the answer: an
//! ACK (the response's version and nonce), or a NACK (the version still
//! held, the response's nonce and the error) for a response refused, the
//! running configuration kept.

use std::sync::Arc;

use futures_util::StreamExt;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Request;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::Channel;

use super::{Source, TYPE_URL};
use crate::host::proto::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::host::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use crate::host::proto::envoy::config::core::v3::Node;
use crate::host::proto::google::rpc::Status;
use crate::host::proto::rls_config::RateLimitConfig;

/// What a client keeps from stream to stream: the last version applied,
/// sent again when a new stream starts (as envoyproxy/ratelimit's client
/// does).
#[derive(Default)]
pub(super) struct Held {
    version: String,
    nonce: String,
}

/// Streams from `channel` until the stream ends (its error), applying
/// what the server sends through `source`; `answered` is told of each
/// response.
pub(super) async fn run(
    source: &Arc<Source>,
    channel: Channel,
    held: &mut Held,
    mut answered: impl FnMut(),
) -> Result<(), tonic::Status> {
    let node = node(source);
    let (requests, outbound) = mpsc::channel(4);
    let _ = requests.try_send(request(&node, held, None));
    let outbound = futures_util::stream::unfold(outbound, |mut rx| async {
        rx.recv().await.map(|r| (r, rx))
    });
    let mut call = Request::new(outbound);
    for (name, value) in &source.settings.headers {
        if let (Ok(k), Ok(v)) = (
            name.parse::<MetadataKey<_>>(),
            MetadataValue::try_from(value),
        ) {
            call.metadata_mut().insert(k, v);
        }
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(source.settings.max_message_size);
    let mut responses = client.stream_aggregated_resources(call).await?.into_inner();
    // Versions are compared within one stream only: a server that restarts
    // may count its versions from 1 again.
    let mut applied_here: Option<u64> = None;
    while let Some(response) = responses.next().await.transpose()? {
        answered();
        held.nonce.clone_from(&response.nonce);
        let error = match refused_as_older(&response, applied_here) {
            Some(e) => {
                source.count(&response.version_info, &Err(e.clone()));
                Some(e)
            }
            None => source.apply(&response).await.err(),
        };
        if error.is_none() {
            held.version.clone_from(&response.version_info);
            applied_here = response.version_info.parse().ok();
        }
        if requests.send(request(&node, held, error)).await.is_err() {
            break;
        }
    }
    Err(tonic::Status::unavailable(
        "the xDS server ended the stream",
    ))
}

/// A response whose version is older than the one applied on this stream
/// (both numbers: versions are opaque to xDS; Envoy Gateway's count up
/// from 1): refused.
fn refused_as_older(response: &DiscoveryResponse, applied_here: Option<u64>) -> Option<String> {
    let version: u64 = response.version_info.parse().ok()?;
    let held = applied_here?;
    (version < held)
        .then(|| format!("version {version} is older than the version held ({held}); not applied"))
}

/// The client's node: its id and metadata.
fn node(source: &Source) -> Node {
    let fields = source.settings.node_metadata.iter().map(|(k, v)| {
        let value = prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue(v.clone())),
        };
        (k.clone(), value)
    });
    Node {
        id: source.settings.node_id.clone(),
        metadata: Some(prost_types::Struct {
            fields: fields.collect(),
        }),
        user_agent_name: "floodgate".into(),
        ..Node::default()
    }
}

/// The request that subscribes, ACKs (no `error`) or NACKs.
fn request(node: &Node, held: &Held, error: Option<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: held.version.clone(),
        node: Some(node.clone()),
        resource_names: Vec::new(),
        type_url: TYPE_URL.into(),
        response_nonce: held.nonce.clone(),
        // The message alone, as envoyproxy/ratelimit NACKs.
        error_detail: error.map(|message| Status {
            message,
            ..Status::default()
        }),
    }
}

/// Each resource of `response` decoded, named (`xds:<name>`) and written
/// out as an envoyproxy/ratelimit file; or why one cannot be.
pub(super) fn texts(response: &DiscoveryResponse) -> Result<Vec<(String, String)>, String> {
    response
        .resources
        .iter()
        .map(|any| {
            if any.type_url != TYPE_URL {
                return Err(format!(
                    "resource of type `{}`, expected `{TYPE_URL}`",
                    any.type_url
                ));
            }
            let config = RateLimitConfig::decode(any.value.as_slice())
                .map_err(|e| format!("resource cannot be decoded: {e}"))?;
            Ok((
                format!("xds:{}", config.name),
                super::convert::to_text(&config),
            ))
        })
        .collect()
}
