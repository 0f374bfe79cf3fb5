//! An admitted request through the layer allocates nothing in steady
//! state: descriptors, decision, report, the `RateLimit-Policy` value
//! (cached per rule) and the `RateLimit` value (split off a pooled buffer)
//! all reuse memory. A counting global allocator (per thread) proves it;
//! the requests and the inner service's responses are built outside the
//! measured calls, and the futures are polled by hand (an admitted request
//! on the in-memory store completes at its first poll). Each request is
//! counted (`floodgate_requests_total`) in a recorder, as in the binaries.

use crate::counting;
use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use floodgate::SystemClock;
use floodgate_http::layer::PeerAddr;
use std::future::Future;

use counting::allocations;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::{engine_with, layer_for};

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: key
        # Named: the response shares the rule's name, it does not copy it.
        rate_limit: {name: per-key, algorithm: shaper, rate: 1000000r/s, burst: 20, nodelay: true}
http:
  domain: api
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
"#;

const KEYS: u64 = 64;

/// Two descriptors: decided by the layer's general steps.
const TWO: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: key
        rate_limit: {name: per-key, algorithm: shaper, rate: 1000000r/s, burst: 20, nodelay: true}
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: token_bucket, requests: 1000000000, per: 1s}
http:
  domain: api
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
    - [client_ip]
"#;

#[test]
fn admitted_requests_allocate_nothing() {
    admitted_requests_allocate_nothing_under(CONFIG, 40);
}

#[test]
fn admitted_requests_of_several_descriptors_allocate_nothing() {
    // Two policies per header value: twice the bytes per response.
    admitted_requests_allocate_nothing_under(TWO, 20);
}

/// `per_chunk`: responses whose header values fill one pooled 4 KiB
/// buffer (less some slack), when responses are all kept alive.
fn admitted_requests_allocate_nothing_under(config: &str, per_chunk: u64) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        layer_for(engine_with(config, SystemClock), config)
    });
    let peer: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    let requests = |n: u64| -> Vec<(http::Request<()>, http::Response<()>)> {
        (0..n)
            .map(|i| {
                let mut req = http::Request::get("/")
                    .header("x-limit-key", format!("k{}", i % KEYS))
                    .body(())
                    .unwrap();
                req.extensions_mut().insert(PeerAddr(peer));
                // Room for the rate-limit headers, as a server's response
                // head usually has.
                let mut res = http::Response::new(());
                res.headers_mut().reserve(8);
                (req, res)
            })
            .collect()
    };
    let run = |batch: Vec<(http::Request<()>, http::Response<()>)>, keep: bool| -> u64 {
        let before = allocations();
        let mut kept = Vec::with_capacity(batch.len());
        for (req, res) in batch {
            let fut = pin!(layer.serve(
                None,
                req,
                move |_req| async move { Ok::<_, Infallible>(res) }
            ));
            let Poll::Ready(out) = fut.poll(&mut Context::from_waker(Waker::noop())) else {
                panic!("an admitted request completes at once");
            };
            let out = out.unwrap();
            assert_eq!(out.status(), 200);
            assert!(out.headers().contains_key("ratelimit"));
            if keep {
                kept.push(out);
            }
            if kept.len() == kept.capacity() {
                break;
            }
        }
        let used = allocations() - before;
        drop(kept);
        used
    };
    // Warm up: every key seen, buffers grown, the policy value cached.
    run(requests(4 * KEYS), false);
    let n = 2000;
    let batch = requests(n);
    // Each response dropped once handled, as a server does after writing it.
    let used = run(batch, false);
    println!("{used} allocations for {n} admitted requests, each dropped");
    assert!(used <= 1, "{used} allocations for {n} requests");
    // Every response kept alive.
    let used = run(requests(n), true);
    println!("{used} allocations for {n} admitted requests, all kept");
    // The measuring vector's own allocation, plus the header values' pooled
    // 4 KiB buffers: a new one every ~60 responses while earlier responses
    // are all kept alive (none when they are dropped as they are written).
    assert!(
        used <= 1 + n / per_chunk,
        "{used} allocations for {n} requests ({:.2} per request)",
        used as f64 / n as f64
    );
    // Every request was counted meanwhile.
    let allowed = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(k, _, _, v)| {
            let k = k.key();
            let is =
                |name: &str, value: &str| k.labels().any(|l| l.key() == name && l.value() == value);
            let counted = k.name() == "floodgate_requests_total" && is("result", "allowed");
            match v {
                DebugValue::Counter(n) if counted => Some(n),
                _ => None,
            }
        });
    assert!(allowed.is_some_and(|a| a >= 2 * n), "{allowed:?}");
}
