//! The layer's admission step, driven directly as an offline replay drives
//! it: the engine's answer and the contract make the verdict, a delay is
//! refused when every delay slot is taken, and a request admitted under a
//! concurrency limit holds units.

use crate::support::{engine_with, manual};

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Apply, ManualClock};
use floodgate_http::HttpSection;
use floodgate_http::contract::{Report, Verdict};
use floodgate_http::layer::admission;
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, Response};

const POLICY: &str = r#"domains:
  - domain: api
    descriptors:
      - key: shaped
        rate_limit: {name: smooth, algorithm: shaper, rate: 10r/s, burst: 5}
      - key: held
        rate_limit: {name: held, algorithm: concurrency, max: 1}
http:
  domain: api
  descriptors:
    - [{header: {name: x-shaped, key: shaped}}]
"#;

/// The engine's answer on one descriptor `key=v`, charging or not.
fn decide(engine: &Engine<MemoryBackend, Arc<ManualClock>>, key: &str, apply: Apply) -> Response {
    let mut response = Response::default();
    let d = [OwnedDescriptor::new([(key, "v")])];
    let decided = engine.evaluate_now("api", &d, 0, apply, &mut response);
    assert!(matches!(decided, Some(Ok(()))), "{decided:?}");
    response
}

#[test]
fn a_delay_is_refused_only_when_every_slot_is_taken() {
    let engine = engine_with(POLICY, manual());
    let contract = HttpSection::from_yaml_str("t.yaml", POLICY)
        .unwrap()
        .contract;
    let policy = engine.policy();
    let mut report = Report::new();
    // The first request passes at once; the second would wait 100 ms.
    let first = decide(&engine, "shaped", Apply::Commit);
    assert!(admission::plainly_allowed(&first));
    admission::judge(&mut report, &first, Some(&policy), &contract, false);
    assert_eq!(report.verdict(), Verdict::Allowed);
    assert!(!admission::slots_full(0, 1));
    assert!(admission::slots_full(1, 1));
    let checked = decide(&engine, "shaped", Apply::Check);
    assert!(!admission::plainly_allowed(&checked));
    admission::judge(&mut report, &checked, Some(&policy), &contract, false);
    assert_eq!(
        report.verdict(),
        Verdict::Delayed(Duration::from_millis(100))
    );
    assert!(admission::refused_for_want_of_slot(&mut report));
    assert_eq!(report.verdict(), Verdict::Denied);
    assert_eq!(report.retry_after(), Some(Duration::from_millis(100)));
    // Decided without charging: with a slot free, it is delayed.
    let second = decide(&engine, "shaped", Apply::Commit);
    admission::judge(&mut report, &second, Some(&policy), &contract, false);
    assert_eq!(
        report.verdict(),
        Verdict::Delayed(Duration::from_millis(100))
    );
}

#[test]
fn an_answer_under_a_replaced_policy_keeps_its_verdict() {
    let engine = engine_with(POLICY, manual());
    let contract = HttpSection::from_yaml_str("t.yaml", POLICY)
        .unwrap()
        .contract;
    let policy = engine.policy();
    let mut report = Report::new();
    let held = decide(&engine, "held", Apply::Commit);
    assert!(admission::holds_units(&held, &policy));
    let refused = decide(&engine, "held", Apply::Commit);
    assert!(!admission::holds_units(&refused, &policy));
    // Its rules unknown: the verdict alone, no lines.
    assert!(!admission::judge(
        &mut report,
        &refused,
        None,
        &contract,
        true
    ));
    assert_eq!(report.verdict(), Verdict::Denied);
    assert!(report.current().is_empty());
    assert!(admission::judge(
        &mut report,
        &refused,
        Some(&policy),
        &contract,
        true
    ));
    assert_eq!(report.current().len(), 1);
}
