//! The client helper against a real server using the layer: it never
//! retries before `Retry-After`, backs off with jitter within bounds,
//! respects its budget, and slows down near exhaustion.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate::SystemClock;
use floodgate_http::client::{
    Backoff, BudgetConfig, GiveUp, Next, Retrier, RetryBudget, RetryPolicy, RetryState, Rng,
    Signals,
};
use floodgate_policy::engine::RequestLimits;
use support::{app, client, engine_with, layer_for, serve};

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
"#
    )
}

async fn server(text: &str) -> String {
    serve(app(layer_for(engine_with(text, SystemClock), text))).await
}

/// Attempts as (time since start, status, Retry-After).
type Log = Arc<Mutex<Vec<(Duration, u16, Option<u64>)>>>;

async fn run(retrier: &Retrier, url: &str, log: &Log, start: Instant) -> u16 {
    let c = client();
    let res = retrier
        .send(&http::Method::GET, || {
            let (c, url, log) = (c.clone(), url.to_owned(), log.clone());
            async move {
                let res = c.get(&url).send().await.map(http::Response::from)?;
                let ra = res
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse().ok());
                log.lock()
                    .unwrap()
                    .push((start.elapsed(), res.status().as_u16(), ra));
                Ok::<_, reqwest::Error>(res)
            }
        })
        .await
        .unwrap();
    res.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_retries_before_retry_after() {
    let text = config("algorithm: token_bucket, requests: 1, per: 1500ms, burst: 1");
    let url = server(&text).await;
    let retrier = Retrier::default();
    let log: Log = Arc::default();
    let start = Instant::now();
    // Spend the quota with another client (no pacing from it).
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    assert_eq!(run(&retrier, &url, &log, start).await, 200);
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    let (t429, status, ra) = log[0];
    assert_eq!(status, 429);
    let ra = ra.unwrap();
    assert_eq!(ra, 2, "ceil(1.5 s - a little)");
    let waited = log[1].0 - t429;
    assert!(waited >= Duration::from_secs(ra), "{waited:?}");
    // The jitter on top stays within the backoff base.
    assert!(
        waited < Duration::from_secs(ra) + Duration::from_millis(400),
        "{waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backs_off_with_jitter_within_bounds_and_respects_the_budget() {
    // A server whose limiter fails closed: 503 without Retry-After.
    let text = format!(
        "{}  layer: {{on_error: reject}}\n",
        config("requests: 100, per: 1s")
    );
    let engine = engine_with(&text, SystemClock);
    let engine = Arc::try_unwrap(engine)
        .ok()
        .unwrap()
        .with_request_limits(RequestLimits {
            max_entry_bytes: 4,
            ..RequestLimits::default()
        });
    let url = serve(app(layer_for(Arc::new(engine), &text))).await;

    let backoff = Backoff {
        base: Duration::from_millis(40),
        max: Duration::from_millis(120),
    };
    let policy = RetryPolicy {
        max_attempts: 5,
        backoff,
        ..RetryPolicy::default()
    };
    let budget = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 10.0,
        min_per_sec: 0.0,
        max_saved: 10.0,
    }));
    let retrier = Retrier::new(policy, budget);
    let log: Log = Arc::default();
    let start = Instant::now();
    assert_eq!(run(&retrier, &url, &log, start).await, 503);
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 5, "{log:?}");
    for (i, w) in log.windows(2).enumerate() {
        let gap = w[1].0 - w[0].0;
        let ceiling = backoff.ceiling(i as u32);
        assert!(
            gap <= ceiling + Duration::from_millis(60),
            "retry {i}: {gap:?} > {ceiling:?}"
        );
    }

    // A budget of 10 % and no steady allowance: 20 requests, 2 retries.
    let budget = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 0.1,
        min_per_sec: 0.0,
        max_saved: 10.0,
    }));
    let retrier = Retrier::new(policy, budget);
    let log: Log = Arc::default();
    for _ in 0..20 {
        assert_eq!(run(&retrier, &url, &log, start).await, 503);
    }
    assert_eq!(log.lock().unwrap().len(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slows_down_near_exhaustion() {
    let text = config("algorithm: token_bucket, requests: 5, per: 1s, burst: 5");
    // Without pacing, a burst of 8 is partly refused.
    let url = server(&text).await;
    let c = client();
    let mut refused = 0;
    for _ in 0..8 {
        if c.get(&url).send().await.unwrap().status() == 429 {
            refused += 1;
        }
    }
    assert!(refused >= 2, "{refused}");
    // With pacing, every one passes, spread at the refill rate.
    let url = server(&text).await;
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let retrier = Retrier::new(policy, Arc::default());
    let log: Log = Arc::default();
    let start = Instant::now();
    for _ in 0..8 {
        assert_eq!(run(&retrier, &url, &log, start).await, 200);
    }
    assert!(
        start.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn state_and_signals() {
    let budget = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 1.0,
        min_per_sec: 0.0,
        max_saved: 10.0,
    }));
    let mut h = http::HeaderMap::new();
    // HTTP-date Retry-After, in the future.
    let at = std::time::SystemTime::now() + Duration::from_secs(30);
    h.insert("retry-after", httpdate::fmt_http_date(at).parse().unwrap());
    let mut s = RetryState::new(RetryPolicy::default(), budget.clone())
        .for_method(&http::Method::GET)
        .with_rng(Rng::with_seed(7));
    match s.on_response(503, &h) {
        Next::Retry { after } => assert!(after >= Duration::from_secs(28), "{after:?}"),
        other => panic!("{other:?}"),
    }
    // Too long a wait: give up rather than hang.
    h.insert("retry-after", "3600".parse().unwrap());
    let mut s = RetryState::new(RetryPolicy::default(), budget.clone());
    assert_eq!(
        s.on_response(429, &h),
        Next::GiveUp {
            reason: GiveUp::TooLong(Duration::from_secs(3600)),
            pace: Duration::from_secs(3600)
        }
    );
    // Success near exhaustion: a pace.
    let mut h = http::HeaderMap::new();
    h.insert(
        "ratelimit",
        r#""day";r=100;t=3600, hour;r=3;t=40;acme-x=?1"#.parse().unwrap(),
    );
    let mut s = RetryState::new(RetryPolicy::default(), budget.clone());
    assert_eq!(
        s.on_response(200, &h),
        Next::Done {
            pace: Duration::from_secs(10)
        }
    );
    // Malformed RateLimit is ignored; the legacy headers are read.
    let mut h = http::HeaderMap::new();
    h.insert("ratelimit", r#""day";r=1;t="#.parse().unwrap());
    h.insert("x-ratelimit-remaining", "0".parse().unwrap());
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 20;
    h.insert("x-ratelimit-reset", epoch.to_string().parse().unwrap());
    let sig = Signals::from_headers(&h, std::time::SystemTime::now());
    assert_eq!(sig.remaining, Some(0));
    assert!(
        sig.reset.unwrap() <= Duration::from_secs(20)
            && sig.reset.unwrap() >= Duration::from_secs(18)
    );
    // `RateLimit` is read as RFC 9651 says: unknown parameters of any type
    // are skipped, inner lists are not positions, and a field that is not a
    // List (an empty member, a key starting with a digit, a token with a
    // character tokens cannot hold, an Integer of 16 digits) is ignored:
    // the older headers decide.
    let read = |ratelimit: &str| {
        let mut h = http::HeaderMap::new();
        h.insert("ratelimit", ratelimit.parse().unwrap());
        h.insert("x-ratelimit-remaining", "7".parse().unwrap());
        Signals::from_headers(&h, std::time::SystemTime::now()).remaining
    };
    assert_eq!(read(r#"x;q=1;w=2;pk=:AAE=:;r=3;d=1.5;b=?1"#), Some(3));
    assert_eq!(read(r#"("a" "b");r=1, "c";r=4"#), Some(4));
    for malformed in [
        "a;r=1, , b;r=0",
        r#""a";r=5;1x=2"#,
        "a[b;r=1",
        "a;r=1234567890123456",
        r#""a";r=1;t="#,
    ] {
        assert_eq!(read(malformed), Some(7), "{malformed}");
    }
    // Jitter stays within the ceiling and varies.
    let b = Backoff::default();
    let mut rng = Rng::with_seed(1);
    let waits: Vec<_> = (0..50).map(|_| b.wait(3, &mut rng)).collect();
    assert!(waits.iter().all(|w| *w <= b.ceiling(3)));
    assert!(waits.iter().any(|w| *w != waits[0]));
}

#[test]
fn giving_up_keeps_the_servers_wait_as_the_pace() {
    let budget = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 1.0,
        min_per_sec: 0.0,
        max_saved: 10.0,
    }));
    let mut h = http::HeaderMap::new();
    h.insert("retry-after", "7".parse().unwrap());
    // Attempts spent.
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let mut s = RetryState::new(policy, budget.clone()).for_method(&http::Method::GET);
    assert_eq!(
        s.on_response(429, &h),
        Next::GiveUp {
            reason: GiveUp::Attempts,
            pace: Duration::from_secs(7)
        }
    );
    // Budget spent.
    let empty = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 0.0,
        min_per_sec: 0.0,
        max_saved: 0.0,
    }));
    let mut s = RetryState::new(RetryPolicy::default(), empty).for_method(&http::Method::GET);
    assert_eq!(
        s.on_response(503, &h),
        Next::GiveUp {
            reason: GiveUp::Budget,
            pace: Duration::from_secs(7)
        }
    );
    // Without Retry-After, an exhausted quota's reset is the wait.
    let mut h = http::HeaderMap::new();
    h.insert("ratelimit", r#""p";r=0;t=4"#.parse().unwrap());
    let mut s = RetryState::new(policy, budget).for_method(&http::Method::GET);
    assert_eq!(
        s.on_response(429, &h),
        Next::GiveUp {
            reason: GiveUp::Attempts,
            pace: Duration::from_secs(4)
        }
    );
}

#[test]
fn non_idempotent_requests_are_retried_only_when_unprocessed() {
    let budget = Arc::new(RetryBudget::new(BudgetConfig {
        ratio: 10.0,
        min_per_sec: 0.0,
        max_saved: 100.0,
    }));
    let none = http::HeaderMap::new();
    let mut ra = http::HeaderMap::new();
    ra.insert("retry-after", "1".parse().unwrap());
    let state =
        |policy, method: &http::Method| RetryState::new(policy, budget.clone()).for_method(method);
    let not_idempotent = |n: Next| {
        matches!(
            n,
            Next::GiveUp {
                reason: GiveUp::NotIdempotent,
                ..
            }
        )
    };
    let retried = |n: Next| matches!(n, Next::Retry { .. });
    let policy = RetryPolicy::default();
    for method in [http::Method::POST, http::Method::PATCH] {
        // Possibly processed: not sent again.
        for status in [502, 504] {
            assert!(not_idempotent(
                state(policy, &method).on_response(status, &none)
            ));
        }
        assert!(not_idempotent(
            state(policy, &method).on_response(503, &none)
        ));
        assert!(not_idempotent(state(policy, &method).on_error()));
        // Rejected before processing: retried.
        assert!(retried(state(policy, &method).on_response(429, &none)));
        assert!(retried(state(policy, &method).on_response(429, &ra)));
        assert!(retried(state(policy, &method).on_response(503, &ra)));
    }
    // An unknown method is not assumed idempotent.
    assert!(not_idempotent(
        RetryState::new(policy, budget.clone()).on_response(502, &none)
    ));
    // Idempotent methods: retried after all of them.
    for method in [http::Method::GET, http::Method::PUT, http::Method::DELETE] {
        for status in [502, 503, 504] {
            assert!(retried(state(policy, &method).on_response(status, &none)));
        }
        assert!(retried(state(policy, &method).on_error()));
    }
    // Configurable.
    let lenient = RetryPolicy {
        retry_non_idempotent: true,
        ..RetryPolicy::default()
    };
    assert!(retried(
        state(lenient, &http::Method::POST).on_response(502, &none)
    ));
    assert!(retried(state(lenient, &http::Method::POST).on_error()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_giving_up_the_next_send_waits_for_retry_after() {
    let text = config("algorithm: token_bucket, requests: 1, per: 1500ms, burst: 1");
    let url = server(&text).await;
    // One attempt only: the 429 is final, but its Retry-After holds.
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let retrier = Retrier::new(policy, Arc::default());
    let log: Log = Arc::default();
    let start = Instant::now();
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    assert_eq!(run(&retrier, &url, &log, start).await, 429);
    assert!(retrier.pending_pace() > Duration::from_secs(1));
    assert_eq!(run(&retrier, &url, &log, start).await, 200);
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    let (t429, status, ra) = log[0];
    assert_eq!(status, 429);
    let waited = log[1].0 - t429;
    assert!(waited >= Duration::from_secs(ra.unwrap()), "{waited:?}");
}
