//! End to end: one Floodgate file with policies and an `http:` section;
//! requests become descriptors the engine decides on.

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use common::{peer, request};
use floodgate::{ManualClock, StoreConfig, Timestamp};
use floodgate_http::HttpIdentity;
use floodgate_http::identity::{NoExtensions, RequestDescriptors, SECTION};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Code, Engine, MemoryBackend, PolicySet, Response};

const FILE: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {requests: 3, per: 1m}
      - key: tier
        value: free
        descriptors:
          - key: api_key
            rate_limit: {requests: 2, per: 1m}
      - key: tier
        value: pro
        descriptors:
          - key: api_key
            rate_limit: {requests: 5, per: 1m}
http:
  domain: api
  client_ip: {trusted_hops: 1}
  cost: {header: x-request-cost, max: 3}
  descriptors:
    - [client_ip]
    - [{tier: {header: x-plan, values: [free, pro], default: free}}, {api_key: {hash: true}}]
"#;

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory engine never waits"),
    }
}

struct Gateway {
    identity: HttpIdentity,
    engine: Engine<MemoryBackend, Arc<ManualClock>>,
    out: RequestDescriptors,
    response: Response,
}

impl Gateway {
    fn new() -> Self {
        let options = LoadOptions {
            other_sections: vec![SECTION],
            ..Default::default()
        };
        let spec = load_str("gw.yaml", FILE, &options).unwrap();
        let policy = PolicySet::compile(&spec).unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
        let backend = MemoryBackend::new(StoreConfig::default()).unwrap();
        let identity = HttpIdentity::from_yaml_str("gw.yaml", FILE).unwrap();
        Gateway {
            out: identity.new_output(),
            identity,
            engine: Engine::with_clock(policy, backend, clock),
            response: Response::default(),
        }
    }

    fn send(&mut self, headers: &[(&str, &str)]) -> Code {
        let parts = request("GET", "/", headers);
        self.identity
            .build(&parts, peer("10.0.0.2").ip(), &NoExtensions, &mut self.out);
        let hits = self.out.hits_addend();
        let domain = self.identity.domain();
        ready(
            self.engine
                .evaluate(domain, &self.out, hits, &mut self.response),
        )
        .unwrap();
        self.response.overall
    }
}

#[test]
fn per_client_limits_cannot_be_dodged_by_spoofing() {
    let mut gw = Gateway::new();
    for (i, spoof) in ["1.1.1.1", "2.2.2.2", "3.3.3.3"].iter().enumerate() {
        let xff = format!("{spoof}, 203.0.113.9");
        assert_eq!(
            gw.send(&[("x-forwarded-for", &xff)]),
            Code::Ok,
            "request {i}"
        );
    }
    let xff = "4.4.4.4, 203.0.113.9";
    assert_eq!(gw.send(&[("x-forwarded-for", xff)]), Code::OverLimit);
    // Another client is not affected.
    assert_eq!(gw.send(&[("x-forwarded-for", "203.0.113.10")]), Code::Ok);
}

#[test]
fn per_tier_key_limits_and_costs() {
    let mut gw = Gateway::new();
    let free = |i: usize| format!("198.51.100.{i}");
    // Free tier (also unknown plans): 2 per minute per key.
    assert_eq!(
        gw.send(&[("x-forwarded-for", &free(1)), ("x-api-key", "k1")]),
        Code::Ok
    );
    let h = [
        ("x-forwarded-for", free(2)),
        ("x-api-key", "k1".into()),
        ("x-plan", "gold".into()),
    ];
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(gw.send(&h), Code::Ok);
    assert_eq!(
        gw.send(&[("x-forwarded-for", &free(3)), ("x-api-key", "k1")]),
        Code::OverLimit
    );
    // Pro: 5 per minute; a request of cost 3 takes three.
    let pro = |ip: &str, cost: &'static str| {
        vec![
            ("x-forwarded-for", ip.to_owned()),
            ("x-api-key", "k2".to_owned()),
            ("x-plan", "pro".to_owned()),
            ("x-request-cost", cost.to_owned()),
        ]
    };
    let send = |gw: &mut Gateway, h: Vec<(&str, String)>| {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        gw.send(&h)
    };
    assert_eq!(send(&mut gw, pro("198.51.100.10", "3")), Code::Ok);
    assert_eq!(send(&mut gw, pro("198.51.100.11", "1")), Code::Ok);
    assert_eq!(send(&mut gw, pro("198.51.100.12", "1")), Code::Ok);
    assert_eq!(send(&mut gw, pro("198.51.100.13", "1")), Code::OverLimit);
    // The secret never reached the counters' keys: only its hash did.
    let key = gw.out.iter().find_map(|d| d.get("api_key")).unwrap();
    assert_eq!(key, floodgate_http::identity::secret_hash("k2"));
}
