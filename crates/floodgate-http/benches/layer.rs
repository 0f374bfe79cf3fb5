//! The tower layer's per-request overhead, in process (no network): the
//! same trivial service called bare and behind the layer (identity,
//! decision on the in-memory backend, headers), admitted and denied.

use std::convert::Infallible;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use floodgate_http::FloodgateLayer;
use floodgate_http::layer::PeerAddr;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: token_bucket, requests: 1000000000, per: 1s}
      - key: remote_address
        value: 203.0.113.66
        rate_limit: {name: banned, requests: 1, per: 1d}
      - key: user
        rate_limit: {name: per-user, algorithm: sliding_window, requests: 1000000000, per: 1m}
http:
  domain: api
  descriptors:
    - [client_ip]
    - [{user: {header: x-user}}]
"#;

/// One descriptor whose rule no value changes: decided by the layer's plan.
/// With `LOOKUP` appended, a second descriptor that no request builds keeps
/// the same layer off its plan (decided by the engine's lookup): the two
/// side by side.
const ONE: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, algorithm: shaper, rate: 1000000000r/s, burst: 20, nodelay: true}
http:
  domain: api
  descriptors:
    - [{user: {header: x-user}}]
"#;

const LOOKUP: &str = "    - [{header: {name: x-never-sent, key: never}}]\n";

fn request(ip: &str) -> http::Request<()> {
    let mut req = http::Request::get("/orders/1")
        .header("x-user", "alice")
        .body(())
        .unwrap();
    let peer: SocketAddr = format!("{ip}:40000").parse().unwrap();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    let policy = PolicySet::compile(&load_str("b.yaml", CONFIG, &options).unwrap()).unwrap();
    let engine = Arc::new(Engine::new(
        policy,
        MemoryBackend::new(Default::default()).unwrap(),
    ));
    let layer = FloodgateLayer::from_yaml_str(engine, "b.yaml", CONFIG).unwrap();
    let inner = tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let mut bare = inner;
    let mut limited = layer.layer(inner);
    let one = |text: &str| {
        let policy = PolicySet::compile(&load_str("b.yaml", text, &options).unwrap()).unwrap();
        let engine = Arc::new(Engine::new(
            policy,
            MemoryBackend::new(Default::default()).unwrap(),
        ));
        FloodgateLayer::from_yaml_str(engine, "b.yaml", text)
            .unwrap()
            .layer(inner)
    };
    let mut planned = one(ONE);
    let mut lookup = one(&format!("{ONE}{LOOKUP}"));

    let mut g = c.benchmark_group("layer");
    g.bench_function("bare service", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    bare.ready()
                        .await
                        .unwrap()
                        .call(request("198.51.100.7"))
                        .await
                        .unwrap(),
                )
            })
        });
    });
    g.bench_function("behind the layer, admitted", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    limited
                        .ready()
                        .await
                        .unwrap()
                        .call(request("198.51.100.7"))
                        .await
                        .unwrap(),
                )
            })
        });
    });
    for (name, svc) in [
        ("one descriptor, planned", &mut planned),
        ("one descriptor, engine lookup", &mut lookup),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    black_box(
                        svc.ready()
                            .await
                            .unwrap()
                            .call(request("198.51.100.7"))
                            .await
                            .unwrap(),
                    )
                })
            });
        });
    }
    g.bench_function("behind the layer, denied (429 + problem body)", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    limited
                        .ready()
                        .await
                        .unwrap()
                        .call(request("203.0.113.66"))
                        .await
                        .unwrap(),
                )
            })
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
