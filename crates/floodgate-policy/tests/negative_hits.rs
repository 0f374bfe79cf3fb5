//! Negative hits (Envoy's `is_negative_hits`) in the engine on the
//! in-memory store, as envoyproxy/ratelimit answers them: the counter falls
//! by the hits, never below 0; the descriptor is OK with what remains,
//! whatever the count, its rule's shadow mode or the request's other
//! descriptors; the hits count as negative hits only.

use crate::common::*;
use floodgate::Apply;
use floodgate_policy::Code;
use floodgate_policy::engine::Reason;

const YAML: &str = "domain: neg
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: job
    rate_limit: {algorithm: concurrency, max: 1}
";

fn remaining(h: &Harness) -> u32 {
    h.response.statuses[0].limit_remaining
}

#[test]
fn negative_hits_give_back_and_floor_at_zero() {
    let mut h = Harness::new(YAML);
    let user = d(&[("user", "a")]);
    assert_eq!(h.send_hits("neg", std::slice::from_ref(&user), 5), Code::Ok);
    assert_eq!(h.send("neg", std::slice::from_ref(&user)), Code::OverLimit);
    // The count is 6 (a denied hit counts, as there): giving back 3 leaves
    // 3 counted, so 2 remain.
    assert_eq!(h.send("neg", &[user.clone().hits(3).negative()]), Code::Ok);
    assert_eq!(remaining(&h), 2);
    assert!(h.response.statuses[0].negative);
    assert_eq!(h.admitted(3, "neg", std::slice::from_ref(&user)), 2);
    // Past the limit again (6): a refund that leaves the count above it is
    // still OK, with nothing remaining.
    assert_eq!(h.send("neg", &[user.clone().negative()]), Code::Ok);
    assert_eq!(remaining(&h), 0);
    // More than counted: floored at 0, the whole limit back.
    assert_eq!(
        h.send_hits("neg", &[user.clone().negative()], 100),
        Code::Ok
    );
    assert_eq!(remaining(&h), 5);
    assert_eq!(h.admitted(6, "neg", &[user]), 5);
}

#[test]
fn a_refund_of_a_new_key_creates_nothing_and_the_window_still_rolls() {
    let mut h = Harness::new(YAML);
    let user = d(&[("user", "b")]);
    assert_eq!(h.send("neg", &[user.clone().hits(4).negative()]), Code::Ok);
    assert_eq!(remaining(&h), 5);
    assert_eq!(h.send_hits("neg", std::slice::from_ref(&user), 5), Code::Ok);
    h.advance(std::time::Duration::from_secs(60));
    // The next window's refund leaves nothing to give back.
    assert_eq!(h.send("neg", &[user.clone().hits(2).negative()]), Code::Ok);
    assert_eq!(remaining(&h), 5);
    assert_eq!(h.admitted(6, "neg", &[user]), 5);
}

#[test]
fn refunds_ignore_shadow_mode_and_the_other_descriptors() {
    let mut h = Harness::new(YAML);
    let shadow = d(&[("shadow", "s")]);
    assert_eq!(
        h.send_hits("neg", std::slice::from_ref(&shadow), 3),
        Code::Ok
    );
    assert_eq!(h.send("neg", &[shadow.clone().negative()]), Code::Ok);
    assert_eq!(remaining(&h), 0, "3 counted less 1 is the limit");
    assert_eq!(h.send("neg", &[shadow.clone().negative()]), Code::Ok);
    assert_eq!(remaining(&h), 1);
    // Mixed with a positive descriptor that is over: the request is over,
    // and the refund still gives back.
    let user = d(&[("user", "c")]);
    assert_eq!(h.send_hits("neg", std::slice::from_ref(&user), 5), Code::Ok);
    let mixed = [user.clone(), d(&[("user", "d")]).hits(1)];
    assert_eq!(h.send("neg", &mixed), Code::OverLimit);
    let mixed = [user.clone(), user.clone().hits(4).negative()];
    assert_eq!(h.send("neg", &mixed), Code::OverLimit);
    assert_eq!(h.response.statuses[0].code, Code::OverLimit);
    assert_eq!(h.response.statuses[1].code, Code::Ok);
    // 5, and 2 denied (counted, as there), then 4 given back: 3 counted.
    assert_eq!(h.response.statuses[1].limit_remaining, 2);
    assert_eq!(h.admitted(4, "neg", &[user]), 2);
}

#[test]
fn unlimited_rules_and_concurrency_limits_give_nothing_back() {
    let mut h = Harness::new(YAML);
    assert_eq!(h.send("neg", &[d(&[("free", "x")]).negative()]), Code::Ok);
    assert_eq!(h.response.statuses[0].reason, Reason::Unlimited);
    // A negative hit holds no permit: the unit the first request holds
    // stays held (only its permit gives it back).
    let job = d(&[("job", "j")]);
    assert_eq!(h.send("neg", std::slice::from_ref(&job)), Code::Ok);
    assert_eq!(h.send("neg", &[job.clone().negative()]), Code::Ok);
    assert_eq!(h.send("neg", &[job]), Code::OverLimit);
}

#[test]
fn a_dry_run_gives_nothing_back() {
    let mut h = Harness::new(YAML);
    let user = d(&[("user", "e")]);
    assert_eq!(h.send_hits("neg", std::slice::from_ref(&user), 5), Code::Ok);
    let refund = [user.clone().hits(5).negative()];
    ready(
        h.engine
            .evaluate_with("neg", &refund, 0, Apply::Check, &mut h.response),
    )
    .unwrap();
    assert_eq!(h.response.overall, Code::Ok);
    assert_eq!(h.send("neg", &[user]), Code::OverLimit);
}

/// Where callers are not trusted, negative hits can be ignored (nothing
/// given back, answered OK) or refused (an invalid argument).
#[test]
fn negative_hits_can_be_ignored_or_refused() {
    use floodgate_policy::engine::{Honour, RequestLimits};
    let with = |negative_hits| {
        let mut h = Harness::new(YAML);
        h.engine = h.engine.with_request_limits(RequestLimits {
            negative_hits,
            ..RequestLimits::default()
        });
        h
    };
    let user = d(&[("user", "f")]);
    let refund = [user.clone().hits(5).negative()];
    let mut h = with(Honour::Ignore);
    assert_eq!(h.send_hits("neg", std::slice::from_ref(&user), 5), Code::Ok);
    assert_eq!(h.send("neg", &refund), Code::Ok);
    assert_eq!((remaining(&h), h.response.statuses[0].hits), (0, 0));
    assert_eq!(h.send("neg", std::slice::from_ref(&user)), Code::OverLimit);
    let mut h = with(Honour::Refuse);
    let e = ready(h.engine.evaluate("neg", &refund, 0, &mut h.response)).unwrap_err();
    assert!(
        e.to_string().contains("negative hits are not accepted"),
        "{e}"
    );
    assert_eq!(h.admitted(6, "neg", &[user]), 5, "positive hits: decided");
}
