//! Permit identities: the engine gives each evaluated request holding a
//! concurrency limit a permit id of its own, puts it on every concurrency
//! item of the decision, and passes the same id when the request releases;
//! other limits carry 0.

use crate::common;

use std::future::Future;
use std::sync::Mutex;

use common::{d, policy, ready};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{
    Backend, BackendError, Code, Engine, Item, MemoryBackend, OwnedDescriptor, Response,
};

const RULES: &str = "domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit:
          limits:
            - {algorithm: concurrency, max: 3}
            - {requests: 100, per: 1m}
      - key: upload
        rate_limit: {algorithm: concurrency, max: 5}
      - key: plain
        rate_limit: {requests: 100, per: 1m}
";

/// What the backend was asked: (key, permit, cost or units).
type Calls = Vec<(String, u64, u64)>;

/// The in-memory store, remembering the permit of every item it decides
/// and releases.
struct Recording {
    memory: MemoryBackend,
    decided: Mutex<Calls>,
    released: Mutex<Calls>,
}

fn name(item: &Item<'_>) -> String {
    String::from_utf8_lossy(item.key).into_owned()
}

impl Backend for Recording {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        let mut seen = self.decided.lock().unwrap();
        seen.extend(items.iter().map(|i| (name(i), i.permit, i.cost)));
        self.memory.decide(items, now, apply, out)
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), BackendError>> + Send + 'a {
        self.released
            .lock()
            .unwrap()
            .push((name(&item), item.permit, units));
        self.memory.release(item, units, now)
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "recording"
    }
}

fn engine() -> Engine<Recording> {
    Engine::new(
        policy(RULES),
        Recording {
            memory: MemoryBackend::new(StoreConfig::default()).unwrap(),
            decided: Mutex::new(Vec::new()),
            released: Mutex::new(Vec::new()),
        },
    )
}

fn take(calls: &Mutex<Calls>) -> Calls {
    std::mem::take(&mut *calls.lock().unwrap())
}

/// The permits of the calls at the indices `concurrency`, and of the others.
fn permits(calls: &Calls, concurrency: &[usize]) -> (Vec<u64>, Vec<u64>) {
    let (conc, other): (Vec<_>, Vec<_>) = calls
        .iter()
        .enumerate()
        .partition(|(i, _)| concurrency.contains(i));
    (
        conc.into_iter().map(|(_, c)| c.1).collect(),
        other.into_iter().map(|(_, c)| c.1).collect(),
    )
}

#[test]
fn a_request_holds_one_permit_released_under_the_same_id() {
    let engine = engine();
    let b = engine.backend();
    let request: [OwnedDescriptor; 3] = [
        d(&[("tenant", "t")]),
        d(&[("upload", "u")]),
        d(&[("plain", "p")]),
    ];
    let mut first = Response::default();
    ready(engine.evaluate("api", &request, 2, &mut first)).unwrap();
    assert_eq!(first.overall, Code::Ok);
    // tenant: concurrency then window; upload: concurrency; plain: window.
    let decided = take(&b.decided);
    assert_eq!(decided.len(), 4, "{decided:?}");
    let (conc, other) = permits(&decided, &[0, 2]);
    let id = conc[0];
    assert_ne!(id, 0);
    assert_eq!(conc, [id, id], "one permit per request");
    assert_eq!(other, [0, 0], "other limits hold no permit");

    ready(engine.release(&first));
    let released = take(&b.released);
    assert_eq!(
        released,
        [(decided[0].0.clone(), id, 2), (decided[2].0.clone(), id, 2)]
    );

    // Another request (a new response, or the same one reused) gets a new
    // id; so does a request on another engine.
    let mut second = Response::default();
    ready(engine.evaluate("api", &request, 1, &mut second)).unwrap();
    let next = take(&b.decided)[0].1;
    ready(engine.evaluate("api", &request, 1, &mut second)).unwrap();
    let again = take(&b.decided)[0].1;
    let other_engine = engine_id(&request);
    let ids = [id, next, again, other_engine];
    for (i, a) in ids.iter().enumerate() {
        assert_ne!(*a, 0);
        for b in &ids[i + 1..] {
            assert_ne!(a, b, "{ids:?}");
        }
    }
    // The release names the last evaluation's permit.
    ready(engine.release(&second));
    assert!(take(&b.released).iter().all(|c| c.1 == again));
}

fn engine_id(request: &[OwnedDescriptor]) -> u64 {
    let engine = engine();
    let mut r = Response::default();
    ready(engine.evaluate("api", request, 1, &mut r)).unwrap();
    take(&engine.backend().decided)[0].1
}

#[test]
fn requests_without_a_concurrency_limit_carry_no_permit() {
    let engine = engine();
    let mut r = Response::default();
    ready(engine.evaluate("api", &[d(&[("plain", "p")])], 1, &mut r)).unwrap();
    let decided = take(&engine.backend().decided);
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].1, 0);
    ready(engine.release(&r));
    assert!(take(&engine.backend().released).is_empty());
}

/// A reload between a decision and its release: the release gives the
/// units back under the policy the request was decided on (its rule ids
/// index that policy's rules), not the new one, where the same rule id
/// is another rule or none at all; and a response that holds nothing no
/// longer finds its policy.
#[test]
fn a_release_after_a_reload_uses_the_policy_decided_under() {
    let engine = engine();
    let b = engine.backend();
    let request = [d(&[("upload", "u")])];
    let mut held = Response::default();
    ready(engine.evaluate("api", &request, 1, &mut held)).unwrap();
    let key = take(&b.decided)[0].0.clone();
    let mut plain = Response::default();
    ready(engine.evaluate("api", &[d(&[("plain", "p")])], 1, &mut plain)).unwrap();
    assert!(engine.policy_of(&plain).is_some());

    // The new policy has one rule, a window, under the id the concurrency
    // rule had (0) and none under the others.
    engine.replace_policy(policy(
        "domains:\n  - domain: api\n    descriptors:\n      - key: other\n        rate_limit: {requests: 1, per: 1m}\n",
    ));
    assert!(
        engine.policy_of(&plain).is_none(),
        "decided under a replaced policy"
    );
    assert!(
        engine.policy_of(&held).is_some(),
        "a holder keeps its policy"
    );

    ready(engine.release(&held));
    let permit = held.permit().expect("the request holds a permit");
    assert_eq!(take(&b.released), [(key, permit, 1)]);
}
