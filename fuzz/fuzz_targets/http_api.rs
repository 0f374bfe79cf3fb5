//! The decision service's HTTP API, any body on any of its routes, with or
//! without a JSON content type, against a policy using every kind of limit
//! (in memory): no panic, never a 500, and every body the service answers
//! with is JSON.
#![no_main]

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::body::Body;
use floodgate::StoreConfig;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet};
use floodgate_runtime::host::{AnyBackend, Health};
use floodgate_server::RlsSettings;
use floodgate_server::internals::DecisionService;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const POLICY: &str = r#"
domains:
  - domain: api
    allow:
      - {key: remote_address, cidrs: [192.0.2.0/24]}
    deny:
      - {key: remote_address, cidrs: [198.51.100.0/24]}
    descriptors:
      - key: remote_address
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}
      - key: scope
        value: global
        rate_limit: {algorithm: sliding_window, requests: 100, per: 1s}
      - key: user
        rate_limit:
          name: per-user
          limits:
            - {algorithm: gcra, requests: 10, per: 1s}
            - {requests: 1000, per: 1h}
        descriptors:
          - key: route
            value: /search
            rate_limit: {name: search, algorithm: sliding_log, requests: 3, per: 1m}
          - key: route
            rate_limit: {algorithm: shaper, rate: 10r/s, burst: 20, delay: 5}
      - key: tenant
        rate_limit: {algorithm: concurrency, max: 3}
      - key: plan
        value: free
        shadow_mode: true
        rate_limit: {algorithm: fixed_window, requests: 1, per: 1m}
      - key: weighted
        cost: 5
        rate_limit: {algorithm: leaky_bucket, requests: 20, per: 1s}
"#;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

static ROUTER: LazyLock<Router> = LazyLock::new(|| {
    let spec = load_str("fuzz.yaml", POLICY, &LoadOptions::default()).expect("the policy reads");
    let policy = PolicySet::compile(&spec).expect("the policy compiles");
    let backend = AnyBackend::Memory(MemoryBackend::new(StoreConfig::default()).expect("a store"));
    let mut settings = RlsSettings::default();
    settings.body_limit = 64 * 1024;
    let engine = Engine::new(policy, backend).with_request_limits(settings.request_limits);
    let health = Arc::new(Health::new(Arc::new(engine)));
    let service = DecisionService::new(health, &settings).expect("a service");
    floodgate_server::internals::router(Arc::new(service))
});

const PATHS: [&str; 5] = [
    "/json",
    "/v1/check",
    "/v1/release",
    "/healthcheck",
    "/v1/unknown",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let path = PATHS[usize::from(selector & 7) % PATHS.len()];
    let mut request = http::Request::builder().method("POST").uri(path);
    if selector & 8 == 0 {
        request = request.header("content-type", "application/json");
    }
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    RUNTIME.block_on(async {
        let response = ROUTER
            .clone()
            .oneshot(request)
            .await
            .expect("the router never fails");
        let status = response.status();
        assert_ne!(
            status,
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "{path}: {:?}",
            String::from_utf8_lossy(body)
        );
        let json = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        if json {
            assert!(
                serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
                "{path} answered {status} with a body that is not JSON: {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    });
});
