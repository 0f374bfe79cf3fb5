//! Negative hits (`is_negative_hits`, Envoy's refunds) through the real
//! `floodgate serve` binary and its gRPC listener, with envoyproxy/ratelimit's
//! accounting (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`), in memory,
//! on Redis and on a Redis Cluster: the counter falls by the hits, never
//! below 0, each refund is answered OK with what remains, a request mixing
//! refunds and charges is decided for its charges, and the hits given back
//! are counted under envoyproxy/ratelimit's name and Floodgate's own.
//!
//! The client is Rust's (tonic, from the service's own protocol files):
//! the Python `xds-protos` package does not carry the field yet.

use std::time::Duration;

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Floodgate, Redis, RedisCluster, free_port, http_request};

use crate::serve_support::{DAY, clear_of_boundary, serve_envoy_file};

/// 3 a day per user.
const RULES: &str = "domain: refunds
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
";

type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// `floodgate serve` on [`RULES`] (an envoyproxy/ratelimit file in its own
/// directory) with `env`, its envoyproxy/ratelimit names on `metrics`.
fn serve(env: &[(&str, &str)], metrics: u16) -> (tempfile::TempDir, Floodgate) {
    let addr = format!("127.0.0.1:{metrics}");
    let mut all = vec![
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", addr.as_str()),
        ("FLOODGATE_SHUTDOWN_GRACE", "0"),
    ];
    all.extend_from_slice(env);
    serve_envoy_file("refunds.yaml", RULES, &all)
}

/// A descriptor `user: value` of `hits`, negative or not.
fn user(value: &str, hits: u64, negative: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "user".into(),
            value: value.into(),
        }],
        hits_addend: Some(hits),
        is_negative_hits: negative,
        ..Default::default()
    }
}

/// Each status's (code, remaining) and the overall code of one call.
async fn call(c: &mut Client, descriptors: Vec<RateLimitDescriptor>) -> (i32, Vec<(i32, u32)>) {
    let request = RateLimitRequest {
        domain: "refunds".into(),
        descriptors,
        hits_addend: 0,
    };
    let r = c.should_rate_limit(request).await.unwrap().into_inner();
    let statuses = r
        .statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect();
    (r.overall_code, statuses)
}

const OK: i32 = 1;
const OVER: i32 = 2;

/// The sequence, and the counters it leaves.
async fn refunds_as_envoyproxy_ratelimit(s: &Floodgate, metrics: u16) {
    // The sequence runs in one window of the limit (a UTC day).
    clear_of_boundary(DAY, Duration::from_secs(60));
    let mut c = Client::connect(format!("http://{}", s.grpc_addr()))
        .await
        .unwrap();
    assert_eq!(
        call(&mut c, vec![user("a", 3, false)]).await,
        (OK, vec![(OK, 0)])
    );
    // Denied, and counted (4), as there.
    assert_eq!(
        call(&mut c, vec![user("a", 1, false)]).await,
        (OVER, vec![(OVER, 0)])
    );
    // 4 − 2: one left.
    assert_eq!(
        call(&mut c, vec![user("a", 2, true)]).await,
        (OK, vec![(OK, 1)])
    );
    assert_eq!(
        call(&mut c, vec![user("a", 1, false)]).await,
        (OK, vec![(OK, 0)])
    );
    // More than counted: floored at 0, the whole limit back.
    assert_eq!(
        call(&mut c, vec![user("a", 100, true)]).await,
        (OK, vec![(OK, 3)])
    );
    // A key never charged: nothing to give back, the whole limit left.
    assert_eq!(
        call(&mut c, vec![user("n", 5, true)]).await,
        (OK, vec![(OK, 3)])
    );
    // Mixed: the charge over its limit fails the request, the refund is
    // given back all the same (b: 4 counted, then 3).
    assert_eq!(call(&mut c, vec![user("b", 4, false)]).await.0, OVER);
    let mixed = vec![user("a", 4, false), user("b", 1, true)];
    assert_eq!(call(&mut c, mixed).await, (OVER, vec![(OVER, 0), (OK, 0)]));
    assert_eq!(
        call(&mut c, vec![user("b", 3, true)]).await,
        (OK, vec![(OK, 3)])
    );
    // The same over `/json` (proto3 JSON's `isNegativeHits`).
    let body = r#"{"domain":"refunds","descriptors":[{"entries":[{"key":"user","value":"b"}],"hitsAddend":"2","isNegativeHits":true}]}"#;
    let (status, text) = http_request(s.http, "POST", "/json", None, body.as_bytes()).unwrap();
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["statuses"][0]["limitRemaining"], 3, "{text}");
    // Given back: 2 + 100 + 5 + 1 + 3 + 2; charged: 3 + 1 + 1 + 4 + 4.
    let samples = scrape(metrics, "/metrics");
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        samples
            .iter()
            .filter(|x: &&Sample| x.name == name)
            .filter(|x| label.is_none_or(|(k, v)| x.labels.get(k).is_some_and(|w| w == v)))
            .map(|x| x.value)
            .sum()
    };
    let user_key = Some(("key1", "user"));
    assert_eq!(
        value("ratelimit_service_rate_limit_total_negative_hits", user_key),
        113.0
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_total_hits", user_key),
        13.0
    );
    let admin = scrape(s.admin, "/metrics");
    let own = |name: &str, outcome: Option<&str>| -> f64 {
        admin
            .iter()
            .filter(|x| x.name == name && x.labels.get("domain").is_some_and(|d| d == "refunds"))
            .filter(|x| outcome.is_none_or(|o| x.labels.get("outcome").is_some_and(|w| w == o)))
            .map(|x| x.value)
            .sum()
    };
    assert_eq!(own("floodgate_rule_negative_hits_total", None), 113.0);
    assert_eq!(own("floodgate_rule_hits_total", None), 13.0);
    assert_eq!(own("floodgate_rule_decisions_total", Some("refunded")), 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_in_memory() {
    let metrics = free_port();
    let (_dir, s) = serve(&[], metrics);
    refunds_as_envoyproxy_ratelimit(&s, metrics).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_on_redis() {
    let redis = Redis::start();
    let url = redis.addr();
    let metrics = free_port();
    // A timeout a loaded machine never reaches: every answer is Redis's.
    let env = [("REDIS_URL", url.as_str()), ("REDIS_TIMEOUT", "10s")];
    let (_dir, s) = serve(&env, metrics);
    refunds_as_envoyproxy_ratelimit(&s, metrics).await;
    assert!(s.log().contains("store=redis"), "{}", s.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let metrics = free_port();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_TIMEOUT", "10s"),
    ];
    let (_dir, s) = serve(&env, metrics);
    refunds_as_envoyproxy_ratelimit(&s, metrics).await;
    assert!(s.log().contains("store=redis"), "{}", s.log());
}
