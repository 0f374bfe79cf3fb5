//! A request decided by the layer's plan (one descriptor, its rule known in
//! advance, decided as the request arrives) is answered exactly as one
//! decided by the engine's lookup in the layer's waiting steps: the same
//! statuses, headers and bodies for the same schedule. The twin layer is
//! kept off the plan by a second descriptor that no request builds, and
//! made to wait by a concurrency queue no test fills (neither changes
//! anything else).

use crate::support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate::ManualClock;
use floodgate_http::FloodgateLayer;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{MemoryBackend, PolicySet};
use http_body_util::{BodyExt, Full};
use support::{engine_with, layer_for, manual};

type Layer = FloodgateLayer<MemoryBackend, Arc<ManualClock>>;

const RULES: &[&str] = &[
    // A shaper that delays (burst without nodelay, two free).
    "      - key: key
        rate_limit: {algorithm: shaper, rate: 20r/s, burst: 4, delay: 2}
",
    // Several named limits on one rule.
    "      - key: key
        rate_limit:
          name: per-key
          limits:
            - {algorithm: token_bucket, requests: 3, per: 1s}
            - {requests: 8, per: 1m}
",
    // A fixed window reported with its reset, in shadow mode every third key.
    "      - key: key
        rate_limit: {requests_per_unit: 2, unit: second}
",
    "      - key: key
        shadow_mode: true
        rate_limit: {algorithm: sliding_window, requests: 2, per: 1s}
",
];

const RESPONSES: &[&str] = &[
    "  responses: {headers: [ietf, x-ratelimit, x-ratelimit-epoch]}\n",
    "  responses: {on_success: false, status: 503}\n",
    "  responses: {hide_headers: true}\n",
    // The defaults: `RateLimit-Policy` and `RateLimit` on every response.
    "",
    // Names that need escaping, and a hidden rule.
    "  responses: {rules: {per-key: {policy_name: 'pk \"x\"'}, api.key: {policy_name: 'k\\y'}}}\n",
    "  responses: {rules: {api.key: {hide: true}}}\n",
];

fn config(rules: &str, responses: &str, general: bool) -> String {
    let (never, layer) = if general {
        (
            "    - [{header: {name: x-never-sent, key: never}}]\n",
            "  layer:\n    concurrency:\n      global: {max: 1000000}\n",
        )
    } else {
        ("", "")
    };
    format!(
        "domains:\n  - domain: api\n    descriptors:\n{rules}http:\n  domain: api\n  descriptors:\n    - [{{header: {{name: x-limit-key, key: key}}}}]\n{never}{responses}{layer}"
    )
}

fn twin(rules: &str, responses: &str, general: bool) -> (Layer, Arc<ManualClock>) {
    let clock = manual();
    let text = config(rules, responses, general);
    let layer = layer_for(engine_with(&text, clock.clone()), &text);
    (layer, clock)
}

/// Status, headers (in order) and body of one request with `key` (none:
/// no descriptor).
async fn send(layer: &Layer, key: Option<&str>) -> (u16, Vec<(String, String)>, Bytes) {
    let mut req = http::Request::get("/").header("accept", "application/json");
    if let Some(k) = key {
        req = req.header("x-limit-key", k);
    }
    let res = layer
        .serve(None, req.body(()).unwrap(), |_req| async {
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
        })
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

/// A fixed pseudo-random schedule (xorshift), the same for both layers.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(start_paused = true)]
async fn the_plan_answers_exactly_as_the_engine_lookup() {
    use floodgate_http::layer::LayerStats as S;
    let mut compared = 0;
    let mut denied = 0;
    for rules in RULES {
        for responses in RESPONSES {
            let (direct, d_clock) = twin(rules, responses, false);
            let (general, g_clock) = twin(rules, responses, true);
            let mut schedule = Schedule(0x9e37_79b9_7f4a_7c15);
            for _ in 0..150 {
                let step = Duration::from_millis(match schedule.next(4) {
                    0 => 0,
                    1 => schedule.next(60),
                    2 => schedule.next(400),
                    _ => schedule.next(2500),
                });
                d_clock.advance(step);
                g_clock.advance(step);
                let key = match schedule.next(8) {
                    7 => None,
                    k => Some(format!("k{}", k % 3)),
                };
                let a = send(&direct, key.as_deref()).await;
                let b = send(&general, key.as_deref()).await;
                assert_eq!(a, b, "{rules}{responses}key {key:?}");
                compared += 1;
                denied += usize::from(a.0 != 200);
            }
            let (d, g) = (direct.stats(), general.stats());
            assert_eq!(S::get(&d.decided), S::get(&g.decided));
            assert_eq!(S::get(&d.denied), S::get(&g.denied));
            assert_eq!(S::get(&d.delayed), S::get(&g.delayed));
        }
    }
    // The schedule reaches the limits: rejections were compared too.
    assert!(denied > compared / 10, "{denied} of {compared} rejected");
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_the_new_policy_decides_with_or_without_a_plan() {
    let (layer, _clock) = twin(RULES[2], RESPONSES[0], false);
    let key = Some("k");
    assert_eq!(send(&layer, key).await.0, 200);
    assert_eq!(send(&layer, key).await.0, 200);
    assert_eq!(send(&layer, key).await.0, 429);
    // A policy with a larger limit replaces it: the next requests are
    // decided under it, on a counter of its own (the rule changed).
    layer.engine().replace_policy(five_a_second(false));
    let mut codes = Vec::new();
    for _ in 0..6 {
        let (status, headers, _) = send(&layer, key).await;
        codes.push(status);
        if status == 200 {
            let policy = headers.iter().find(|(n, _)| n == "ratelimit-policy");
            assert!(policy.unwrap().1.contains("q=5"), "{headers:?}");
        }
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 429]);
    // And a policy with no plan (a value-specific sibling): the engine's
    // lookup answers.
    let text = config(
        "      - key: key\n        rate_limit: {requests_per_unit: 1, unit: second}\n      - key: key\n        value: vip\n        rate_limit: {requests_per_unit: 9, unit: second}\n",
        RESPONSES[0],
        false,
    );
    let policy = compiled(&text);
    layer.engine().replace_policy(policy);
    let vip: Vec<u16> = futures_codes(&layer, "vip", 10).await;
    assert_eq!(
        vip,
        [200; 9].iter().copied().chain([429]).collect::<Vec<_>>()
    );
    let other: Vec<u16> = futures_codes(&layer, "k", 2).await;
    assert_eq!(other, [200, 429]);
}

/// A layer pinned to a policy decides under it while the engine runs
/// another (a server swapping its layer's section and the policies of one
/// file): its limits, its counters and its headers are that policy's,
/// with or without a plan; the same layer unpinned follows the engine.
#[tokio::test(start_paused = true)]
async fn a_pinned_layer_decides_under_its_policy_while_the_engine_runs_another() {
    for general in [false, true] {
        let (layer, _clock) = twin(RULES[2], RESPONSES[0], general);
        let pinned = layer.pinned_to(layer.engine().policy());
        layer.engine().replace_policy(five_a_second(general));
        let mut codes = Vec::new();
        for _ in 0..3 {
            let (status, headers, _) = send(&pinned, Some("k")).await;
            codes.push(status);
            let quota = headers.iter().find(|(n, _)| n == "ratelimit-policy");
            assert!(quota.unwrap().1.contains("q=2"), "{general}: {headers:?}");
        }
        assert_eq!(codes, [200, 200, 429], "general: {general}");
        let (status, headers, _) = send(&layer, Some("k")).await;
        assert_eq!(status, 200);
        let quota = headers.iter().find(|(n, _)| n == "ratelimit-policy");
        assert!(quota.unwrap().1.contains("q=5"), "{general}: {headers:?}");
        let repinned = pinned.pinned_to(layer.engine().policy());
        assert_eq!(
            futures_codes(&repinned, "k", 5).await,
            [200, 200, 200, 200, 429]
        );
    }
}

/// The policies of a file whose one rule admits 5 a second per key (with
/// the twin layer's unplanned descriptor if `general`).
fn five_a_second(general: bool) -> PolicySet {
    let text = config(
        "      - key: key\n        rate_limit: {requests_per_unit: 5, unit: second}\n",
        RESPONSES[0],
        general,
    );
    compiled(&text)
}

/// The policies of `text`, which has an `http:` section.
fn compiled(text: &str) -> PolicySet {
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    PolicySet::compile(&load_str("t.yaml", text, &options).unwrap()).unwrap()
}

async fn futures_codes(layer: &Layer, key: &str, n: usize) -> Vec<u16> {
    let mut codes = Vec::new();
    for _ in 0..n {
        codes.push(send(layer, Some(key)).await.0);
    }
    codes
}

/// A server that resolved the client's address behind its trusted proxies
/// (for its own log line) hands it to the layer with the request: the
/// layer's `client_ip` descriptor is that address — the same one the
/// layer finds from the headers itself — and a client is limited the same
/// whichever way it came.
#[tokio::test(start_paused = true)]
async fn a_client_address_resolved_by_the_server_is_the_layers() {
    use floodgate_http::layer::ClientAddr;
    let text = "domains:\n  - domain: api\n    descriptors:\n      - key: remote_address\n        rate_limit: {requests_per_unit: 2, unit: minute}\nhttp:\n  domain: api\n  client_ip: {trusted_hops: 1}\n  descriptors:\n    - [client_ip]\n";
    let layer = layer_for(engine_with(text, manual()), text);
    let peer = "10.0.0.1:4000".parse().unwrap();
    let request = |client: &str| {
        http::Request::get("/")
            .header("x-forwarded-for", client)
            .body(())
            .unwrap()
    };
    let mut codes = Vec::new();
    for resolve_first in [true, false, true] {
        let req = request("203.0.113.9");
        let mut from = ClientAddr::new(peer);
        if resolve_first {
            let ip = layer.client_ip(&req, &mut from);
            assert_eq!(ip, "203.0.113.9".parse::<std::net::IpAddr>().unwrap());
            // Asked again: the address kept, not resolved anew.
            assert_eq!(layer.client_ip(&request("198.51.100.1"), &mut from), ip);
        }
        let res = layer
            .serve(from, req, |_req| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            })
            .await
            .unwrap();
        codes.push(res.status().as_u16());
    }
    // One client, one counter: two admitted, the third rejected.
    assert_eq!(codes, [200, 200, 429]);
    // Another client behind the same proxy has a counter of its own.
    let res = layer
        .serve(
            ClientAddr::new(peer),
            request("203.0.113.10"),
            |_req| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            },
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}
