//! The layer under plain hyper (no axum): hyper-util's tower adapter.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use floodgate::SystemClock;
use floodgate_http::layer::PeerAddr;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use support::{client, engine_with, header, layer_for};
use tower::ServiceBuilder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_hyper() {
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: sliding_log, requests: 1, per: 1m}
http:
  domain: api
  descriptors:
    - [client_ip]
"#;
    let layer = layer_for(engine_with(text, SystemClock), text);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer): (_, SocketAddr) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut r: http::Request<Incoming>| {
                    r.extensions_mut().insert(PeerAddr(peer));
                    r
                })
                .layer(layer.clone())
                .service_fn(|_r: http::Request<Incoming>| async {
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"hi"))))
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    let c = client();
    let url = format!("http://{addr}/");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "ratelimit-policy"), Some(r#""per-ip";q=1;w=60"#));
    assert_eq!(r.text().await.unwrap(), "hi");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(header(&r, "retry-after").is_some());
}
