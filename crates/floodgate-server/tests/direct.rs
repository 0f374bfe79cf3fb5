//! The gRPC listener on the service's own HTTP/2 server
//! (`server.grpc_http2: direct`) against the same listener on hyper's:
//! the same calls get the same answers from tonic's client (decisions,
//! errors, health checks, unknown methods); streaming methods are refused
//! with a message naming the setting; grpcio calls over TLS.

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_server::proto::rls::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::tls::Pki;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::support::{Service, python, start};

const DIRECT: &str = "  grpc_http2: direct\n";

async fn channel(service: &Service) -> Channel {
    let url = format!("http://127.0.0.1:{}", service.grpc);
    Channel::from_shared(url).unwrap().connect().await.unwrap()
}

fn request(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    let entries = entries
        .iter()
        .map(|(k, v)| Entry {
            key: (*k).into(),
            value: (*v).into(),
        })
        .collect();
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: hits,
    }
}

/// A sequence of calls covering passes, refusals and errors, made on
/// both services in turn (so that both see the same window of the
/// fixed-window limit), each answer summed up as a line.
async fn answers(one: &Service, other: &Service) -> (Vec<String>, Vec<String>) {
    let mut a = RateLimitServiceClient::new(channel(one).await);
    let mut b = RateLimitServiceClient::new(channel(other).await);
    let mut calls = vec![request("api", &[("user", "a")], 60); 3];
    calls.push(request("api", &[("user", "b")], 0));
    calls.push(request("nope", &[("user", "a")], 0));
    calls.push(request("", &[], 0));
    calls.push(request("api", &[("", "x")], 0));
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    for call in calls {
        seen_a.push(summed_up(a.should_rate_limit(call.clone()).await));
        seen_b.push(summed_up(b.should_rate_limit(call).await));
    }
    (seen_a, seen_b)
}

fn summed_up(answer: Result<tonic::Response<RateLimitResponse>, tonic::Status>) -> String {
    match answer {
        Ok(r) => {
            let r = r.into_inner();
            let statuses: Vec<_> = r
                .statuses
                .iter()
                .map(|s| (s.code, s.limit_remaining))
                .collect();
            format!("{} {statuses:?}", r.overall_code)
        }
        Err(e) => format!("{:?} {}", e.code(), e.message()),
    }
}

/// What the health service says of `service_name`.
async fn health(service: &Service, name: &str) -> String {
    let mut client = HealthClient::new(channel(service).await);
    let asked = HealthCheckRequest {
        service: name.into(),
    };
    match client.check(asked).await {
        Ok(r) => format!("{:?}", r.into_inner().status),
        Err(e) => format!("{:?} {}", e.code(), e.message()),
    }
}

/// The `grpc-status` and `grpc-message` of a call of `path` with an
/// empty message, sent as raw HTTP/2.
async fn raw_call(service: &Service, path: &str) -> (String, String) {
    use tower_service::Service as _;
    let mut channel = channel(service).await;
    let uri = format!("http://127.0.0.1:{}{path}", service.grpc);
    let body = tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from_static(&[
        0, 0, 0, 0, 0,
    ])));
    let req = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .unwrap();
    let answer = channel.call(req).await.unwrap();
    let (head, body) = answer.into_parts();
    let all = http_body_util::BodyExt::collect(body).await.unwrap();
    let fields = all.trailers().cloned().unwrap_or(head.headers);
    let text = |name| {
        fields
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    (text("grpc-status"), text("grpc-message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_server_answers_as_hyper_does() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hyper = start(a.path(), "").await;
    let direct = start(b.path(), DIRECT).await;
    let (seen, expected) = answers(&direct, &hyper).await;
    assert_eq!(seen, expected);
    assert!(
        seen[2].starts_with("2 "),
        "the third call is over: {seen:?}"
    );
    for name in ["", "envoy.service.ratelimit.v3.RateLimitService", "nope"] {
        assert_eq!(
            health(&direct, name).await,
            health(&hyper, name).await,
            "{name}"
        );
    }
    assert_eq!(health(&direct, "").await, "1", "SERVING");
    let unknown = raw_call(&direct, "/nope.Nope/Call").await;
    assert_eq!(unknown, raw_call(&hyper, "/nope.Nope/Call").await);
    assert_eq!(unknown.0, "12", "UNIMPLEMENTED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_methods_are_refused_with_the_setting_named() {
    let dir = tempfile::tempdir().unwrap();
    let direct = start(dir.path(), DIRECT).await;
    for path in [
        "/grpc.health.v1.Health/Watch",
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ] {
        let (status, message) = raw_call(&direct, path).await;
        assert_eq!(status, "12", "{path}: UNIMPLEMENTED");
        assert!(message.contains("server.grpc_http2"), "{path}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_calls_the_own_server_over_tls() {
    let pki = Pki::new("serve");
    let leaf = pki.leaf("grpc");
    let server = format!(
        "{DIRECT}  tls:\n    grpc:\n      cert: {}\n      key: {}\n",
        leaf.cert.display(),
        leaf.key.display()
    );
    let service = start(pki.dir.path(), &server).await;
    let args = vec![
        format!("localhost:{}", service.grpc),
        "--ca".into(),
        pki.ca_file.display().to_string(),
        "--calls".into(),
        "3".into(),
    ];
    assert_eq!(python("grpc_call.py", args).await, vec!["OK OK"; 3]);
}

/// With Redis, a decision waits for its round trip: the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_the_own_server_answers_as_hyper_does() {
    let store = |redis: &floodgate_testkit::Redis| {
        format!(
            "store:\n  backend: redis\n  url: redis://{}\n",
            redis.addr()
        )
    };
    let (r1, r2) = (
        floodgate_testkit::Redis::start(),
        floodgate_testkit::Redis::start(),
    );
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hyper = start(a.path(), &store(&r1)).await;
    let direct = start(b.path(), &format!("{DIRECT}{}", store(&r2))).await;
    let (seen, expected) = answers(&direct, &hyper).await;
    assert_eq!(seen, expected);
    assert!(
        seen[2].starts_with("2 "),
        "the third call is over: {seen:?}"
    );
}

/// On shutdown an idle connection is told to go away (`GOAWAY`,
/// `NO_ERROR`), then closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_tells_an_idle_connection_to_go_away() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let direct = start(dir.path(), DIRECT).await;
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", direct.grpc))
        .await
        .unwrap();
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    client
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    // The server's SETTINGS: the connection is being served.
    let mut head = [0; 9];
    client.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 4, "SETTINGS first");
    let stopping = tokio::spawn(direct.stop());
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        client.read_to_end(&mut rest),
    );
    read.await.expect("closed").unwrap();
    let goaway = frames(&rest[usize::from(head[2])..]).find(|f| f.0 == 7);
    assert_eq!(
        goaway.map(|f| f.1[4..8].to_vec()),
        Some(vec![0, 0, 0, 0]),
        "GOAWAY NO_ERROR"
    );
    stopping.await.unwrap().unwrap();
}

/// The frames in `bytes`: type and payload.
fn frames(mut bytes: &[u8]) -> impl Iterator<Item = (u8, Vec<u8>)> + '_ {
    std::iter::from_fn(move || {
        if bytes.len() < 9 {
            return None;
        }
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        let frame = (bytes[3], bytes[9..9 + len].to_vec());
        bytes = &bytes[9 + len..];
        Some(frame)
    })
}

/// A message over the body limit, sent in many frames, is answered
/// `RESOURCE_EXHAUSTED` once the limit is passed; the rest of its body is
/// ignored, and the connection goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_and_the_connection_goes_on() {
    use tower_service::Service as _;
    let dir = tempfile::tempdir().unwrap();
    let direct = start(dir.path(), &format!("{DIRECT}  body_limit: 1KiB\n")).await;
    let mut channel = channel(&direct).await;
    // A gRPC frame announcing 64 KiB, sent 1 KiB at a time.
    let mut chunks = vec![Ok::<_, std::convert::Infallible>(http_body::Frame::data(
        bytes::Bytes::from_static(&[0, 0, 1, 0, 0]),
    ))];
    chunks.extend((0..64).map(|_| Ok(http_body::Frame::data(bytes::Bytes::from(vec![0u8; 1024])))));
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let uri = format!(
        "http://127.0.0.1:{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        direct.grpc
    );
    let req = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::new(body))
        .unwrap();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .unwrap();
    let answer = channel.call(req).await.unwrap();
    assert_eq!(answer.headers()["grpc-status"], "8", "RESOURCE_EXHAUSTED");
    let mut rls = RateLimitServiceClient::new(channel);
    let next = rls
        .should_rate_limit(request("api", &[("user", "z")], 0))
        .await;
    assert_eq!(
        next.unwrap().into_inner().overall_code,
        1,
        "OK on the same connection"
    );
}
