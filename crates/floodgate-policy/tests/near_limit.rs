//! The near-limit counter: an admitted request counts as near its limit when
//! it leaves more than ⌊limit × near_limit_ratio⌋ units used — on the
//! general path and on the direct one alike.

use floodgate::{Apply, StoreConfig};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Admits `n` requests of one user under a limit of 10 per minute with
/// `ratio`; returns (within_limit, near_limit) as counted.
fn count(ratio: f64, n: usize, direct: bool) -> (u64, u64) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 10, unit: minute}\n";
        let mut policy =
            PolicySet::compile(&load_str("api.yaml", yaml, &LoadOptions::default()).unwrap())
                .unwrap();
        policy.settings.near_limit_ratio = ratio;
        let engine = Engine::new(policy, MemoryBackend::new(StoreConfig::default()).unwrap());
        let plan = engine.direct_plan("api", &["user"]).unwrap();
        let d = OwnedDescriptor::new([("user", "u")]);
        let mut response = Response::default();
        for _ in 0..n {
            if direct {
                engine
                    .evaluate_direct(&plan, &d, 1, Apply::Commit, &mut response)
                    .unwrap();
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
    let mut within = 0;
    let mut near = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let outcome = key
            .key()
            .labels()
            .find(|l| l.key() == "outcome")
            .map(|l| l.value().to_owned());
        if let (Some(o), DebugValue::Counter(c)) = (outcome, value) {
            match o.as_str() {
                "within_limit" => within += c,
                "near_limit" => near += c,
                _ => {}
            }
        }
    }
    (within, near)
}

#[test]
fn near_means_more_than_the_floor_of_the_ratio_used() {
    for direct in [false, true] {
        // ⌊10 × 0.8⌋ = 8: the 9th and 10th requests.
        assert_eq!(count(0.8, 10, direct), (10, 2), "direct {direct}");
        // ⌊10 × 0.85⌋ = 8 as well.
        assert_eq!(count(0.85, 10, direct), (10, 2), "direct {direct}");
        // ⌊10 × 0.9⌋ = 9: only the 10th.
        assert_eq!(count(0.9, 10, direct), (10, 1), "direct {direct}");
        // 0: every admitted request has used something.
        assert_eq!(count(0.0, 10, direct), (10, 10), "direct {direct}");
        // 1: never more than the whole limit used.
        assert_eq!(count(1.0, 10, direct), (10, 0), "direct {direct}");
        // Below the threshold nothing is near.
        assert_eq!(count(0.8, 8, direct), (8, 0), "direct {direct}");
    }
}
