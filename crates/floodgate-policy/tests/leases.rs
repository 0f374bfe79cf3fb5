//! Leased concurrency limits driven over RLS (`lease:`, `holder:`) in the
//! engine on the in-memory store, with a manual clock: increments take
//! units, negative hits give them back; units never given back (a client
//! that died) return within one lease; a holder gives back only its own
//! units, once; without a holder entry a decrement frees one anonymous
//! unit, never below none.

use std::time::Duration;

use crate::common::*;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Code, OwnedDescriptor};

const YAML: &str = "domain: rls
descriptors:
  - key: user
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max: 2, lease: 30s, holder: true}
  - key: tenant
    rate_limit: {algorithm: concurrency, max: 2, lease: 30s}
";

const LEASE: Duration = Duration::from_secs(30);

fn start(user: &str, request: &str) -> OwnedDescriptor {
    d(&[("user", user), ("request_id", request)])
}

fn stop(user: &str, request: &str) -> OwnedDescriptor {
    start(user, request).negative()
}

#[test]
fn units_of_a_client_that_dies_come_back_within_one_lease() {
    let mut h = Harness::new(YAML);
    assert_eq!(h.send("rls", &[start("alice", "r1")]), Code::Ok);
    h.advance(Duration::from_secs(10));
    assert_eq!(h.send("rls", &[start("alice", "r2")]), Code::Ok);
    // Both requests' Envoy died: no decrement ever comes.
    assert_eq!(h.send("rls", &[start("alice", "r3")]), Code::OverLimit);
    h.advance(LEASE - Duration::from_secs(10) - Duration::from_millis(1));
    assert_eq!(h.send("rls", &[start("alice", "r3")]), Code::OverLimit);
    h.advance(Duration::from_millis(1));
    assert_eq!(
        h.send("rls", &[start("alice", "r3")]),
        Code::Ok,
        "r1's lease ended"
    );
    assert_eq!(h.send("rls", &[start("alice", "r4")]), Code::OverLimit);
    // Another user's count is its own.
    assert_eq!(h.send("rls", &[start("bob", "r1")]), Code::Ok);
}

#[test]
fn exact_while_nothing_crashes() {
    let mut h = Harness::new(YAML);
    for round in 0..50 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        assert_eq!(h.send("rls", &[start("carol", &a)]), Code::Ok);
        assert_eq!(h.send("rls", &[start("carol", &b)]), Code::Ok);
        assert_eq!(
            h.send("rls", &[start("carol", "x")]),
            Code::OverLimit,
            "never 3 in flight"
        );
        assert_eq!(h.send("rls", &[stop("carol", &a)]), Code::Ok);
        assert_eq!(h.response.statuses[0].limit_remaining, 1);
        assert_eq!(h.send("rls", &[stop("carol", &b)]), Code::Ok);
        assert_eq!(h.response.statuses[0].limit_remaining, 2);
        h.advance(Duration::from_secs(1));
    }
}

#[test]
fn forged_and_repeated_decrements_free_nothing_another_holds() {
    let mut h = Harness::new(YAML);
    assert_eq!(h.send("rls", &[start("dave", "r1")]), Code::Ok);
    assert_eq!(h.send("rls", &[start("dave", "r2")]), Code::Ok);
    // A stranger's decrement, with or without a holder of its own.
    assert_eq!(h.send_hits("rls", &[stop("dave", "forged")], 5), Code::Ok);
    assert_eq!(
        h.send("rls", &[d(&[("user", "dave")]).negative()]),
        Code::Ok
    );
    assert_eq!(h.send("rls", &[start("dave", "r3")]), Code::OverLimit);
    // r1 gives back its one unit, once, whatever it asks for.
    assert_eq!(h.send_hits("rls", &[stop("dave", "r1")], 5), Code::Ok);
    assert_eq!(h.send("rls", &[stop("dave", "r1")]), Code::Ok);
    assert_eq!(h.send("rls", &[start("dave", "r3")]), Code::Ok);
    assert_eq!(h.send("rls", &[start("dave", "r4")]), Code::OverLimit);
    // After its lease, a late decrement of r2 frees nothing r3 took since.
    h.advance(LEASE);
    assert_eq!(h.send("rls", &[start("dave", "r5")]), Code::Ok);
    assert_eq!(h.send("rls", &[stop("dave", "r2")]), Code::Ok);
    assert_eq!(h.send("rls", &[start("dave", "r6")]), Code::Ok);
    assert_eq!(h.send("rls", &[start("dave", "r7")]), Code::OverLimit);
}

#[test]
fn without_a_holder_a_decrement_frees_one_unit_floored() {
    let mut h = Harness::new(YAML);
    let t = d(&[("tenant", "t")]);
    assert_eq!(h.admitted(3, "rls", std::slice::from_ref(&t)), 2);
    assert_eq!(h.send("rls", &[t.clone().negative()]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 1);
    assert_eq!(h.send_hits("rls", &[t.clone().negative()], 9), Code::Ok);
    assert_eq!(
        h.response.statuses[0].limit_remaining, 2,
        "never below none"
    );
    assert_eq!(h.admitted(3, "rls", std::slice::from_ref(&t)), 2);
    h.advance(LEASE);
    assert_eq!(h.admitted(3, "rls", &[t]), 2, "leases ended");
}

#[test]
fn holder_needs_a_lease_and_a_lease_a_concurrency_limit() {
    for (yaml, message) in [
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: concurrency, max: 1, holder: true}\n",
            "holder needs a lease",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, lease: 1s}\n",
            "lease applies to a concurrency limit only",
        ),
    ] {
        let spec = load_str("test.yaml", yaml, &LoadOptions::default());
        let text = match spec.map(|s| floodgate_policy::PolicySet::compile(&s).map(|_| ())) {
            Ok(Ok(())) => panic!("accepted: {yaml}"),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        assert!(text.contains(message), "{text}");
    }
}

/// Threads taking and giving back units of one user on one engine: never
/// more than the limit in flight, and every unit back at the end.
#[test]
fn exact_under_concurrency() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let h = Harness::new(YAML);
    let engine = Arc::new(h.engine);
    let (held, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (engine, held, most) = (engine.clone(), held.clone(), most.clone());
            std::thread::spawn(move || {
                let mut r = floodgate_policy::Response::default();
                for n in 0..500 {
                    let id = format!("t{t}n{n}");
                    ready(engine.evaluate("rls", &[start("erin", &id)], 0, &mut r)).unwrap();
                    if r.overall != Code::Ok {
                        continue;
                    }
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    held.fetch_sub(1, Ordering::SeqCst);
                    ready(engine.evaluate("rls", &[stop("erin", &id)], 0, &mut r)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} in flight");
    let mut r = floodgate_policy::Response::default();
    ready(engine.evaluate("rls", &[start("erin", "last")], 2, &mut r)).unwrap();
    assert_eq!(r.overall, Code::Ok, "every unit back");
}
