//! The heap a compiled policy holds per rule, counted by the allocator
//! (deterministic, unlike a process's resident size): a configuration of
//! a rule per tenant stays within a kilobyte a rule, the Prometheus
//! recorder included; and a replaced policy is freed at the swap.

use std::sync::Arc;

use floodgate::{Apply, StoreConfig};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

use crate::common::{heap, policy};

/// What the allocator adds to each block it hands out (glibc: a word of
/// header, blocks rounded to 16 bytes).
const BLOCK_OVERHEAD: i64 = 16;

/// One domain, a rule per tenant (an exact value each), named as a
/// multi-tenant configuration names them.
fn tenants(n: usize) -> String {
    let mut s = String::from("domains:\n  - domain: tenants\n    descriptors:\n");
    for i in 0..n {
        s.push_str(&format!(
            "      - key: tenant\n        value: tenant-{i}\n        rate_limit: {{requests_per_unit: {}, unit: second}}\n",
            100 + i % 50
        ));
    }
    s
}

/// Bytes held per rule by compiling `yaml` (`rules` rules) with a
/// Prometheus recorder installed, as the binaries run.
fn held_per_rule(yaml: &str, rules: usize) -> (i64, PolicySet) {
    let spec = load_str("tenants.yaml", yaml, &LoadOptions::default()).unwrap();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let before = heap::held();
    let policy = metrics::with_local_recorder(&recorder, || PolicySet::compile(&spec)).unwrap();
    let after = heap::held();
    let bytes = after.0 - before.0;
    let blocks = after.1 - before.1;
    let per_rule = (bytes + blocks * BLOCK_OVERHEAD) / rules as i64;
    eprintln!("{rules} rules: {bytes} bytes in {blocks} blocks held, {per_rule} bytes a rule");
    drop(recorder);
    (per_rule, policy)
}

#[test]
fn a_rule_holds_at_most_a_kilobyte() {
    let n = 20_000;
    let (per_rule, policy) = held_per_rule(&tenants(n), n);
    assert_eq!(policy.rules().len(), n);
    assert!(per_rule <= 1024, "{per_rule} bytes a rule");
}

#[test]
fn a_replaced_policy_is_freed_at_the_swap() {
    let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 2, unit: minute}\n";
    let engine = Engine::new(
        policy(yaml),
        MemoryBackend::new(StoreConfig::default()).unwrap(),
    );
    // A plan cached by a caller (as the tower layer caches one), used once.
    let plan = engine.direct_plan("api", &["user"]).unwrap();
    let user = OwnedDescriptor::new([("user", "u")]);
    let mut response = Response::default();
    engine
        .evaluate_direct(&plan, &user, 1, Apply::Commit, &mut response)
        .unwrap();
    let old = engine.replace_policy(policy(yaml));
    assert_eq!(
        Arc::strong_count(&old),
        1,
        "the replaced policy is still held elsewhere"
    );
    // The stale plan is refused, not applied to the new policy.
    assert!(
        engine
            .evaluate_direct(&plan, &user, 1, Apply::Commit, &mut response)
            .is_none()
    );
}
