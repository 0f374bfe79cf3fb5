//! Through the store, a clock that goes backwards is no time elapsed: every
//! decision equals the one made at the latest instant the store has seen
//! (per shard), for every algorithm: a step back never refills, and never
//! denies more either.

use std::time::Duration;

use floodgate::algorithms::{
    AnyLimit, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog, SlidingWindow,
    SubWindowCounter,
};
use floodgate::store::Item;
use floodgate::{Apply, Decision, Outcome, Store, StoreConfig, Timestamp};
use proptest::prelude::*;

fn limits() -> Vec<AnyLimit> {
    let s = Duration::from_secs(1);
    vec![
        Gcra::new(10, s, 5).unwrap().into(),
        FixedWindow::new(7, s).unwrap().into(),
        SlidingWindow::new(7, s).unwrap().into(),
        SubWindowCounter::new(7, s, 4).unwrap().into(),
        SlidingLog::new(7, s).unwrap().into(),
        Shaper::new(NginxRate::PerSecond(5), 3, ShaperDelay::Queue)
            .unwrap()
            .into(),
    ]
}

/// Steps: (forward ms, or back ms when negative; key; cost).
fn schedule() -> impl Strategy<Value = Vec<(i64, u8, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 0i64..400, 1 => -3_600_000i64..0],
            0u8..3,
            0u64..3,
        ),
        1..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_step_back_is_no_time_elapsed(steps in schedule(), batch in any::<bool>()) {
        for limit in limits() {
            // One shard: the latest instant is kept per shard, so with one
            // it is the latest the store has seen.
            let config = StoreConfig { shards: 1, ..StoreConfig::default() };
            let back: Store<u8, _> = Store::new(config).unwrap();
            let latest: Store<u8, _> = Store::new(config).unwrap();
            let mut clock: i64 = 1_700_000_000_000; // ms
            let mut max = i64::MIN;
            for &(delta, key, cost) in &steps {
                clock += delta;
                max = max.max(clock);
                let at = |ms: i64| Timestamp::from_millis(ms as u64);
                let (a, b) = if batch {
                    // Two keys in one batch: the batch's instant is the
                    // latest any of its shards has seen.
                    let decide = |store: &Store<u8, _>, ms: i64| {
                        let other = (key + 1) % 3;
                        let items = [
                            Item { key: &key, limit: &limit, cost },
                            Item { key: &other, limit: &limit, cost },
                        ];
                        let mut out = [Decision {
                            outcome: Outcome::Allowed,
                            limit: 0,
                            remaining: 0,
                            reset_after: Duration::ZERO,
                            retry_after: None,
                        }; 2];
                        store.decide_many(&items, at(ms), Apply::Commit, &mut out)
                    };
                    (decide(&back, clock), decide(&latest, max))
                } else {
                    (
                        back.decide(&limit, &key, at(clock), cost, Apply::Commit),
                        latest.decide(&limit, &key, at(max), cost, Apply::Commit),
                    )
                };
                prop_assert_eq!(a, b, "{:?} at {} (latest {})", limit, clock, max);
            }
        }
    }
}
