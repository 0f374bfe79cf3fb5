//! `/v1/release` as a hostile client uses it, through the real binary, on
//! the in-memory store and on Redis: releases without a permit, with
//! forged ones (random, small, the holders' own plus or minus one), with a
//! holder's permit on another key or again and again, with `hits: 1000`.
//! None frees a unit it did not take, and each says so. A flood of forged
//! releases leaves a normal client served; during a Redis outage it is not
//! queued, so the victim's limit admits again as soon as Redis is back.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use floodgate_testkit::{Floodgate, Redis, RedisCluster};

use crate::serve_support::json_api::post_json;
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// `jobs`: at most 2 in flight per job; `api`: a limit a normal client
/// never reaches.
const RULES: &str = "domains:
  - domain: jobs
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 2, name: in-flight}
  - domain: api
    descriptors:
      - key: user
        rate_limit: {requests: 1000000, per: 1h}
";

async fn post(client: &reqwest::Client, port: u16, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, value) = post_json(client, port, path, body).await;
    (status, value)
}

fn job(name: &str) -> Value {
    json!({"domain": "jobs", "descriptors": [{"entries": {"job": name}}]})
}

fn with_permit(body: &Value, permit: &str, hits: u32) -> Value {
    let mut b = body.clone();
    b["permit"] = json!(permit);
    b["hits"] = json!(hits);
    b
}

/// A check of `body`: the status and the permit (empty when denied).
async fn check(c: &reqwest::Client, s: &Floodgate, body: &Value) -> (u16, String) {
    let (status, b) = post(c, s.http, "/v1/check", body).await;
    assert!(status == 200 || status == 429, "{status} {b}");
    (status, b["permit"].as_str().unwrap_or("").to_owned())
}

async fn release(
    c: &reqwest::Client,
    s: &Floodgate,
    body: &Value,
    permit: &str,
    hits: u32,
) -> (u16, Value) {
    post(c, s.http, "/v1/release", &with_permit(body, permit, hits)).await
}

/// Permit `p` (decimal) plus `d`.
fn near(p: &str, d: i128) -> String {
    p.parse::<u128>()
        .unwrap()
        .wrapping_add_signed(d)
        .to_string()
}

/// Forged releases on a full limit, then cross-key, repeated and
/// oversized ones, while a normal client is served.
async fn forged_releases_free_nothing(s: &Floodgate) {
    let stop = Arc::new(AtomicBool::new(false));
    let normal = normal_client(s, stop.clone());
    let c = reqwest::Client::new();
    let victim = job("render");
    let (_, a) = check(&c, s, &victim).await;
    let (_, b) = check(&c, s, &victim).await;
    assert_eq!(check(&c, s, &victim).await.0, 429);
    // A caller that never acquired anything: without a permit, refused.
    for _ in 0..3 {
        let (status, body) = post(&c, s.http, "/v1/release", &victim).await;
        assert_eq!(status, 400, "{body}");
    }
    // With forged permits: nothing held, nothing freed, and said so.
    let mut forged = vec![
        "1".to_owned(),
        u128::MAX.to_string(),
        "340282366920938463463374607431768211".to_owned(),
    ];
    for p in [&a, &b] {
        forged.extend([near(p, 1), near(p, -1)]);
    }
    for p in &forged {
        for _ in 0..3 {
            let (status, body) = release(&c, s, &victim, p, 1).await;
            assert_eq!(status, 409, "{p}: {body}");
            assert_eq!(body["units"], 0, "{body}");
            assert_eq!(body["error"]["code"], "PERMIT_NOT_HELD", "{body}");
        }
    }
    assert_eq!(
        check(&c, s, &victim).await.0,
        429,
        "a forged release freed a unit"
    );
    // A holder's permit on another key, another key's permit here.
    let other = job("encode");
    let (_, e) = check(&c, s, &other).await;
    for p in [&a, &b] {
        assert_eq!(release(&c, s, &other, p, 1).await.0, 409);
    }
    assert_eq!(release(&c, s, &victim, &e, 1).await.0, 409);
    assert_eq!(check(&c, s, &victim).await.0, 429);
    // `hits: 1000` gives back the one unit taken; then the permit is spent.
    let (status, body) = release(&c, s, &victim, &a, 1000).await;
    assert_eq!((status, &body["units"]), (200, &json!(1)), "{body}");
    for _ in 0..3 {
        let (status, body) = release(&c, s, &victim, &a, 1).await;
        assert_eq!(status, 409, "{body}");
    }
    assert_eq!(check(&c, s, &victim).await.0, 200);
    assert_eq!(check(&c, s, &victim).await.0, 429);
    assert!(s.metric("floodgate_releases_total{result=\"not_held\"}") >= 27.0);
    stop.store(true, Ordering::Relaxed);
    served(normal.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_repeated_and_cross_key_releases_free_nothing_in_memory() {
    let s = Floodgate::start(bin(), RULES, &[], &[]);
    forged_releases_free_nothing(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_repeated_and_cross_key_releases_free_nothing_on_redis() {
    let redis = Redis::start();
    // A timeout a loaded machine never reaches: every release is Redis's
    // answer (none is queued).
    let config = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 5s\n{RULES}",
        redis.addr()
    );
    let s = Floodgate::start(bin(), &config, &[], &[]);
    forged_releases_free_nothing(&s).await;
    assert_eq!(s.metric("floodgate_redis_releases_deferred_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_repeated_and_cross_key_releases_free_nothing_on_a_cluster() {
    let cluster = RedisCluster::start();
    let config = format!(
        "store:\n  backend: redis\n  mode: cluster\n  url: {}\n  timeout: 5s\n{RULES}",
        cluster.url()
    );
    let s = Floodgate::start(bin(), &config, &[], &[]);
    forged_releases_free_nothing(&s).await;
    assert_eq!(s.metric("floodgate_redis_releases_deferred_total"), 0.0);
}

/// A normal client checking in a loop until `stop`: how long each exchange
/// took.
fn normal_client(s: &Floodgate, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Duration>> {
    let port = s.http;
    tokio::spawn(async move {
        let c = reqwest::Client::new();
        let user = json!({"domain": "api", "descriptors": [{"entries": {"user": "normal"}}]});
        let mut took = Vec::new();
        // (At least a few exchanges, should the attack be shorter.)
        while took.len() < 5 || !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let (status, b) = post(&c, port, "/v1/check", &user).await;
            assert_eq!(status, 200, "{b}");
            took.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        took
    })
}

/// The normal client was answered all along, mostly well within 100 ms
/// (the median; a loaded test machine may stall any one exchange).
fn served(mut took: Vec<Duration>) {
    assert!(took.len() >= 5, "{} exchanges", took.len());
    took.sort_unstable();
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(100),
        "median {median:?} of {}",
        took.len()
    );
}

/// Forged releases from many connections at once: the victim's limit
/// stays exact and a normal client keeps being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_flood_leaves_a_normal_client_served() {
    let s = Floodgate::start(bin(), RULES, &[], &[]);
    let c = reqwest::Client::new();
    let victim = job("render");
    let (_, a) = check(&c, &s, &victim).await;
    check(&c, &s, &victim).await;
    let stop = Arc::new(AtomicBool::new(false));
    let normal = normal_client(&s, stop.clone());
    let port = s.http;
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let (victim, a) = (victim.clone(), a.clone());
            tokio::spawn(async move {
                let c = reqwest::Client::new();
                for i in 0..200 {
                    let p = near(&a, i - 100);
                    let status = post(&c, port, "/v1/release", &with_permit(&victim, &p, 1000))
                        .await
                        .0;
                    assert!(status == 409 || (status == 200 && p == a), "{status}");
                }
            })
        })
        .collect();
    for t in attackers {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    served(normal.await.unwrap());
    // Only the holder's own release (sent by an attacker who had it) freed
    // its one unit.
    assert_eq!(check(&c, &s, &victim).await.0, 200);
    assert_eq!(check(&c, &s, &victim).await.0, 429);
}

/// The outage: two holders fill a limit on Redis, Redis freezes,
/// and their two releases arrive among a thousand forged ones. Forged
/// releases are answered 503 (nothing can check them) and never queued;
/// the queue holds the two real ones. The normal client is served by the
/// local fallback all along. Once Redis answers, the victim is admitted
/// again at once, not when the ten-minute leases end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_flood_during_a_paused_redis_does_not_jam_a_limit() {
    let redis = Redis::start();
    let config = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 500ms\n  connect_timeout: 500ms\n  failure_policy: local\n  breaker: {{failures: 1, cool_down: 200ms}}\n{RULES}",
        redis.addr()
    );
    let s = Floodgate::start(bin(), &config, &[], &[]);
    let c = reqwest::Client::new();
    let victim = job("render");
    let (_, a) = check(&c, &s, &victim).await;
    let (_, b) = check(&c, &s, &victim).await;
    assert_eq!(check(&c, &s, &victim).await.0, 429);
    // Both held in Redis, issued here.
    assert_eq!(s.metric("floodgate_redis_issued_permits"), 2.0);
    assert_eq!(s.metric("floodgate_redis_local_permits"), 0.0);
    redis.pause();
    let stop = Arc::new(AtomicBool::new(false));
    let normal = normal_client(&s, stop.clone());
    let port = s.http;
    let attackers: Vec<_> = (0..4)
        .map(|t| {
            let victim = victim.clone();
            let real = [a.clone(), b.clone()];
            tokio::spawn(async move {
                let c = reqwest::Client::new();
                let mut queued = 0;
                for i in 0..250u64 {
                    if t < 2 && i == 125 {
                        // A thousand units asked: the one it took is queued.
                        let (status, body) = post(
                            &c,
                            port,
                            "/v1/release",
                            &with_permit(&victim, &real[t], 1000),
                        )
                        .await;
                        assert_eq!(status, 200, "{body}");
                        assert_eq!(body["units"], 1, "{body}");
                        assert_eq!(body["statuses"][0]["result"], "queued", "{body}");
                        queued += 1;
                    }
                    let forged = ((u128::from(i) << 64) | (t as u128 * 7919 + 1)).to_string();
                    let (status, body) =
                        post(&c, port, "/v1/release", &with_permit(&victim, &forged, 1)).await;
                    // 504 for those that waited for Redis before the
                    // breaker opened, 503 for every one after.
                    assert!(status == 503 || status == 504, "{status} {body}");
                    assert_eq!(body["units"], 0, "{body}");
                }
                queued
            })
        })
        .collect();
    let mut queued = 0;
    for t in attackers {
        queued += t.await.unwrap();
    }
    assert_eq!(queued, 2);
    // The holders' permits again, and on another key: nothing more is
    // queued.
    for (body, p) in [(&victim, &a), (&victim, &b), (&job("encode"), &a)] {
        let (status, body) = release(&c, &s, body, p, 1000).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["units"], 0, "{body}");
        assert_eq!(body["statuses"][0]["result"], "failed", "{body}");
    }
    assert_eq!(
        s.metric("floodgate_redis_deferred_releases"),
        2.0,
        "{}",
        s.log()
    );
    stop.store(true, Ordering::Relaxed);
    served(normal.await.unwrap());

    redis.resume();
    let back = Instant::now();
    loop {
        // The victim's checks are decisions too: the first Redis answers
        // delivers the two releases.
        let (status, _) = check(&c, &s, &victim).await;
        if status == 200 && s.metric("floodgate_redis_deferred_releases") == 0.0 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "still denied; {}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Whole again, in Redis: the second unit too, and no third.
    assert_eq!(check(&c, &s, &victim).await.0, 200);
    assert_eq!(check(&c, &s, &victim).await.0, 429);
    assert_eq!(s.metric("floodgate_redis_releases_redelivered_total"), 2.0);
    assert_eq!(s.metric("floodgate_redis_releases_dropped_total"), 0.0);
}
