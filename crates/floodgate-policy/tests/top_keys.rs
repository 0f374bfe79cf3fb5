//! The heavy-hitters sketch against exact counts: Space-Saving's
//! guarantees hold on any stream.

use std::collections::HashMap;

use floodgate_policy::observe::TopKeys;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn bounds_hold(
        capacity in 1usize..12,
        stream in prop::collection::vec((0u16..40, 1u64..4), 0..600),
    ) {
        let mut top = TopKeys::new(capacity);
        let mut exact: HashMap<u16, u64> = HashMap::new();
        for &(k, w) in &stream {
            top.add(&k.to_be_bytes(), w);
            *exact.entry(k).or_default() += w;
        }
        let total: u64 = exact.values().sum();
        prop_assert_eq!(top.total(), total);
        prop_assert!(top.len() <= capacity);
        let listed = top.top(usize::MAX);
        prop_assert_eq!(listed.len(), top.len());
        let mut min = u64::MAX;
        for t in &listed {
            let k = u16::from_be_bytes([t.key[0], t.key[1]]);
            let truth = exact[&k];
            prop_assert!(t.count - t.error <= truth, "{k}: {t:?} truth {truth}");
            prop_assert!(truth <= t.count, "{k}: {t:?} truth {truth}");
            min = min.min(t.count);
        }
        // Sorted, largest first.
        prop_assert!(listed.windows(2).all(|w| w[0].count >= w[1].count));
        if top.len() == capacity {
            // The smallest tracked count is at most total / capacity…
            prop_assert!(min <= total / capacity as u64);
        }
        // …and every key above it is tracked.
        for (k, &n) in &exact {
            if n > total / capacity as u64 {
                prop_assert!(top.get(&k.to_be_bytes()).is_some(), "{k} ({n} of {total}) is missing");
            }
        }
    }
}

#[test]
fn a_heavy_key_is_found_among_many_light_ones() {
    let mut top = TopKeys::new(16);
    for i in 0..100_000u32 {
        top.add(&i.to_le_bytes(), 1);
        if i % 10 == 0 {
            top.add(b"attacker", 1);
        }
    }
    let first = &top.top(1)[0];
    assert_eq!(first.key, b"attacker");
    assert!(first.count - first.error <= 10_000 && first.count >= 10_000);
    top.clear();
    assert!(top.is_empty());
}

mod engine_observer {
    use std::sync::Arc;
    use std::time::Duration;

    use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
    use floodgate_policy::observe::{Limited, LimitedKeys};
    use floodgate_policy::read::{LoadOptions, load_str};
    use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

    const YAML: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests_per_unit: 1, unit: minute}
      - key: ip
        rate_limit: {name: shaped, algorithm: shaper, rate: 10r/s, burst: 5}
      - key: trial
        shadow_mode: true
        rate_limit: {name: dry, requests_per_unit: 1, unit: minute}
"#;

    fn engine() -> (
        Engine<MemoryBackend, Arc<ManualClock>>,
        Arc<LimitedKeys>,
        Arc<ManualClock>,
    ) {
        let spec = load_str("api.yaml", YAML, &LoadOptions::default()).unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let keys = Arc::new(LimitedKeys::new(256, Duration::from_secs(10)));
        let engine = Engine::with_clock(
            PolicySet::compile(&spec).unwrap(),
            MemoryBackend::new(StoreConfig::default()).unwrap(),
            clock.clone(),
        )
        .with_observer(keys.clone());
        (engine, keys, clock)
    }

    #[test]
    fn limited_decisions_are_recorded_admitted_ones_are_not() {
        let (engine, keys, clock) = engine();
        let mut r = Response::default();
        let mut decide = |d: &OwnedDescriptor| {
            engine
                .evaluate_now("api", std::slice::from_ref(d), 1, Apply::Commit, &mut r)
                .unwrap()
                .unwrap();
        };
        let ann = OwnedDescriptor::new([("user", "ann")]);
        for _ in 0..4 {
            decide(&ann);
        }
        let ip = OwnedDescriptor::new([("ip", "192.0.2.1")]);
        decide(&ip);
        decide(&ip);
        decide(&ip);
        let trial = OwnedDescriptor::new([("trial", "t1")]);
        decide(&trial);
        decide(&trial);
        decide(&OwnedDescriptor::new([("user", "bob")]));
        let top = keys.top(clock_now(&clock), 10);
        let find = |rule: &str| top.iter().find(|k| k.rule == rule).unwrap().clone();
        assert_eq!(find("per-user").key, "user=ann");
        assert_eq!(
            (find("per-user").count, find("per-user").how),
            (3, Limited::Denied)
        );
        assert_eq!(
            (find("shaped").count, find("shaped").how),
            (2, Limited::Delayed)
        );
        assert_eq!((find("dry").count, find("dry").how), (1, Limited::Shadow));
        assert_eq!(top.len(), 3, "admitted requests are not recorded: {top:?}");

        // The direct path records the same.
        let plan = engine.direct_plan("api", &["user"]).unwrap();
        let cat = OwnedDescriptor::new([("user", "cat")]);
        for _ in 0..3 {
            engine
                .evaluate_direct(&plan, &cat, 1, Apply::Commit, &mut r)
                .unwrap();
        }
        let top = keys.top(clock_now(&clock), 10);
        let cat = top.iter().find(|k| k.key == "user=cat").unwrap();
        assert_eq!((cat.count, cat.how), (2, Limited::Denied));
        clock.advance(Duration::from_secs(30));
        assert!(keys.top(clock_now(&clock), 10).is_empty());
    }

    fn clock_now(c: &ManualClock) -> Timestamp {
        floodgate::Clock::now(c)
    }
}

/// `floodgate_rule_decisions_total{outcome="delayed"}`: admitted after a
/// shaper's delay, on the general and the direct path.
#[test]
fn delays_are_counted_per_rule() {
    use floodgate::{Apply, StoreConfig};
    use floodgate_policy::read::{LoadOptions, load_str};
    use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    for direct in [false, true] {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let yaml = "domains:\n  - domain: api\n    descriptors:\n      - key: ip\n        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 5}\n";
            let spec = load_str("api.yaml", yaml, &LoadOptions::default()).unwrap();
            let engine = Engine::new(
                PolicySet::compile(&spec).unwrap(),
                MemoryBackend::new(StoreConfig::default()).unwrap(),
            );
            let plan = engine.direct_plan("api", &["ip"]).unwrap();
            let d = OwnedDescriptor::new([("ip", "a")]);
            let mut response = Response::default();
            for _ in 0..4 {
                if direct {
                    engine.evaluate_direct(&plan, &d, 1, Apply::Commit, &mut response);
                } else {
                    engine
                        .evaluate_now(
                            "api",
                            std::slice::from_ref(&d),
                            1,
                            Apply::Commit,
                            &mut response,
                        )
                        .unwrap()
                        .unwrap();
                }
            }
        });
        let delayed: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, _, _, _)| {
                k.key()
                    .labels()
                    .any(|l| l.key() == "outcome" && l.value() == "delayed")
            })
            .map(|(_, _, _, v)| match v {
                DebugValue::Counter(c) => c,
                _ => 0,
            })
            .sum();
        // The first passes at once; the next three wait (within the burst).
        assert_eq!(delayed, 3, "direct: {direct}");
    }
}
