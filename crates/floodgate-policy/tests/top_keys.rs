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
