//! Permit identities: the engine gives each evaluated request holding a
//! concurrency limit a permit of its own, puts it on every concurrency
//! item of the decision, and passes the same permit when the request
//! releases; other limits carry none. The in-memory store gives back at
//! most what a permit took of a key, once: forged, repeated and cross-key
//! releases change nothing and say so.

use crate::common;

use std::future::Future;
use std::sync::Mutex;

use common::{d, policy, ready};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{
    Backend, BackendError, Code, Engine, Item, MemoryBackend, OwnedDescriptor, Permit, Released,
    Response,
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
type Calls = Vec<(String, Permit, u64)>;

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
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
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
fn permits(calls: &Calls, concurrency: &[usize]) -> (Vec<Permit>, Vec<Permit>) {
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
    assert!(!id.is_none());
    assert_eq!(Some(id), first.permit());
    assert_eq!(conc, [id, id], "one permit per request");
    assert_eq!(other, [Permit::NONE; 2], "other limits hold no permit");

    let report = ready(engine.release(&first));
    assert_eq!((report.given, report.not_held), (4, 0));
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
        assert!(!a.is_none());
        for b in &ids[i + 1..] {
            assert_ne!(a, b, "{ids:?}");
        }
    }
    // The release names the last evaluation's permit.
    ready(engine.release(&second));
    assert!(take(&b.released).iter().all(|c| c.1 == again));
}

fn engine_id(request: &[OwnedDescriptor]) -> Permit {
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
    assert_eq!(decided[0].1, Permit::NONE);
    assert_eq!(r.permit(), None);
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

/// The in-memory engine of the hostile tests: `job` at most 2 in flight,
/// `user` 5 a day, the clock standing still.
fn memory_engine() -> Engine<MemoryBackend> {
    Engine::new(
        policy(
            "domains:
  - domain: d
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 2}
      - key: user
        rate_limit: {requests: 1, per: 1d}
",
        ),
        MemoryBackend::new(StoreConfig::default()).unwrap(),
    )
}

fn job(name: &str) -> [OwnedDescriptor; 1] {
    [d(&[("job", name)])]
}

/// A check with `hits`; the code and the permit it holds.
fn check_hits(e: &Engine<MemoryBackend>, req: &[OwnedDescriptor], hits: u32) -> (Code, Permit) {
    let mut r = Response::default();
    ready(e.evaluate("d", req, hits, &mut r)).unwrap();
    (r.overall, r.permit().unwrap_or(Permit::NONE))
}

fn check(e: &Engine<MemoryBackend>, req: &[OwnedDescriptor]) -> (Code, Permit) {
    check_hits(e, req, 1)
}

fn release_hits(
    e: &Engine<MemoryBackend>,
    req: &[OwnedDescriptor],
    hits: u32,
    permit: Permit,
) -> floodgate_policy::engine::ReleaseReport {
    let mut r = Response::default();
    ready(e.release_request("d", req, hits, permit, &mut r)).unwrap()
}

fn release(
    e: &Engine<MemoryBackend>,
    req: &[OwnedDescriptor],
    permit: Permit,
) -> floodgate_policy::engine::ReleaseReport {
    release_hits(e, req, 1, permit)
}

/// How many more checks of `req` are admitted now (each kept in flight).
fn room(e: &Engine<MemoryBackend>, req: &[OwnedDescriptor]) -> usize {
    (0..10).take_while(|_| check(e, req).0 == Code::Ok).count()
}

/// A caller that never acquired anything sends releases: forged permits
/// (random ones, small numbers, the holders' own plus or minus one), the
/// holders' permits on another key, and a holder's permit again and again.
/// None frees anything (on the old code each one freed a unit: four in
/// flight against a maximum of two), and each says so.
#[test]
fn forged_repeated_and_cross_key_releases_change_nothing() {
    let e = memory_engine();
    let victim = job("render");
    let (_, a) = check(&e, &victim);
    let (_, b) = check(&e, &victim);
    assert_eq!(check(&e, &victim).0, Code::OverLimit);
    let mut forged = vec![
        Permit::random(),
        Permit::from(1u64),
        Permit::from(u128::MAX),
    ];
    for p in [a, b] {
        forged.push(Permit::from(p.get().wrapping_add(1)));
        forged.push(Permit::from(p.get().wrapping_sub(1)));
    }
    for p in forged {
        for _ in 0..3 {
            let r = release(&e, &victim, p);
            assert_eq!((r.units(), r.not_held, r.failed), (0, 1, 0), "{p:?}");
        }
    }
    assert_eq!(room(&e, &victim), 0, "a forged release freed a unit");

    // A permit of one key names nothing on another.
    let other = job("encode");
    let (_, c) = check(&e, &other);
    for p in [a, b] {
        assert_eq!(release(&e, &other, p).not_held, 1);
    }
    assert_eq!(release(&e, &victim, c).not_held, 1);
    assert_eq!(room(&e, &victim), 0);
    assert_eq!(room(&e, &other), 1, "encode: c and one more");

    // The holder's own release frees its unit, once.
    let r = release(&e, &victim, a);
    assert_eq!((r.given, r.not_held), (1, 0));
    for _ in 0..3 {
        let r = release(&e, &victim, a);
        assert_eq!((r.units(), r.not_held), (0, 1));
    }
    assert_eq!(room(&e, &victim), 1);
}

/// A release gives back at most what its permit took: `hits: 1000` frees
/// the one unit taken, and a permit that took 2 gives back 2 in all,
/// however they are asked for (on the old code, 1000 units were reported
/// and the count dropped by as much as it held).
#[test]
fn a_release_gives_back_at_most_what_its_permit_took() {
    let e = memory_engine();
    let victim = job("render");
    let (_, one) = check(&e, &victim);
    let (_, other) = check(&e, &victim);
    let r = release_hits(&e, &victim, 1000, one);
    assert_eq!((r.given, r.not_held), (1, 0));
    assert_eq!(room(&e, &victim), 1, "`other` still holds its unit");
    assert_eq!(release(&e, &victim, other).given, 1);

    let wide = job("wide");
    let (code, two) = check_hits(&e, &wide, 2);
    assert_eq!(code, Code::Ok);
    assert_eq!(release(&e, &wide, two).given, 1);
    assert_eq!(release_hits(&e, &wide, 1000, two).given, 1);
    assert_eq!(release_hits(&e, &wide, 1000, two).not_held, 1);
    assert_eq!(room(&e, &wide), 2);
}

/// Many releases of one permit at once, from several threads: exactly one
/// gives its unit back.
#[test]
fn concurrent_releases_of_one_permit_free_it_once() {
    let e = memory_engine();
    let victim = job("render");
    let (_, keep) = check(&e, &victim);
    for _ in 0..200 {
        let (code, p) = check(&e, &victim);
        assert_eq!(code, Code::Ok);
        let given: u64 = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| s.spawn(|| release(&e, &victim, p).given))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(given, 1);
    }
    assert_eq!(room(&e, &victim), 1, "`keep` still holds its unit");
    assert_eq!(release(&e, &victim, keep).given, 1);
}

/// A response denied by another limit took no concurrency units, so
/// releasing it gives none back and asks the store for none (on the old
/// code it freed a unit another request held).
#[test]
fn a_denied_request_gives_nothing_back() {
    let e = memory_engine();
    let victim = job("render");
    let both = [d(&[("job", "render")]), d(&[("user", "u")])];
    assert_eq!(check(&e, &both).0, Code::Ok);
    let mut denied = Response::default();
    ready(e.evaluate("d", &both, 1, &mut denied)).unwrap();
    assert_eq!(denied.overall, Code::OverLimit);
    let r = ready(e.release(&denied));
    assert_eq!(r, floodgate_policy::engine::ReleaseReport::default());
    assert_eq!(
        room(&e, &victim),
        1,
        "the first request still holds its unit"
    );
}

/// The permits remembered are those holding units, no more: a client
/// acquiring everything it can on many keys, and being denied beyond,
/// leaves one entry per unit admitted; dry runs and denials leave none,
/// and every release takes its entry away.
#[test]
fn the_permits_remembered_are_bounded_by_the_units_held() {
    let e = memory_engine();
    let keys: Vec<[OwnedDescriptor; 1]> = (0..2_000).map(|i| job(&format!("j{i}"))).collect();
    let mut held = Vec::new();
    for k in &keys {
        for _ in 0..4 {
            let (code, p) = check(&e, k);
            if code == Code::Ok {
                held.push((k, p));
            }
        }
        let mut dry = Response::default();
        ready(e.evaluate_with("d", k, 1, floodgate::Apply::Check, &mut dry)).unwrap();
    }
    assert_eq!(held.len(), 2 * keys.len());
    assert_eq!(e.backend().held_permits(), held.len());
    for (k, p) in &held {
        assert_eq!(release(&e, *k, *p).given, 1);
    }
    assert_eq!(e.backend().held_permits(), 0);
}

/// A permit presented after a reload: where the rule is unchanged (same
/// counters) it gives its unit back; where the limit changed (new
/// counters), it names nothing on them and frees nothing.
#[test]
fn a_permit_after_a_reload_releases_only_the_counter_it_took() {
    let e = memory_engine();
    let victim = job("render");
    let (_, a) = check(&e, &victim);
    let (_, b) = check(&e, &victim);
    // Unchanged rule: the same counter.
    e.replace_policy(policy(
        "domains:
  - domain: d
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 2}
",
    ));
    assert_eq!(release(&e, &victim, a).given, 1);
    // A changed limit counts afresh: b's unit is not on the new counter.
    e.replace_policy(policy(
        "domains:
  - domain: d
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 1}
",
    ));
    let (code, _) = check(&e, &victim);
    assert_eq!(code, Code::Ok);
    assert_eq!(release(&e, &victim, b).not_held, 1);
    assert_eq!(room(&e, &victim), 0);
}
