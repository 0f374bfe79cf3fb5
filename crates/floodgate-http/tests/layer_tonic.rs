//! The layer under tonic: a real tonic server (the gRPC health service)
//! behind `FloodgateLayer`, called by a real tonic client over HTTP/2.
//! Admitted calls carry the rate-limit headers in their response
//! metadata; a denied call is a trailers-only gRPC answer with
//! `RESOURCE_EXHAUSTED` (or `UNAVAILABLE` for a rule answering 503); a
//! streaming call holds its concurrency unit until the stream ends.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use floodgate::SystemClock;
use support::{engine_with, layer_for};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

const CONFIG: &str = r#"
domains:
  - domain: grpc
    descriptors:
      - key: user
        rate_limit: {name: per-user, algorithm: sliding_log, requests: 2, per: 1m}
      - key: user
        value: batch
        rate_limit: {name: batch, algorithm: sliding_log, requests: 1, per: 1m}
      - key: user
        value: streamer
        rate_limit: {name: streams, algorithm: concurrency, max: 1}
http:
  domain: grpc
  descriptors:
    - [{header: {name: x-user, key: user}}]
  responses:
    rules:
      batch: {status: 503}
"#;

/// The health service behind the layer, on an ephemeral port.
async fn server() -> SocketAddr {
    let layer = layer_for(engine_with(CONFIG, SystemClock), CONFIG);
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    std::mem::forget(reporter);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

async fn connect(addr: SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn check(user: &str) -> Request<HealthCheckRequest> {
    let mut req = Request::new(HealthCheckRequest {
        service: String::new(),
    });
    req.metadata_mut().insert("x-user", user.parse().unwrap());
    req
}

fn meta<'a>(status: &'a Status, key: &str) -> Option<&'a str> {
    status.metadata().get(key).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_calls_carry_headers_and_denied_ones_are_resource_exhausted() {
    let addr = server().await;
    let mut client = connect(addr).await;
    for i in 0..2 {
        let res = client.check(check("alice")).await.unwrap();
        assert_eq!(res.get_ref().status(), ServingStatus::Serving, "#{i}");
        let m = res.metadata();
        assert_eq!(m.get("ratelimit-policy").unwrap(), r#""per-user";q=2;w=60"#);
        let current = m.get("ratelimit").unwrap().to_str().unwrap();
        assert!(
            current.starts_with(&format!(r#""per-user";r={};t="#, 1 - i)),
            "{current}"
        );
    }
    let denied = client.check(check("alice")).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    assert!(
        denied
            .message()
            .contains("Rate limit exceeded for policy \"per-user\""),
        "{denied:?}"
    );
    assert!(meta(&denied, "retry-after").is_some(), "{denied:?}");
    assert!(
        meta(&denied, "ratelimit").is_some_and(|v| v.starts_with(r#""per-user";r=0;t="#)),
        "{denied:?}"
    );
    // The same connection goes on serving other users.
    let res = client.check(check("bob")).await.unwrap();
    assert_eq!(res.get_ref().status(), ServingStatus::Serving);
    // A rule answering 503 is UNAVAILABLE in gRPC.
    client.check(check("batch")).await.unwrap();
    let shed = client.check(check("batch")).await.unwrap_err();
    assert_eq!(shed.code(), Code::Unavailable, "{shed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_holds_its_concurrency_unit_until_it_ends() {
    let addr = server().await;
    let mut client = connect(addr).await;
    let watch = |user: &str| {
        let mut req = Request::new(HealthCheckRequest {
            service: String::new(),
        });
        req.metadata_mut().insert("x-user", user.parse().unwrap());
        req
    };
    let mut stream = client.watch(watch("streamer")).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    // The unit is held while the response stream is open.
    let busy = client.watch(watch("streamer")).await.unwrap_err();
    assert_eq!(busy.code(), Code::ResourceExhausted, "{busy:?}");
    assert!(
        meta(&busy, "ratelimit").is_some_and(|v| v.starts_with(r#""streams";r=0"#)),
        "{busy:?}"
    );
    // Cancelling the stream gives it back.
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match client.watch(watch("streamer")).await {
            Ok(_) => break,
            Err(s) if s.code() == Code::ResourceExhausted && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(s) => panic!("the unit was not released: {s:?}"),
        }
    }
}

/// The layer reads the client address from tonic's connection info.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_comes_from_tonic_connection_info() {
    let text = r#"
domains:
  - domain: grpc
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: sliding_log, requests: 1, per: 1m}
http:
  domain: grpc
  descriptors:
    - [client_ip]
"#;
    let identity = floodgate_http::HttpIdentity::from_yaml_str("t.yaml", text).unwrap();
    let settings = floodgate_http::layer::LayerSettings {
        peer: |e| {
            e.get::<TcpConnectInfo>()
                .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
        },
        ..Default::default()
    };
    let layer = floodgate_http::FloodgateLayer::with(
        engine_with(text, SystemClock),
        identity,
        floodgate_http::Contract::default(),
        settings,
    );
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = connect(addr).await;
    let ok = client.check(check("x")).await.unwrap();
    assert_eq!(
        ok.metadata().get("ratelimit-policy").unwrap(),
        r#""per-ip";q=1;w=60"#
    );
    let denied = client.check(check("y")).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted);
}
