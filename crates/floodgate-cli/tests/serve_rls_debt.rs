//! Costs known after the response over RLS, as Envoy sends them (a check,
//! `hits_addend: 0`, when the request starts; the real cost, `hits_addend`
//! with `apply_on_stream_done`, when its stream is done), through the real
//! `floodgate serve` binary: a cost past what is left is charged whole
//! (`penalty: true`), the next check is denied with the reset of the limit
//! in debt, a token bucket's debt is repaid by its drip while denied checks
//! charge nothing, a day window's stays until the day ends. The server's
//! clock is real: the numbers here are loose; the exact ones are the policy
//! crate's property test (`debt`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::Floodgate;

use crate::serve_support::{DAY, clear_of_boundary, serve_envoy_file};

/// Tokens per user: 10 a second (bursts of 10), and 25 a day.
const RULES: &str = "domain: llm
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 10, penalty: true}
  - key: user_day
    rate_limit: {requests: 25, per: 1d, penalty: true}
";

type Client = RateLimitServiceClient<tonic::transport::Channel>;

const OK: i32 = 1;
const OVER: i32 = 2;

fn serve() -> (tempfile::TempDir, Floodgate) {
    serve_envoy_file("llm.yaml", RULES, &[("FLOODGATE_SHUTDOWN_GRACE", "0")])
}

/// `key: user` charged `hits` (0: a check).
fn tokens(key: &str, user: &str, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: user.into(),
        }],
        hits_addend: Some(hits),
        ..Default::default()
    }
}

/// The overall code and each status's (code, duration_until_reset s).
async fn call(c: &mut Client, descriptors: Vec<RateLimitDescriptor>) -> (i32, Vec<(i32, u64)>) {
    let request = RateLimitRequest {
        domain: "llm".into(),
        descriptors,
        hits_addend: 0,
    };
    let r = c.should_rate_limit(request).await.unwrap().into_inner();
    let statuses = r
        .statuses
        .iter()
        .map(|s| {
            let reset = s
                .duration_until_reset
                .as_ref()
                .map_or(0, |d| d.seconds as u64);
            (s.code, reset)
        })
        .collect();
    (r.overall_code, statuses)
}

/// Seconds to the end of the current UTC day.
fn to_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    DAY.as_secs() - now % DAY.as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_after_the_response_puts_a_user_in_debt_until_refill() {
    let (_dir, s) = serve();
    clear_of_boundary(DAY, Duration::from_secs(60));
    let mut c = Client::connect(format!("http://{}", s.grpc_addr()))
        .await
        .unwrap();
    let both = |hits| {
        vec![
            tokens("user", "alice", hits),
            tokens("user_day", "alice", hits),
        ]
    };
    // The request starts: a check, nothing charged.
    assert_eq!(call(&mut c, both(0)).await.0, OK);
    // Its stream is done: 30 tokens, more than either limit holds, charged
    // whole (the answer goes nowhere: Envoy ignores it).
    assert_eq!(call(&mut c, both(30)).await.0, OVER);
    // In debt: the bucket is full again in 3 s (20 owed, 10 to refill), the
    // day when it ends.
    let (code, statuses) = call(&mut c, both(0)).await;
    assert_eq!(code, OVER);
    assert_eq!(statuses[0].0, OVER);
    assert!((2..=3).contains(&statuses[0].1), "{statuses:?}");
    assert_eq!(statuses[1].0, OVER);
    assert!(statuses[1].1.abs_diff(to_midnight()) <= 2, "{statuses:?}");

    // A bucket alone: its 20 owed drip back in 2 s; checks asked meanwhile
    // are denied and charge nothing.
    let bob = |hits| vec![tokens("user", "bob", hits)];
    assert_eq!(call(&mut c, bob(0)).await.0, OK);
    call(&mut c, bob(30)).await;
    let charged = Instant::now();
    while call(&mut c, bob(0)).await.0 == OVER {
        assert!(charged.elapsed() < Duration::from_secs(20), "never repaid");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        charged.elapsed() >= Duration::from_millis(1_900),
        "{:?}",
        charged.elapsed()
    );
    // alice's day is still in debt: the bucket has refilled, the day has not.
    let (code, statuses) = call(&mut c, both(0)).await;
    assert_eq!((code, statuses[0].0, statuses[1].0), (OVER, OK, OVER));
}
