//! `RateLimit-Policy` rendered once per rule and reused: the cached value
//! equals a fresh rendering, follows a policy reload, and is not used for
//! requests whose lines come from several rules (or one rule twice).
//! Driven through `FloodgateLayer::serve`, the unboxed entry point.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;

use floodgate::SystemClock;
use floodgate_http::layer::PeerAddr;
use floodgate_policy::PolicySet;
use floodgate_policy::read::{LoadOptions, load_str};
use support::{engine_with, layer_for};

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 100, per: 1m}
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: token_bucket, requests: 50, per: 1s, burst: 60}
http:
  domain: api
  descriptors:
    - [{user: {header: x-user}}]
    - [client_ip]
"#;

fn request(user: Option<&str>) -> http::Request<()> {
    let mut b = http::Request::get("/");
    if let Some(u) = user {
        b = b.header("x-user", u);
    }
    let mut req = b.body(()).unwrap();
    let peer: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

async fn policy_of(
    layer: &floodgate_http::FloodgateLayer<floodgate_policy::MemoryBackend, SystemClock>,
    user: Option<&str>,
) -> (String, String) {
    let res = layer
        .serve(None, request(user), |_req| async {
            Ok::<_, Infallible>(http::Response::new(bytes::Bytes::from_static(b"ok")))
        })
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let h = res.headers();
    (
        h["ratelimit-policy"].to_str().unwrap().to_owned(),
        h["ratelimit"].to_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn cached_policy_values_match_and_follow_reloads() {
    let engine = engine_with(CONFIG, SystemClock);
    let text = CONFIG.replace("    - [{user: {header: x-user}}]\n", "");
    // Only the client address: one rule per request, the cached path.
    let layer = layer_for(engine.clone(), &text);
    for i in 0..3 {
        let (policy, current) = policy_of(&layer, None).await;
        assert_eq!(policy, r#""per-ip";q=60;w=2"#, "#{i}");
        assert!(current.starts_with(r#""per-ip";r="#), "{current}");
    }
    // A reload with other numbers: the next response says so.
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    let next = CONFIG.replace("burst: 60", "burst: 70");
    let spec = load_str("next.yaml", &next, &options).unwrap();
    engine.replace_policy(PolicySet::compile(&spec).unwrap());
    let (policy, _) = policy_of(&layer, None).await;
    assert_eq!(policy, r#""per-ip";q=70;w=2"#);
}

#[tokio::test]
async fn several_rules_are_rendered_each_time() {
    let layer = layer_for(engine_with(CONFIG, SystemClock), CONFIG);
    let (policy, current) = policy_of(&layer, Some("alice")).await;
    assert_eq!(policy, r#""per-user";q=100;w=60, "per-ip";q=60;w=2"#);
    assert!(current.starts_with(r#""per-user";r=99;t="#), "{current}");
    // Then the single-rule request is still right.
    let (policy, _) = policy_of(&layer, None).await;
    assert_eq!(policy, r#""per-ip";q=60;w=2"#);
    let (policy, _) = policy_of(&layer, Some("bob")).await;
    assert_eq!(policy, r#""per-user";q=100;w=60, "per-ip";q=60;w=2"#);
}

#[tokio::test]
async fn one_rule_matched_twice_lists_it_twice() {
    let text = CONFIG.replace("    - [{user: {header: x-user}}]\n", "    - [client_ip]\n");
    let layer = layer_for(engine_with(CONFIG, SystemClock), &text);
    let (policy, _) = policy_of(&layer, None).await;
    assert_eq!(policy, r#""per-ip";q=60;w=2, "per-ip";q=60;w=2"#);
}

/// The layer's caches (the engine plan, the rendered header pieces) name
/// the policy they were made for by its generation: a reload frees the
/// replaced policy at the swap, not at the next request.
#[tokio::test]
async fn a_reload_leaves_no_copy_of_the_old_policy_in_the_layer() {
    let engine = engine_with(CONFIG, SystemClock);
    let text = CONFIG.replace("    - [{user: {header: x-user}}]\n", "");
    let layer = layer_for(engine.clone(), &text);
    for _ in 0..3 {
        policy_of(&layer, None).await;
    }
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    let spec = load_str("next.yaml", CONFIG, &options).unwrap();
    let old = engine.replace_policy(PolicySet::compile(&spec).unwrap());
    assert_eq!(std::sync::Arc::strong_count(&old), 1);
}
