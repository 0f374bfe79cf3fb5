//! Exactness and stability of what responses say, through the layer in
//! process, on manual clocks: `Retry-After` is the exact wait rounded up
//! and the request passes then (and not just before); consecutive
//! responses of one window state say the same; the epoch reset does not
//! wobble when every clock reading differs (GitHub's bug).

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate::{Apply, Clock, Timestamp};
use floodgate_http::FloodgateLayer;
use floodgate_http::layer::PeerAddr;
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, Response};
use http_body_util::Full;
use support::{engine_with, layer_for, manual};
use tower::{Layer, ServiceExt};

/// A clock that moves 1 µs forward at every reading.
struct Ticking(AtomicU64);

impl Clock for Ticking {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.0.fetch_add(1_000, Ordering::SeqCst))
    }
}

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    ratelimit: Option<String>,
    reset: Option<u64>,
}

async fn send<C: Clock + 'static>(layer: &FloodgateLayer<MemoryBackend, C>) -> Answer {
    let svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let mut req = http::Request::new(());
    let peer: SocketAddr = "198.51.100.7:40000".parse().unwrap();
    req.extensions_mut().insert(PeerAddr(peer));
    let res = svc.oneshot(req).await.unwrap();
    let h = |n: &str| res.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
    Answer {
        status: res.status().as_u16(),
        retry_after: h("retry-after").map(|v| v.parse().unwrap()),
        ratelimit: h("ratelimit"),
        reset: h("x-ratelimit-reset").map(|v| v.parse().unwrap()),
    }
}

fn config(limit: &str) -> String {
    format!(
        r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {{name: per-ip, {limit}}}
http:
  domain: api
  descriptors:
    - [client_ip]
  responses: {{headers: [ietf, x-ratelimit-epoch]}}
"#
    )
}

#[tokio::test]
async fn consecutive_responses_of_one_window_state_agree() {
    let clock = manual();
    // 3.25 s into a 10 s window that ends at ...010.
    clock.set(Timestamp::from_millis(1_700_000_003_250));
    let text = config("requests: 3, per: 10s");
    let layer = layer_for(engine_with(&text, clock.clone()), &text);
    for left in (0..3).rev() {
        let a = send(&layer).await;
        assert_eq!(a.status, 200);
        assert_eq!(
            a.ratelimit.as_deref(),
            Some(format!(r#""per-ip";r={left};t=7"#).as_str())
        );
        assert_eq!(a.reset, Some(1_700_000_010));
    }
    let first = send(&layer).await;
    let second = send(&layer).await;
    assert_eq!(first.status, 429);
    assert_eq!(first.retry_after, Some(7), "ceil(6.75 s)");
    assert_eq!(first.ratelimit.as_deref(), Some(r#""per-ip";r=0;t=7"#));
    assert_eq!(first.reset, Some(1_700_000_010));
    assert_eq!(
        (
            second.retry_after,
            second.ratelimit.as_deref(),
            second.reset
        ),
        (first.retry_after, first.ratelimit.as_deref(), first.reset)
    );
    // Later in the same window: the relative values count down, the
    // absolute reset stays put.
    clock.advance(Duration::from_millis(2_500));
    let later = send(&layer).await;
    assert_eq!(later.retry_after, Some(5), "ceil(4.25 s)");
    assert_eq!(later.reset, Some(1_700_000_010));
}

/// The exact wait of the next request, from a dry run.
async fn exact_wait<C: Clock>(engine: &Engine<MemoryBackend, C>) -> Duration {
    let d = [OwnedDescriptor::new([("remote_address", "198.51.100.7")])];
    let mut r = Response::default();
    engine
        .evaluate_with("api", &d, 1, Apply::Check, &mut r)
        .await
        .unwrap();
    let n = r.narrowest().unwrap();
    n.retry_after.unwrap_or_else(|| panic!("{n:?}"))
}

#[tokio::test]
async fn retry_after_is_the_exact_wait_rounded_up_and_then_it_passes() {
    for limit in [
        "algorithm: token_bucket, requests: 3, per: 10s, burst: 1",
        "algorithm: sliding_window, requests: 2, per: 7s",
        "algorithm: sliding_log, requests: 2, per: 1500ms",
        "requests: 1, per: 3s",
    ] {
        let clock = manual();
        clock.set(Timestamp::from_nanos(1_700_000_000_123_456_789));
        let text = config(limit);
        let engine = engine_with(&text, clock.clone());
        let layer = layer_for(engine.clone(), &text);
        let mut denied = send(&layer).await;
        while denied.status == 200 {
            clock.advance(Duration::from_millis(333));
            denied = send(&layer).await;
        }
        assert_eq!(denied.status, 429, "{limit}");
        let t0 = clock.now();
        let exact = exact_wait(&engine).await;
        let ra = denied.retry_after.unwrap();
        assert_eq!(
            ra,
            exact.as_secs() + u64::from(exact.subsec_nanos() > 0),
            "{limit}"
        );
        assert_eq!(
            denied.ratelimit.unwrap(),
            format!(r#""per-ip";r=0;t={ra}"#),
            "{limit}"
        );
        // Just before the exact moment: still denied.
        clock.set(t0 + exact - Duration::from_nanos(1));
        assert_eq!(send(&layer).await.status, 429, "{limit}");
        // At Retry-After: admitted.
        clock.set(t0 + Duration::from_secs(ra));
        assert_eq!(send(&layer).await.status, 200, "{limit}");
    }
}

#[tokio::test]
async fn the_epoch_reset_does_not_wobble() {
    // Every reading of this clock differs; the decision is taken on one of
    // them and the reset must still name the window's end exactly.
    let start = 1_700_000_008_999_990_000; // 10 µs before ...009
    let clock = Arc::new(Ticking(AtomicU64::new(start)));
    let text = config("requests: 5, per: 10s");
    let engine = engine_with(&text, clock.clone());
    let layer = layer_for(engine.clone(), &text);
    let mut resets = Vec::new();
    let mut naive = Vec::new();
    for _ in 0..20 {
        let a = send(&layer).await;
        resets.push(a.reset.unwrap());
        // GitHub's bug: adding the remaining time to a *second* clock
        // reading, taken after the decision.
        let d = [OwnedDescriptor::new([("remote_address", "198.51.100.7")])];
        let mut r = Response::default();
        engine
            .evaluate_with("api", &d, 1, Apply::Check, &mut r)
            .await
            .unwrap();
        let reset_after = r.narrowest().unwrap().reset_after;
        let later = u128::from(clock.now().as_nanos()) + reset_after.as_nanos();
        naive.push(later.div_ceil(1_000_000_000) as u64);
    }
    assert!(resets.iter().all(|&r| r == 1_700_000_010), "{resets:?}");
    assert!(naive.iter().all(|&r| r == 1_700_000_011), "{naive:?}");
}
