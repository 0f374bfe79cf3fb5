//! Costs known after the response (`http.response_cost`), through the layer
//! in process on a manual clock: read from a header or a trailer, capped,
//! charged whole past the limit (debt), the next request denied with the
//! exact `Retry-After` until the refill repays it; garbage values, a body
//! the client leaves early, and the configuration's errors. A property
//! test plays random costs and gaps against a model of the balance.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use floodgate::{ManualClock, Timestamp};
use floodgate_http::identity::CostRead;
use floodgate_http::layer::PeerAddr;
use floodgate_http::{FloodgateLayer, HttpSection};
use floodgate_policy::MemoryBackend;
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use http_body_util::BodyExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use proptest::prelude::*;
use support::{engine_with, layer_for, manual};
use tower::{Layer, ServiceExt};

/// 100 tokens per 10 s: one every 100 ms; tokens spent drip back.
fn policy(cost: &str) -> String {
    format!(
        r#"
domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {{name: tokens, algorithm: token_bucket, requests: 100, per: 10s}}
http:
  domain: llm
  descriptors:
    - [{{user: {{header: x-user}}}}]
  {cost}
"#
    )
}

const HEADER: &str = "response_cost: {header: x-tokens-used, cap: 1000, default: 0}";
const TRAILER: &str = "response_cost: {trailer: x-tokens-used, cap: 1000, default: 0}";

/// A response body: one chunk, then the trailers if any.
struct Reply {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
}

type Layered = FloodgateLayer<MemoryBackend, Arc<ManualClock>>;

struct Llm {
    clock: Arc<ManualClock>,
    layer: Layered,
    snapshotter: Snapshotter,
}

impl Llm {
    fn new(cost: &str) -> Llm {
        let clock = manual();
        clock.set(Timestamp::from_secs(1_700_000_000));
        let text = policy(cost);
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let layer = metrics::with_local_recorder(&recorder, || {
            layer_for(engine_with(&text, clock.clone()), &text)
        });
        Llm {
            clock,
            layer,
            snapshotter,
        }
    }

    /// A request of `user` whose upstream says it cost `tokens` (none: it
    /// says nothing), in its headers and its trailers alike; the response
    /// with its body not read yet.
    async fn ask(
        &self,
        user: &str,
        tokens: Option<&str>,
    ) -> http::Response<floodgate_http::layer::FloodgateBody<Reply>> {
        let tokens = tokens.map(|t| HeaderValue::from_str(t).unwrap());
        let svc = self
            .layer
            .layer(tower::service_fn(move |_req: http::Request<()>| {
                let tokens = tokens.clone();
                async move {
                    let mut trailers = HeaderMap::new();
                    let mut res = http::Response::new(());
                    if let Some(t) = tokens {
                        trailers.insert("x-tokens-used", t.clone());
                        res.headers_mut().insert("x-tokens-used", t);
                    }
                    let body = Reply {
                        data: Some(Bytes::from_static(b"answer")),
                        trailers: Some(trailers),
                    };
                    Ok::<_, Infallible>(res.map(|()| body))
                }
            }));
        let mut req = http::Request::new(());
        let peer: SocketAddr = "198.51.100.7:40000".parse().unwrap();
        req.extensions_mut().insert(PeerAddr(peer));
        for name in ["x-user", "x-user-id"] {
            req.headers_mut()
                .insert(name, HeaderValue::from_str(user).unwrap());
        }
        svc.oneshot(req).await.unwrap()
    }

    /// [`ask`](Self::ask), the body read to its end; the status and
    /// `Retry-After`.
    async fn call(&self, user: &str, tokens: Option<&str>) -> (u16, Option<u64>) {
        let res = self.ask(user, tokens).await;
        let status = res.status().as_u16();
        let retry = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().unwrap());
        res.into_body().collect().await.unwrap();
        (status, retry)
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// `floodgate_http_response_costs_total{result}` for each result since
    /// the last call (a snapshot takes the counts).
    fn counted(&self) -> [u64; 5] {
        let mut out = [0; 5];
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            if key.name() != "floodgate_http_response_costs_total" {
                continue;
            }
            let result = key.labels().find(|l| l.key() == "result").unwrap();
            let i = CostRead::LABELS.iter().position(|l| *l == result.value());
            if let (Some(i), DebugValue::Counter(n)) = (i, value) {
                out[i] = n;
            }
        }
        out
    }
}

/// 250 tokens on a bucket of 100: 150 owed, repaid in 15 s; denied until
/// then with the exact `Retry-After`, admitted at it.
async fn debt_is_repaid(cost: &str) {
    let llm = Llm::new(cost);
    assert_eq!(llm.call("alice", Some("250")).await, (200, None));
    assert_eq!(llm.call("alice", Some("5")).await, (429, Some(15)));
    assert_eq!(llm.call("bob", Some("5")).await.0, 200, "one user's debt");
    llm.advance(Duration::from_secs(15) - Duration::from_nanos(1));
    assert_eq!(llm.call("alice", None).await.0, 429);
    llm.advance(Duration::from_nanos(1));
    assert_eq!(llm.call("alice", Some("0")).await, (200, None));
    assert_eq!(llm.counted(), [3, 0, 0, 0, 0]);
}

#[tokio::test]
async fn a_cost_in_a_header_is_charged_whole_and_repaid_by_refill() {
    debt_is_repaid(HEADER).await;
}

#[tokio::test]
async fn a_cost_in_a_trailer_is_charged_whole_and_repaid_by_refill() {
    debt_is_repaid(TRAILER).await;
}

/// A header's cost is charged as the head is seen; a trailer's only as
/// the body ends with it.
#[tokio::test]
async fn a_header_is_charged_with_the_head_a_trailer_at_the_end() {
    let llm = Llm::new(HEADER);
    let unread = llm.ask("alice", Some("150")).await;
    assert_eq!(llm.call("alice", None).await, (429, Some(5)));
    drop(unread);
    let llm = Llm::new(TRAILER);
    let unread = llm.ask("alice", Some("150")).await;
    assert_eq!(llm.call("alice", None).await.0, 200, "not charged yet");
    unread.into_body().collect().await.unwrap();
    assert_eq!(llm.call("alice", None).await, (429, Some(5)));
}

/// A trailer's cost counts as the trailers are seen, before the body's
/// end is asked for (in memory at once; a remote store's charge holds the
/// trailers back until it is done): a client that sends its next request
/// as soon as they arrive finds it charged.
#[tokio::test]
async fn a_trailer_is_charged_before_it_goes_out() {
    let llm = Llm::new(TRAILER);
    let mut body = llm.ask("alice", Some("150")).await.into_body();
    loop {
        let frame = body.frame().await.expect("trailers").unwrap();
        if frame.is_trailers() {
            break;
        }
    }
    assert_eq!(llm.call("alice", None).await, (429, Some(5)));
    assert!(body.frame().await.is_none());
}

/// Above the cap (however long) charges the cap; absent or garbage charges
/// `default`; each counted by how it was found.
#[tokio::test]
async fn the_cap_and_the_default_bound_what_an_upstream_says() {
    let llm = Llm::new("response_cost: {header: x-tokens-used, cap: 300, default: 10}");
    let huge = "9".repeat(100);
    assert_eq!(llm.call("alice", Some(&huge)).await.0, 200);
    // 300 charged: 200 owed.
    assert_eq!(llm.call("alice", None).await, (429, Some(20)));
    for bad in ["-5", "1.5", "12abc", "", " "] {
        assert_eq!(llm.call("bob", Some(bad)).await.0, 200, "{bad:?}");
    }
    assert_eq!(llm.call("bob", None).await.0, 200);
    // 6 × 10 = 60 charged, then 80: 40 owed.
    assert_eq!(llm.call("bob", Some("80")).await.0, 200);
    assert_eq!(llm.call("bob", None).await, (429, Some(4)));
    // [read, capped, missing, invalid, unfinished]
    assert_eq!(llm.counted(), [1, 1, 1, 5, 0]);
}

/// A client leaving before the trailers is charged the cap (leaving early
/// does not escape a cost); a header's cost is charged as it said.
#[tokio::test]
async fn a_client_leaving_early_is_charged_the_cap_of_a_trailer() {
    let llm = Llm::new("response_cost: {trailer: x-tokens-used, cap: 300, default: 0}");
    let res = llm.ask("alice", Some("10")).await;
    drop(res);
    assert_eq!(llm.call("alice", None).await, (429, Some(20)));
    assert_eq!(llm.counted(), [0, 0, 0, 0, 1]);
    let llm = Llm::new("response_cost: {header: x-tokens-used, cap: 300, default: 0}");
    drop(llm.ask("alice", Some("110")).await);
    assert_eq!(llm.call("alice", None).await, (429, Some(1)));
    assert_eq!(llm.counted(), [1, 0, 0, 0, 0]);
}

/// With a request cost, admission charges it and the response the rest.
#[tokio::test]
async fn a_request_cost_is_a_deposit_the_response_completes() {
    let cost =
        "cost: {header: x-estimate, max: 100}\n  response_cost: {header: x-tokens-used, cap: 1000}";
    let llm = Llm::new(cost);
    // No estimate: the request costs 1 (the default), the response 120 in
    // all: 20 owed.
    assert_eq!(llm.call("alice", Some("120")).await.0, 200);
    assert_eq!(llm.call("alice", None).await, (429, Some(3)));
}

/// Beside the tokens, requests per address (3 a minute) and at most 2 in
/// flight per user.
const MIXED: &str = r#"
domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {name: tokens, algorithm: token_bucket, requests: 100, per: 10s}
      - key: remote_address
        rate_limit: {name: requests, requests: 3, per: 1m}
      - key: inflight
        rate_limit: {name: inflight, algorithm: concurrency, max: 2}
http:
  domain: llm
  descriptors:
    - [{user: {header: x-user}}]
    - [client_ip]
    - [{user: {header: x-user, key: inflight}}]
  response_cost: {header: x-tokens-used, cap: 1000, keys: [user]}
"#;

/// An [`Llm`] of the policy file `text`.
fn llm_of(text: &str) -> Llm {
    let clock = manual();
    let engine = engine_with(text, clock.clone());
    Llm {
        layer: layer_for(engine, text),
        clock,
        snapshotter: DebuggingRecorder::new().snapshotter(),
    }
}

/// With `keys`, the tokens go to the descriptors named; the others count
/// requests as ever.
#[tokio::test]
async fn keys_choose_the_descriptors_that_carry_the_cost() {
    let llm = llm_of(MIXED);
    assert_eq!(llm.call("alice", Some("1")).await.0, 200);
    let held = [
        llm.ask("alice", Some("1")).await,
        llm.ask("alice", Some("1")).await,
    ];
    assert!(held.iter().all(|r| r.status() == 200));
    assert_eq!(
        llm.ask("alice", None).await.status(),
        429,
        "3 requests a minute"
    );
    drop(held);
    llm.advance(Duration::from_secs(60));
    assert_eq!(llm.call("bob", Some("1")).await.0, 200);
    let held = [llm.ask("bob", None).await, llm.ask("bob", None).await];
    assert_eq!(llm.ask("bob", None).await.status(), 429, "2 in flight");
    drop(held);
    // The tokens alone reach the bucket: 150 of 100, 50 owed.
    llm.advance(Duration::from_secs(60));
    assert_eq!(llm.call("carol", Some("150")).await.0, 200);
    assert_eq!(llm.call("carol", None).await, (429, Some(5)));
}

/// A concurrency limit among the descriptors carrying the cost is never
/// charged after: its units would never come back.
#[tokio::test]
async fn a_concurrency_limit_is_never_charged_after() {
    let text = MIXED.replace("    - [client_ip]\n", "").replace(
        "response_cost: {header: x-tokens-used, cap: 1000, keys: [user]}",
        "cost: {header: x-estimate, max: 10}\n  response_cost: {header: x-tokens-used, cap: 1000}",
    );
    let llm = llm_of(&text);
    for _ in 0..3 {
        // 1 unit taken at admission and given back, 1 more token after.
        assert_eq!(llm.call("alice", Some("2")).await.0, 200);
    }
    let held = [llm.ask("alice", None).await, llm.ask("alice", None).await];
    assert!(held.iter().all(|r| r.status() == 200), "no unit leaked");
}

/// The recipe of docs/gateway.md reads, and charges as it says: 30 000
/// tokens on 20 000 a minute owe 10 000, repaid in 30 s; the day's window
/// counts them too.
#[tokio::test]
async fn the_documented_recipe_charges_as_it_says() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/gateway.md"
    ))
    .unwrap();
    let recipe = doc
        .split("```yaml\n")
        .find(|b| b.starts_with("http:\n  domain: llm"))
        .and_then(|b| b.split("```").next())
        .expect("docs/gateway.md has the token recipe");
    let llm = llm_of(recipe);
    assert_eq!(llm.call("alice", Some("30000")).await.0, 200);
    assert_eq!(llm.call("alice", None).await, (429, Some(30)));
    llm.advance(Duration::from_secs(30));
    assert_eq!(llm.call("alice", Some("0")).await, (200, None));
}

#[test]
fn nonsense_is_refused_where_it_is_written() {
    let errors = |cost: &str| {
        HttpSection::from_yaml_str("test.yaml", &policy(cost))
            .unwrap_err()
            .to_string()
    };
    let e = errors("response_cost: {header: x-t, cap: 0}");
    assert!(
        e.contains("test.yaml:11:37: response_cost cap must be from 1 to 1000000000000 (got `0`)"),
        "{e}"
    );
    let e = errors("response_cost: {header: x-t, trailer: x-t, cap: 5}");
    assert!(
        e.contains("test.yaml:11:41: response_cost takes either 'header' or 'trailer'"),
        "{e}"
    );
    let e = errors("response_cost: {cap: 5, default: 6}");
    assert!(
        e.contains("test.yaml:11:18: response_cost needs 'header' or 'trailer'"),
        "{e}"
    );
    assert!(
        e.contains("test.yaml:11:36: response_cost default must be from 0 to 5 (got `6`)"),
        "{e}"
    );
    let e = errors("response_cost: {header: x-t}");
    assert!(e.contains("missing required key 'cap'"), "{e}");
    let e = errors("response_cost: {header: x-t, cap: 5, keys: [user, plan]}");
    assert!(
        e.contains(
            "test.yaml:11:53: response_cost keys: no descriptor starts with an entry of `plan`"
        ),
        "{e}"
    );
    let e = errors("response_cost: {header: x-t, cap: 5, capp: 6}");
    assert!(e.contains("capp"), "{e}");
}

const LIMIT: u64 = 100;
const TICK: u64 = 100_000_000;

/// Random costs at random gaps: every request admitted exactly while the
/// balance is not negative, a 429's `Retry-After` the exact debt ÷ rate
/// rounded up, and the cost admitted over any span at most the burst,
/// plus the refill over the span, plus the largest cost.
fn play(steps: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let llm = Llm::new(HEADER);
        let (mut credit, mut now) = (i128::from(LIMIT * TICK), 0u64);
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for &(gap, cost) in steps {
            llm.advance(Duration::from_millis(gap));
            now += gap * 1_000_000;
            credit = (credit + i128::from(gap * 1_000_000)).min(i128::from(LIMIT * TICK));
            let (status, retry) = llm.call("alice", Some(&cost.to_string())).await;
            prop_assert_eq!(status == 200, credit >= 0, "credit {}", credit);
            if status == 200 {
                credit -= i128::from(cost.min(1000) * TICK);
                admitted.push((now, cost.min(1000)));
            } else {
                let debt = (-credit) as u64;
                prop_assert_eq!(retry, Some(debt.div_ceil(1_000_000_000)));
            }
        }
        let largest = admitted.iter().map(|a| a.1).max().unwrap_or(0);
        for (i, &(a, _)) in admitted.iter().enumerate() {
            let mut sum = 0;
            for &(b, cost) in &admitted[i..] {
                sum += cost;
                prop_assert!(sum <= LIMIT + (b - a) / TICK + largest);
            }
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn debt_numbers_are_exact_and_the_admitted_total_bounded(
        steps in prop::collection::vec(
            (prop_oneof![3 => 0..200u64, 2 => 0..3_000u64, 1 => Just(0u64)],
             prop_oneof![4 => 0..=20u64, 2 => 1..=LIMIT, 1 => LIMIT..=1500]),
            1..80,
        )
    ) {
        play(&steps)?;
    }
}
