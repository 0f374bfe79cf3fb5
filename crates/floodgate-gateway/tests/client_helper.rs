//! The client helper (`floodgate_http::client::Retrier`) against the real
//! gateway in front of a real upstream: it never sends before
//! `Retry-After` (when retrying, and after giving up), and it does not
//! repeat a POST the upstream may have processed.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate_http::client::{Backoff, BudgetConfig, Retrier, RetryBudget, RetryPolicy};
use support::{ConfigFile, gateway, h1, upstream};

const LIMITED: &str = r#"
http:
  domain: gw
  descriptors:
    - [client_ip]
domains:
  - domain: gw
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: token_bucket, requests: 1, per: 900ms, burst: 1}
server: {reload_interval: 0}
"#;

/// Attempts as (time since start, status, Retry-After).
type Log = Arc<Mutex<Vec<(Duration, u16, Option<u64>)>>>;

async fn send(
    retrier: &Retrier,
    method: http::Method,
    url: &str,
    log: &Log,
    start: Instant,
) -> u16 {
    let c = h1();
    let res = retrier
        .send(&method, || {
            let (c, url, log, method) = (c.clone(), url.to_owned(), log.clone(), method.clone());
            async move {
                let res = c
                    .request(method, &url)
                    .send()
                    .await
                    .map(http::Response::from)?;
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

/// Every attempt after a response with `Retry-After` came at least that
/// much later.
fn assert_never_early(log: &[(Duration, u16, Option<u64>)]) {
    for w in log.windows(2) {
        if let (t, _, Some(ra)) = w[0] {
            let waited = w[1].0 - t;
            assert!(waited >= Duration::from_secs(ra), "{log:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retrier_never_comes_back_before_retry_after() {
    let up = upstream().await;
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let url = format!("http://{}/", gw.addr());
    let start = Instant::now();
    // The quota spent by another client.
    assert_eq!(h1().get(&url).send().await.unwrap().status(), 200);
    // Retrying: the 429's Retry-After, then a 200.
    let retrier = Retrier::default();
    let log: Log = Arc::default();
    assert_eq!(
        send(&retrier, http::Method::GET, &url, &log, start).await,
        200
    );
    {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2, "{log:?}");
        assert_eq!(log[0].1, 429);
        assert_eq!(log[0].2, Some(1));
        assert_never_early(&log);
    }
    // Giving up at once (one attempt): the next send still waits.
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let retrier = Retrier::new(policy, Arc::default());
    let log: Log = Arc::default();
    assert_eq!(
        send(&retrier, http::Method::GET, &url, &log, start).await,
        429
    );
    assert_eq!(
        send(&retrier, http::Method::GET, &url, &log, start).await,
        200
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_never_early(&log);
    assert_eq!(
        up.requests(),
        3,
        "only the admitted requests were forwarded"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_not_repeated_after_a_bad_gateway() {
    let dead = floodgate_testkit::free_port();
    let file = ConfigFile::new("server: {reload_interval: 0}\n");
    let gw = gateway(&file, &format!("http://127.0.0.1:{dead}")).await;
    let url = format!("http://{}/", gw.addr());
    let policy = RetryPolicy {
        backoff: Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(20),
        },
        ..RetryPolicy::default()
    };
    let budget = RetryBudget::new(BudgetConfig {
        ratio: 10.0,
        min_per_sec: 0.0,
        max_saved: 100.0,
    });
    let retrier = Retrier::new(policy, Arc::new(budget));
    let start = Instant::now();
    let log: Log = Arc::default();
    assert_eq!(
        send(&retrier, http::Method::POST, &url, &log, start).await,
        502
    );
    assert_eq!(log.lock().unwrap().len(), 1, "a POST is sent once");
    let log: Log = Arc::default();
    assert_eq!(
        send(&retrier, http::Method::GET, &url, &log, start).await,
        502
    );
    assert_eq!(log.lock().unwrap().len(), 4, "a GET is retried");
    gw.shutdown().await;
}
