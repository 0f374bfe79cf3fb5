//! The heap a compiled policy holds per rule, counted by the allocator
//! (deterministic, unlike a process's resident size): a configuration of
//! a rule per tenant stays within a kilobyte a rule, the Prometheus
//! recorder included; a replaced policy is freed at the swap; the store's
//! boxed states are freed exactly once, and a counter takes at most 60
//! bytes of the store.

use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Packed, PackedState, SlidingLog, SubWindowCounter,
};
use floodgate::store::{Item, WhenFull};
use floodgate::{Apply, Decision, Outcome, Store, StoreConfig, Timestamp};
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

/// Every kind of limit the policy's store decides, each leaving a box on
/// the heap for some of its keys: a sliding log, sub-windows, a leased
/// concurrency limit, a fixed window forced past what its inline form
/// counts, a sliding log blocked after its denial.
fn boxing_limits() -> Vec<AnyLimit> {
    let second = Duration::from_secs(1);
    vec![
        AnyLimit::from(SlidingLog::new(3, second).unwrap()),
        AnyLimit::from(SubWindowCounter::new(3, second, 4).unwrap()),
        AnyLimit::from(Concurrency::leased(3, second).unwrap()),
        AnyLimit::from(FixedWindow::new(3, second).unwrap()),
        AnyLimit::from(SlidingLog::new(1, second).unwrap()).with_block(second * 5),
    ]
}

/// The policy's store keeps states packed, those of the kinds held on the
/// heap boxed: every box is freed exactly once, whether its key is
/// evicted at capacity, dropped idle, copied for a dry run, unboxed when
/// it fits inline again or dropped with the store (the thread's heap
/// returns to where it was; a box freed twice would abort).
#[test]
fn packed_states_free_their_boxes_exactly_once() {
    let limits = boxing_limits();
    let before = heap::held();
    {
        let config = StoreConfig {
            capacity: 128,
            shards: 4,
            when_full: WhenFull::Evict,
        };
        let store: Store<u64, PackedState> = Store::new(config).unwrap();
        let mut out = [Decision {
            outcome: Outcome::Never,
            limit: 0,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
        }; 2];
        for round in 0..4u64 {
            let now = Timestamp::from_secs(1_000 + 3 * round);
            for key in 0..400u64 {
                let limit = Packed(&limits[key as usize % limits.len()]);
                let cost = if key % 7 == 0 { 1 << 60 } else { 1 };
                store.decide(&limit, &key, now, cost, Apply::Force);
                let items = [
                    Item {
                        key: &key,
                        limit: &limit,
                        cost: 1,
                    },
                    Item {
                        key: &key,
                        limit: &limit,
                        cost: 2,
                    },
                ];
                store.simulate_many(&items, now, &mut out);
            }
        }
        assert!(store.len() <= 128 && !store.is_empty());
        assert!(heap::held().1 > before.1, "no boxed state held");
    }
    assert_eq!(heap::held(), before);
}

/// What the policy's store takes per counter held, with room for two
/// million: at most 60 bytes at every count from 100 000 to 1 000 000
/// (32-byte entries in tables about 63 % full: about 52; with the 40-byte
/// entries of unpacked states, 65).
#[test]
fn a_counter_takes_at_most_60_bytes_of_the_store() {
    let config = StoreConfig::with_capacity(2_000_000);
    for keys in (100_000..=1_000_000).step_by(50_000) {
        let per_key = MemoryBackend::bytes_holding(config, keys) as f64 / keys as f64;
        assert!(per_key <= 60.0, "{per_key:.1} bytes a key at {keys} keys");
    }
}
