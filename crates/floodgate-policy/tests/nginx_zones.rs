//! nginx's zones through the engine and the in-memory backend: a shaper
//! rule's limit is a `limit_req_zone`, whose node expiry (a node idle a
//! minute and drained is deleted only when another key of the zone is given
//! a node) shows at `1r/m` without a burst; a request with several rules
//! looks its zones up in order up to the first that rejects, as nginx's
//! several `limit_req` do; reloads keep an unchanged rule's zone.

use crate::common;

use common::{Harness, d, policy};
use floodgate_policy::Code;

const ONE_PER_MINUTE: &str = "domains:
  - domain: api
    descriptors:
      - key: k
        rate_limit: {algorithm: shaper, rate: 1r/m}
      - key: fast
        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 1, nodelay: true}
";

fn k(v: &str) -> [floodgate_policy::OwnedDescriptor; 1] {
    [d(&[("k", v)])]
}

/// Sends `key` at `ms` after the harness's start.
fn at(h: &mut Harness, ms: u64, descriptors: &[floodgate_policy::OwnedDescriptor]) -> Code {
    let target = common::START * 1_000_000_000 + ms * 1_000_000;
    h.clock.set(floodgate::Timestamp::from_nanos(target));
    h.send("api", descriptors)
}

#[test]
fn a_key_alone_keeps_its_node_past_the_minute() {
    let mut h = Harness::new(ONE_PER_MINUTE);
    assert_eq!(at(&mut h, 0, &k("a")), Code::Ok);
    assert_eq!(at(&mut h, 61_000, &k("a")), Code::OverLimit);
    assert_eq!(at(&mut h, 62_000, &k("a")), Code::OverLimit);
    assert_eq!(at(&mut h, 63_000, &k("a")), Code::Ok);
    assert_eq!(h.engine.backend().zone_keys(), 1);
}

#[test]
fn another_key_in_between_deletes_the_idle_node() {
    let mut h = Harness::new(ONE_PER_MINUTE);
    assert_eq!(at(&mut h, 0, &k("a")), Code::Ok);
    // Before the minute "b" deletes nothing...
    assert_eq!(at(&mut h, 59_000, &k("b")), Code::Ok);
    // ...after it, "c" deletes "a" (idle a minute, drained) and stops at
    // "b" (idle 1.5 s).
    assert_eq!(at(&mut h, 60_500, &k("c")), Code::Ok);
    assert_eq!(h.engine.backend().zone_keys(), 2);
    assert_eq!(at(&mut h, 61_000, &k("a")), Code::Ok);
    // "b" kept its node: rejected until 62.5 s after its pass.
    assert_eq!(at(&mut h, 61_000, &k("b")), Code::OverLimit);
}

#[test]
fn a_rule_whose_expiry_cannot_show_has_no_zone() {
    let h = Harness::new(ONE_PER_MINUTE);
    let p = h.engine.policy();
    let zones: Vec<Option<u64>> = p.rules().iter().map(|r| r.limits()[0].zone).collect();
    assert!(zones[0].is_some());
    assert_eq!(zones[1], None);
}

/// Two zones on one request, in order: `first` (1r/m) then `second`
/// (1r/m). A request the second rejects looks the first up (its key gets a
/// node, uncharged) but charges neither; a request the first rejects never
/// looks the second up.
#[test]
fn several_zones_are_looked_up_in_order_up_to_the_first_rejection() {
    let mut h = Harness::new(
        "domains:
  - domain: api
    descriptors:
      - key: first
        rate_limit: {algorithm: shaper, rate: 1r/m}
      - key: second
        rate_limit: {algorithm: shaper, rate: 1r/m}
",
    );
    let req = |a: &str, b: &str| [d(&[("first", a)]), d(&[("second", b)])];
    assert_eq!(at(&mut h, 0, &req("a", "x")), Code::Ok);
    // "x" rejects: "b" is looked up in the first zone (a node, not
    // charged), nothing is charged.
    assert_eq!(at(&mut h, 1_000, &req("b", "x")), Code::OverLimit);
    assert_eq!(h.engine.backend().zone_keys(), 3);
    // "a" rejects: "y" is not looked up in the second zone.
    assert_eq!(at(&mut h, 2_000, &req("a", "y")), Code::OverLimit);
    assert_eq!(h.engine.backend().zone_keys(), 3);
    // "b" was not charged.
    assert_eq!(at(&mut h, 3_000, &req("b", "y")), Code::Ok);
    assert_eq!(h.engine.backend().zone_keys(), 4);
}

#[test]
fn a_reload_keeps_an_unchanged_rules_zone_and_drops_a_removed_ones() {
    let mut h = Harness::new(ONE_PER_MINUTE);
    assert_eq!(at(&mut h, 0, &k("a")), Code::Ok);
    h.engine.replace_policy(policy(ONE_PER_MINUTE));
    assert_eq!(at(&mut h, 61_000, &k("a")), Code::OverLimit);
    assert_eq!(h.engine.backend().zone_keys(), 1);
    h.engine.replace_policy(policy(
        "domains:
  - domain: api
    descriptors:
      - key: k
        rate_limit: {algorithm: shaper, rate: 2r/m, burst: 1}
",
    ));
    assert_eq!(h.engine.backend().zone_keys(), 0);
}
