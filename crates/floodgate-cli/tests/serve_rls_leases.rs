//! A leased concurrency limit driven over RLS, as Envoy drives it (an
//! increment at the request's start, a negative hit when its stream is
//! done, `x-request-id` as the holder entry), through two real
//! `floodgate serve` instances sharing one Redis: units taken through one
//! instance by a client that never gives them back (its Envoy died) are
//! back on the other within one lease; decrements, forged or repeated, on
//! either instance free their own holder's units only, once. The same in
//! memory on one instance, through `POST /v1/release` as well.

use std::time::{Duration, Instant};

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::{Floodgate, Redis};

use crate::serve_support::serve_envoy_file;

/// At most 2 in flight per user, each unit held 10 minutes at most (or,
/// for `dying` clients, whose units are left to their lease, 2 s).
const RULES: &str = "domain: inflight
descriptors:
  - key: user
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max: 2, lease: 10m, holder: true}
  - key: dying
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max: 2, lease: 2s, holder: true}
";

/// Who holds units: a descriptor's first entry.
type Who = (&'static str, &'static str);

/// The lease of `dying` clients' units.
const LEASE: Duration = Duration::from_secs(2);

type Client = RateLimitServiceClient<tonic::transport::Channel>;

const OK: i32 = 1;
const OVER: i32 = 2;

fn serve(redis: &str) -> (tempfile::TempDir, Floodgate) {
    let env = [
        ("REDIS_URL", redis),
        // A timeout a loaded machine never reaches: every answer is Redis's.
        ("REDIS_TIMEOUT", "10s"),
        ("FLOODGATE_SHUTDOWN_GRACE", "0"),
    ];
    serve_envoy_file("inflight.yaml", RULES, &env)
}

/// `user: u, request_id: r`, given back (`is_negative_hits`) or taken.
fn descriptor((key, user): Who, request: &str, negative: bool) -> RateLimitDescriptor {
    let entry = |key: &str, value: &str| Entry {
        key: key.into(),
        value: value.into(),
    };
    RateLimitDescriptor {
        entries: vec![entry(key, user), entry("request_id", request)],
        is_negative_hits: negative,
        ..Default::default()
    }
}

/// The code and what remains, for one descriptor.
async fn call(c: &mut Client, d: RateLimitDescriptor) -> (i32, u32) {
    let request = RateLimitRequest {
        domain: "inflight".into(),
        descriptors: vec![d],
        hits_addend: 0,
    };
    let r = c.should_rate_limit(request).await.unwrap().into_inner();
    (r.overall_code, r.statuses[0].limit_remaining)
}

async fn take(c: &mut Client, user: Who, request: &str) -> i32 {
    call(c, descriptor(user, request, false)).await.0
}

async fn give_back(c: &mut Client, user: Who, request: &str) -> u32 {
    let (code, remaining) = call(c, descriptor(user, request, true)).await;
    assert_eq!(code, OK, "a decrement is always OK");
    remaining
}

async fn client(s: &Floodgate) -> Client {
    Client::connect(format!("http://{}", s.grpc_addr()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_envoys_units_return_within_one_lease_on_another_instance() {
    let redis = Redis::start();
    let (_da, a) = serve(&redis.addr());
    let (_db, b) = serve(&redis.addr());
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    // Through a: two requests whose Envoy dies, never decremented.
    let taken = Instant::now();
    assert_eq!(take(&mut ca, ("dying", "alice"), "r1").await, OK);
    assert_eq!(take(&mut ca, ("dying", "alice"), "r2").await, OK);
    drop(ca);
    drop(a);
    // (Redis may expire the key when both leases have ended, before b's
    // decision drops them: floodgate_redis_lease_expired_total is counted
    // by the floodgate-redis tests, on a clock they hold.)
    back_within_one_lease(&mut cb, taken).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_envoys_units_return_within_one_lease_in_memory() {
    let (_dir, s) = serve_in_memory();
    let mut c = client(&s).await;
    let taken = Instant::now();
    assert_eq!(take(&mut c, ("dying", "alice"), "r1").await, OK);
    assert_eq!(take(&mut c, ("dying", "alice"), "r2").await, OK);
    back_within_one_lease(&mut c, taken).await;
    assert!(s.metric("floodgate_store_lease_expired_total") >= 1.0);
}

/// `alice` holds 2 units taken at `taken` and never given back: a third
/// is refused until their lease ends, then admitted, and so is a fourth
/// once the second lease ends too (each lease ends on its own: `r2` was
/// taken a little after `r1`); both are given back.
async fn back_within_one_lease(c: &mut Client, taken: Instant) {
    assert_eq!(take(c, ("dying", "alice"), "r3").await, OVER);
    // Back once their lease ends, not before.
    for request in ["r3", "r4"] {
        admitted_once_the_lease_ends(c, request, taken).await;
    }
    assert_eq!(give_back(c, ("dying", "alice"), "r3").await, 1);
    assert_eq!(give_back(c, ("dying", "alice"), "r4").await, 2);
}

/// Polls until `request` is admitted for `alice`: never before one lease
/// from `taken`, and not much later.
async fn admitted_once_the_lease_ends(c: &mut Client, request: &str, taken: Instant) {
    while take(c, ("dying", "alice"), request).await != OK {
        assert!(
            taken.elapsed() < LEASE + Duration::from_secs(5),
            "{request} never admitted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = taken.elapsed();
    assert!(elapsed >= LEASE - Duration::from_millis(5), "{elapsed:?}");
}

/// `floodgate serve` on [`RULES`] with the in-memory store.
fn serve_in_memory() -> (tempfile::TempDir, Floodgate) {
    serve_envoy_file("inflight.yaml", RULES, &[("FLOODGATE_SHUTDOWN_GRACE", "0")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decrements_on_either_instance_free_only_their_own_holders_units() {
    let redis = Redis::start();
    let (_da, a) = serve(&redis.addr());
    let (_db, b) = serve(&redis.addr());
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    assert_eq!(take(&mut ca, ("user", "dave"), "r1").await, OK);
    assert_eq!(take(&mut ca, ("user", "dave"), "r2").await, OK);
    // A forged holder, a repeated decrement: nothing freed.
    assert_eq!(give_back(&mut cb, ("user", "dave"), "forged").await, 0);
    assert_eq!(give_back(&mut cb, ("user", "dave"), "r1").await, 1);
    assert_eq!(give_back(&mut ca, ("user", "dave"), "r1").await, 1, "once");
    assert_eq!(give_back(&mut cb, ("user", "dave"), "r1").await, 1);
    assert_eq!(take(&mut cb, ("user", "dave"), "r3").await, OK);
    assert_eq!(take(&mut ca, ("user", "dave"), "r4").await, OVER);
    // Exact while nothing crashes: two in flight, never three.
    assert_eq!(give_back(&mut ca, ("user", "dave"), "r2").await, 1);
    assert_eq!(give_back(&mut cb, ("user", "dave"), "r3").await, 2);
    for n in 0..20 {
        let (x, y) = (format!("x{n}"), format!("y{n}"));
        assert_eq!(take(&mut ca, ("user", "erin"), &x).await, OK);
        assert_eq!(take(&mut cb, ("user", "erin"), &y).await, OK);
        assert_eq!(take(&mut ca, ("user", "erin"), "z").await, OVER);
        assert_eq!(give_back(&mut cb, ("user", "erin"), &x).await, 1);
        assert_eq!(give_back(&mut ca, ("user", "erin"), &y).await, 2);
    }
}

/// `POST /v1/release` of `who, request_id: r` with any permit: its
/// status and body.
fn release_http(s: &Floodgate, (key, user): Who, request: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({
        "domain": "inflight",
        "descriptors": [{"entries": [
            {"key": key, "value": user},
            {"key": "request_id", "value": request},
        ]}],
        "permit": "218897262380372659016410457313861270815",
    });
    let (status, text) = floodgate_testkit::http_request(
        s.http,
        "POST",
        "/v1/release",
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .unwrap();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// In memory, through the HTTP API as well as RLS: a release or a negative
/// hit naming another holder, or repeated, frees nothing (409
/// `PERMIT_NOT_HELD`, counted `not_held`); the holder's own frees its unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_repeated_releases_free_nothing_in_memory() {
    let (_dir, s) = serve_in_memory();
    let mut c = client(&s).await;
    assert_eq!(take(&mut c, ("user", "frank"), "r1").await, OK);
    assert_eq!(take(&mut c, ("user", "frank"), "r2").await, OK);
    for forged in ["r3", "R1", "r1 ", ""] {
        let (status, body) = release_http(&s, ("user", "frank"), forged);
        assert_eq!(status, 409, "{forged:?}: {body}");
        assert_eq!(body["error"]["code"], "PERMIT_NOT_HELD", "{body}");
        assert_eq!(give_back(&mut c, ("user", "frank"), forged).await, 0);
    }
    assert_eq!(take(&mut c, ("user", "frank"), "r3").await, OVER);
    let (status, body) = release_http(&s, ("user", "frank"), "r1");
    assert_eq!(
        (status, &body["units"]),
        (200, &serde_json::json!(1)),
        "{body}"
    );
    assert_eq!(release_http(&s, ("user", "frank"), "r1").0, 409, "once");
    assert_eq!(give_back(&mut c, ("user", "frank"), "r1").await, 1);
    assert_eq!(take(&mut c, ("user", "frank"), "r3").await, OK);
    assert_eq!(take(&mut c, ("user", "frank"), "r4").await, OVER);
    assert!(s.metric("floodgate_releases_total{result=\"not_held\"}") >= 5.0);
}
