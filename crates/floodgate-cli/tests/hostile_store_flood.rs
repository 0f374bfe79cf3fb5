//! A flood of distinct keys through `/json` (256 descriptors a request,
//! each a new counter) into a small in-memory store does not give a
//! victim its spent limit back: the full store keeps every restriction
//! and decides the flood's new keys without state (`store.when_full:
//! admit`, the default), or refuses them (`deny`); only `evict` gives the
//! quota back, as documented. A Redis whose memory policy can evict
//! counters is warned of at start.

use crate::serve_support;

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Redis};
use serde_json::{Value, json};
use serve_support::clear_of_boundary;
use serve_support::json_api::post_json;

const CONFIG: &str = "\
domains:
  - domain: flood
    descriptors:
      - key: user
        rate_limit: {requests_per_unit: 3, unit: hour}
";

/// The store's capacity: the flood is twenty times as many keys.
const CAPACITY: usize = 1_000;
/// Descriptors in one request (the API's most).
const PER_REQUEST: usize = 256;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

fn request(users: impl Iterator<Item = String>) -> Value {
    let descriptors: Vec<Value> = users
        .map(|u| json!({"entries": [{"key": "user", "value": u}]}))
        .collect();
    json!({"domain": "flood", "descriptors": descriptors})
}

/// Spends the victim's limit, floods twenty capacities of new users, and
/// returns the victim's status afterwards.
async fn victim_after_flood(s: &Floodgate) -> u16 {
    let client = reqwest::Client::new();
    let victim = || request(std::iter::once("victim".to_string()));
    for _ in 0..3 {
        let (status, _, body) = post_json(&client, s.http, "/json", &victim()).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = post_json(&client, s.http, "/json", &victim()).await;
    assert_eq!(status, 429, "{body}");
    let requests = 20 * CAPACITY / PER_REQUEST + 1;
    for r in 0..requests {
        let users = (0..PER_REQUEST).map(|i| format!("flood-{r}-{i}"));
        let (status, _, body) = post_json(&client, s.http, "/json", &request(users)).await;
        assert!(status == 200 || status == 429, "{status} {body}");
    }
    post_json(&client, s.http, "/json", &victim()).await.0
}

#[tokio::test]
async fn a_flood_of_new_keys_keeps_the_victims_limit() {
    clear_of_boundary(Duration::from_secs(3_600), Duration::from_secs(120));
    let s = Floodgate::start(
        bin(),
        CONFIG,
        &["--memory-capacity", &CAPACITY.to_string()],
        &[],
    );
    assert_eq!(victim_after_flood(&s).await, 429, "log:\n{}", s.log());
    // The store held no more than its capacity and decided the rest of
    // the flood without state.
    let keys = s.metric("floodgate_store_keys");
    assert!(keys > 0.0 && keys <= 1_024.0, "{keys} keys held");
    // Their tables: 32-byte entries, at most a few times over at this size.
    let bytes = s.metric("floodgate_store_bytes");
    assert!(bytes > 32.0 * keys && bytes < 200.0 * keys, "{bytes} bytes");
    let admitted = s.metric("floodgate_store_full_total{outcome=\"admitted\"}");
    assert!(admitted >= (19 * CAPACITY) as f64, "{admitted} admitted");
    assert_eq!(
        s.metric("floodgate_store_full_total{outcome=\"evicted\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_full_store_set_to_deny_refuses_the_flood_and_keeps_the_limit() {
    clear_of_boundary(Duration::from_secs(3_600), Duration::from_secs(120));
    let s = Floodgate::start(
        bin(),
        CONFIG,
        &["--memory-capacity", &CAPACITY.to_string()],
        &[("FLOODGATE_MEMORY_WHEN_FULL", "deny")],
    );
    assert_eq!(victim_after_flood(&s).await, 429, "log:\n{}", s.log());
    assert!(s.metric("floodgate_store_full_total{outcome=\"denied\"}") > 0.0);
}

#[tokio::test]
async fn a_full_store_set_to_evict_gives_the_quota_back() {
    clear_of_boundary(Duration::from_secs(3_600), Duration::from_secs(120));
    let s = Floodgate::start(
        bin(),
        CONFIG,
        &["--memory-capacity", &CAPACITY.to_string()],
        &[("FLOODGATE_MEMORY_WHEN_FULL", "evict")],
    );
    assert_eq!(victim_after_flood(&s).await, 200, "log:\n{}", s.log());
    assert!(s.metric("floodgate_store_full_total{outcome=\"evicted\"}") > 0.0);
}

/// A Redis whose memory policy evicts counters is named at start, with a
/// warning; `noeviction` is not.
#[test]
fn an_evicting_redis_is_named_at_start() {
    for (policy, warned) in [("allkeys-lru", true), ("noeviction", false)] {
        let redis = Redis::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", policy]);
        let s = Floodgate::start(
            bin(),
            CONFIG,
            &["--store", "redis", "--redis-url", &redis.addr()],
            &[],
        );
        // Ready means the backend was built, and the check made, before.
        let named = s.log().contains("maxmemory_policy=allkeys-lru");
        assert_eq!(named, warned, "{policy}: log:\n{}", s.log());
        assert_eq!(
            s.log().contains("maxmemory"),
            warned,
            "{policy}: log:\n{}",
            s.log()
        );
    }
}
