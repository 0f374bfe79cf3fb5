//! Every number a client sees is consistent, over every algorithm and rule
//! shape, random limits and periods (also periods no unit expresses) and
//! random arrival times on a manual clock, through the layer in process:
//! - no header form reports more remaining than its limit;
//! - the forms agree with each other (`RateLimit`'s `r` and `t` are
//!   `X-RateLimit-Remaining` and `X-RateLimit-Reset`; the draft-03 quota is
//!   `RateLimit-Policy`'s `q`);
//! - a 429's `Retry-After` is the exact wait rounded up to a whole second,
//!   the request passes at the exact wait (a dry run), and at `Retry-After`
//!   it passes for real.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use floodgate::{Apply, Clock, ManualClock, Timestamp};
use floodgate_http::FloodgateLayer;
use floodgate_http::layer::PeerAddr;
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, Response};
use http_body_util::Full;
use proptest::prelude::*;
use sfv::{BareItem, ListEntry, Parser};
use std::sync::Arc;
use support::{engine_with, layer_for, manual};
use tower::{Layer, ServiceExt};

const PEER: &str = "198.51.100.7";

/// A rule shape: the text of its `rate_limit:` mapping.
fn rule() -> impl Strategy<Value = String> {
    let per = prop_oneof![
        Just("1s"),
        Just("1500ms"),
        Just("7s"),
        Just("10s"),
        Just("1m"),
        Just("90s"),
    ];
    prop_oneof![
        (1..12u32, per.clone())
            .prop_map(|(n, p)| format!("{{name: per-ip, requests: {n}, per: {p}}}")),
        (1..12u32, per.clone()).prop_map(|(n, p)| format!(
            "{{name: per-ip, algorithm: sliding_log, requests: {n}, per: {p}}}"
        )),
        (1..12u32, per.clone(), prop_oneof![Just(1u32), Just(2), Just(4), Just(5)]).prop_map(|(n, p, s)| format!(
            "{{name: per-ip, algorithm: sliding_window, requests: {n}, per: {p}, sub_windows: {s}}}"
        )),
        (1..12u32, per.clone(), 1..20u32).prop_map(|(n, p, b)| format!(
            "{{name: per-ip, algorithm: token_bucket, requests: {n}, per: {p}, burst: {b}}}"
        )),
        (1..12u32, per.clone(), 1..20u32).prop_map(|(n, p, b)| format!(
            "{{name: per-ip, algorithm: gcra, requests: {n}, per: {p}, burst: {b}}}"
        )),
        (1..30u32, 0..10u32).prop_map(|(r, b)| format!(
            "{{name: per-ip, algorithm: shaper, rate: {r}r/s, burst: {b}, nodelay: true}}"
        )),
        (1..12u32, per.clone(), 1..12u32, per).prop_map(|(n, p, m, q)| format!(
            "{{name: per-ip, limits: [{{algorithm: token_bucket, requests: {n}, per: {p}}}, \
             {{requests: {m}, per: {q}}}]}}"
        )),
    ]
}

fn config(rule: &str, cost: u32, forms: &str) -> String {
    format!(
        r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        cost: {cost}
        rate_limit: {rule}
http:
  domain: api
  descriptors:
    - [client_ip]
  responses: {{headers: [{forms}]}}
"#
    )
}

/// What one response said.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: http::HeaderMap,
}

impl Answer {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn num(&self, name: &str) -> Option<u64> {
        self.get(name)
            .map(|v| v.parse().unwrap_or_else(|e| panic!("{name}: {v}: {e}")))
    }
}

async fn send<C: Clock + 'static>(layer: &FloodgateLayer<MemoryBackend, C>) -> Answer {
    let svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let mut req = http::Request::new(());
    let peer: SocketAddr = format!("{PEER}:40000").parse().unwrap();
    req.extensions_mut().insert(PeerAddr(peer));
    let res = svc.oneshot(req).await.unwrap();
    Answer {
        status: res.status().as_u16(),
        headers: res.headers().clone(),
    }
}

/// The exact wait of the next request, and whether it passes now, from a
/// dry run.
async fn dry_run<C: Clock>(engine: &Engine<MemoryBackend, C>) -> (bool, Option<Duration>) {
    let d = [OwnedDescriptor::new([("remote_address", PEER)])];
    let mut r = Response::default();
    engine
        .evaluate_with("api", &d, 1, Apply::Check, &mut r)
        .await
        .unwrap();
    let n = r.narrowest().unwrap();
    (r.overall == floodgate_policy::Code::Ok, n.retry_after)
}

/// The items of a Structured Field list, as (name, parameters).
fn sf_items(text: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list: sfv::List = Parser::new(text)
        .parse_list()
        .unwrap_or_else(|e| panic!("not an sf-list: {e:?}: {text}"));
    list.into_iter()
        .map(|e| match e {
            ListEntry::Item(i) => {
                let name = match &i.bare_item {
                    BareItem::String(s) => s.as_str().to_owned(),
                    BareItem::Token(t) => t.as_str().to_owned(),
                    other => panic!("{other:?} in {text}"),
                };
                let params = i
                    .params
                    .iter()
                    .filter_map(|(k, v)| {
                        v.as_integer()
                            .map(|n| (k.as_str().to_owned(), i64::from(n)))
                    })
                    .collect();
                (name, params)
            }
            ListEntry::InnerList(_) => panic!("inner list in {text}"),
        })
        .collect()
}

fn param(params: &[(String, i64)], key: &str) -> Option<i64> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// The consistency of one response's headers; `legacy` is the second form
/// sent beside the IETF one.
fn check_forms(a: &Answer, legacy: &str, ctx: &str) {
    let policies = sf_items(
        a.get("ratelimit-policy")
            .unwrap_or_else(|| panic!("{ctx}: {a:?}")),
    );
    let current = sf_items(a.get("ratelimit").unwrap_or_else(|| panic!("{ctx}: {a:?}")));
    assert_eq!(current.len(), 1, "{ctx}: {a:?}");
    let (name, params) = &current[0];
    let r = param(params, "r").unwrap_or_else(|| panic!("{ctx}: no r: {a:?}"));
    // No `t` (and no reset) only when no wait makes the request pass.
    let t = param(params, "t");
    let q = policies
        .iter()
        .filter(|(n, _)| n == name)
        .filter_map(|(_, p)| param(p, "q"))
        .max()
        .unwrap_or_else(|| panic!("{ctx}: no policy named {name}: {a:?}"));
    assert!(r <= q, "{ctx}: remaining {r} above the quota {q}: {a:?}");
    let remaining = a.num("x-ratelimit-remaining").unwrap();
    let reset = a.num("x-ratelimit-reset");
    assert_eq!(remaining as i64, r, "{ctx}: {a:?}");
    assert_eq!(reset.map(|s| s as i64), t, "{ctx}: {a:?}");
    let limit = a.get("x-ratelimit-limit").unwrap();
    let first: u64 = limit
        .split(',')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{ctx}: {limit}: {e}"));
    assert!(
        remaining <= first,
        "{ctx}: remaining above the limit: {a:?}"
    );
    // `X-RateLimit-Limit` is the reported policy's quota; draft-03 then
    // lists every policy (`10, 10;w=1;name="per-ip"`), the same as
    // `RateLimit-Policy`.
    assert_eq!(
        first as i64, q,
        "{ctx}: X-RateLimit-Limit against q={q}: {a:?}"
    );
    if legacy == "draft-03" {
        let list: sfv::List = Parser::new(limit)
            .parse_list()
            .unwrap_or_else(|e| panic!("{ctx}: not an sf-list: {e:?}: {limit}"));
        let listed: Vec<(i64, Option<i64>, String)> = list
            .into_iter()
            .skip(1)
            .map(|e| match e {
                ListEntry::Item(i) => {
                    let get = |k: &str| {
                        i.params
                            .iter()
                            .find(|(n, _)| n.as_str() == k)
                            .map(|x| x.1.clone())
                    };
                    (
                        i64::from(i.bare_item.as_integer().unwrap()),
                        get("w").and_then(|w| w.as_integer()).map(i64::from),
                        get("name")
                            .and_then(|n| n.as_string().map(|s| s.as_str().to_owned()))
                            .unwrap_or_default(),
                    )
                }
                ListEntry::InnerList(_) => panic!("{ctx}: inner list in {limit}"),
            })
            .collect();
        let ietf: Vec<(i64, Option<i64>, String)> = policies
            .iter()
            .map(|(n, p)| (param(p, "q").unwrap(), param(p, "w"), n.clone()))
            .collect();
        assert_eq!(
            listed, ietf,
            "{ctx}: draft-03 {limit} against RateLimit-Policy"
        );
    }
}

/// One random sequence: the rule, its cost, the header form beside the
/// IETF one, and the gaps between requests in milliseconds.
fn run_case(rule: &str, cost: u32, legacy: &str, gaps: &[u64]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock: Arc<ManualClock> = manual();
        clock.set(Timestamp::from_nanos(1_700_000_000_123_456_789));
        let text = config(rule, cost, &format!("ietf, {legacy}"));
        let engine = engine_with(&text, clock.clone());
        let layer = layer_for(engine.clone(), &text);
        for (i, &gap) in gaps.iter().enumerate() {
            clock.advance(Duration::from_millis(gap));
            let ctx = format!("{rule} cost {cost} {legacy}, request {i}");
            let a = send(&layer).await;
            check_forms(&a, legacy, &ctx);
            if a.status != 429 {
                assert_eq!(a.status, 200, "{ctx}: {a:?}");
                continue;
            }
            let t0 = clock.now();
            let (allowed, exact) = dry_run(&engine).await;
            assert!(!allowed, "{ctx}: a dry run right after a 429 passes");
            let Some(exact) = exact else {
                // The cost alone exceeds the limit: no wait helps.
                assert!(a.get("retry-after").is_none(), "{ctx}: {a:?}");
                continue;
            };
            let ra = a
                .num("retry-after")
                .unwrap_or_else(|| panic!("{ctx}: {a:?}"));
            assert_eq!(
                ra,
                exact.as_secs() + u64::from(exact.subsec_nanos() > 0),
                "{ctx}: Retry-After against the exact wait {exact:?}"
            );
            clock.set(t0 + exact);
            assert!(
                dry_run(&engine).await.0,
                "{ctx}: not admitted at the exact wait {exact:?}"
            );
            clock.set(t0 + Duration::from_secs(ra));
            let again = send(&layer).await;
            check_forms(&again, legacy, &ctx);
            assert_eq!(
                again.status, 200,
                "{ctx}: not admitted at Retry-After {ra}: {again:?}"
            );
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_number_a_client_sees_is_consistent(
        rule in rule(),
        cost in prop_oneof![4 => Just(1u32), 1 => 2..4u32],
        legacy in prop_oneof![Just("x-ratelimit"), Just("draft-03")],
        gaps in proptest::collection::vec(
            prop_oneof![4 => 0..50u64, 2 => 50..1_500u64, 1 => 1_500..20_000u64],
            1..40,
        ),
    ) {
        run_case(&rule, cost, legacy, &gaps);
    }
}
