//! A full store cannot be flooded into erasing a restriction: a state that
//! still restricts its key is kept before any new key's, keys holding
//! permits count against the capacity, and each [`WhenFull`] rule decides
//! new keys as documented.

use std::time::Duration;

use floodgate::algorithms::{
    AnyLimit, AnyState, Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog,
    SlidingWindow,
};
use floodgate::store::{Item, WhenFull};
use floodgate::{Algorithm, Apply, Decision, Outcome, Store, StoreConfig, Timestamp};
use proptest::prelude::*;

const CAPACITY: usize = 1_024;
const START: u64 = 1_700_000_000;

/// A store of [`CAPACITY`] keys in `shards` shards (one fills exactly).
fn store<S>(when_full: WhenFull, shards: usize) -> Store<u64, S> {
    Store::new(StoreConfig {
        capacity: CAPACITY,
        shards,
        when_full,
    })
    .unwrap()
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(START * 1_000 + ms)
}

/// Spends key 0's limit, floods `flood` distinct keys (one request each)
/// within a few seconds, and says whether key 0 is still restricted.
fn victim_survives<A: Algorithm>(limit: &A, spend: u64, flood: u64) -> bool {
    let store = store(WhenFull::default(), 4);
    assert!(
        store
            .decide(limit, &0, at(0), spend, Apply::Commit)
            .is_allowed()
    );
    assert!(store.decide(limit, &0, at(0), 1, Apply::Commit).is_denied());
    for k in 1..=flood {
        // 2.5 s of flood in all, crossing whole seconds (the full store
        // looks for room once a second).
        store.decide(limit, &k, at(k * 2_500 / flood), 1, Apply::Commit);
    }
    let stats = store.stats();
    assert!(stats.keys <= store.capacity(), "{stats:?}");
    store
        .decide(limit, &0, at(2_600), 1, Apply::Commit)
        .is_denied()
}

/// A flood of twenty times the capacity in new keys, one request each,
/// gives no algorithm's victim its quota back.
#[test]
fn a_flood_of_new_keys_gives_no_victim_its_quota_back() {
    let flood = 20 * CAPACITY as u64;
    let minute = Duration::from_secs(60);
    assert!(victim_survives(
        &FixedWindow::new(5, minute * 60).unwrap(),
        5,
        flood
    ));
    assert!(victim_survives(&Gcra::new(1, minute, 5).unwrap(), 5, flood));
    assert!(victim_survives(
        &SlidingLog::new(5, minute).unwrap(),
        5,
        flood
    ));
    assert!(victim_survives(
        &SlidingWindow::new(5, minute).unwrap(),
        5,
        flood
    ));
    let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
    assert!(victim_survives(&shaper, 1, flood));
    assert!(victim_survives(&Concurrency::new(5).unwrap(), 5, flood));
    // The same through the enum the policy engine stores.
    let any = AnyLimit::from(FixedWindow::new(5, minute).unwrap());
    assert!(victim_survives(&any, 5, flood));
}

/// Keys holding permits count against the capacity: twenty times as many
/// held permits as the capacity hold no more than it, every permit held
/// is still held, and released permits make room again.
#[test]
fn held_permits_do_not_grow_the_store() {
    let store = store::<u64>(WhenFull::default(), 4);
    let one = Concurrency::new(1).unwrap();
    let keys = 20 * CAPACITY as u64;
    for k in 0..keys {
        assert!(store.decide(&one, &k, at(0), 1, Apply::Commit).is_allowed());
    }
    let stats = store.stats();
    assert!(stats.keys <= store.capacity(), "{stats:?}");
    assert!(stats.admitted_full >= keys - store.capacity() as u64);
    // Key 0 kept its permit: its release finds it.
    assert!(store.decide(&one, &0, at(0), 1, Apply::Commit).is_denied());
    for k in 0..keys {
        store.update(&one, &k, at(0), |held| one.release(held, 1));
    }
    // Released keys equal fresh ones: a second on, new keys are held again.
    let before = store.stats().admitted_full;
    assert!(
        store
            .decide(&one, &keys, at(1_000), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        store
            .decide(&one, &keys, at(1_000), 1, Apply::Commit)
            .is_denied()
    );
    assert_eq!(store.stats().admitted_full, before);
}

/// Fills a store with restricted keys (one request spends each key's
/// hourly quota) and returns it with the hourly limit.
fn full_of_restrictions(when_full: WhenFull) -> (Store<u64, AnyState>, AnyLimit) {
    let store = store(when_full, 1);
    let hourly = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3_600)).unwrap());
    for k in 0..store.capacity() as u64 {
        assert!(
            store
                .decide(&hourly, &k, at(0), 1, Apply::Commit)
                .is_allowed()
        );
    }
    assert_eq!(store.len(), store.capacity());
    (store, hourly)
}

/// `admit`: a new key is decided as a fresh key at each request, without
/// state, and no held restriction is lost.
#[test]
fn a_full_store_admits_new_keys_without_state() {
    let (store, hourly) = full_of_restrictions(WhenFull::Admit);
    let new = u64::MAX;
    for _ in 0..3 {
        assert!(
            store
                .decide(&hourly, &new, at(10), 1, Apply::Commit)
                .is_allowed()
        );
    }
    let stats = store.stats();
    assert_eq!((stats.admitted_full, stats.evictions), (3, 0), "{stats:?}");
    assert_eq!(stats.keys, store.capacity());
    for k in 0..store.capacity() as u64 {
        assert!(
            store
                .decide(&hourly, &k, at(20), 1, Apply::Commit)
                .is_denied()
        );
    }
}

/// `deny`: a new key is denied (retry after a second), alone or in a
/// batch, which then charges none of its keys.
#[test]
fn a_full_store_denies_new_keys() {
    let (store, hourly) = full_of_restrictions(WhenFull::Deny);
    let new = u64::MAX;
    let d = store.decide(&hourly, &new, at(10), 1, Apply::Commit);
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(store.stats().denied_full, 1);
    // A batch with a held key and a new one: rejected, the held key
    // (given another hour's quota to spend) is not charged.
    let roomy = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(3_600)).unwrap());
    let items = [
        Item {
            key: &0u64,
            limit: &roomy,
            cost: 1,
        },
        Item {
            key: &new,
            limit: &hourly,
            cost: 1,
        },
    ];
    let mut out: [Decision; 2] = crate::common::blank_decisions();
    let d = store.decide_many(&items, at(20), Apply::Commit, &mut out);
    assert!(d.is_denied(), "{d:?}");
    assert!(out[1].is_denied() && out[0].is_allowed(), "{out:?}");
    assert_eq!(store.stats().denied_full, 2);
    // Key 0 holds its one request of the hour, nothing from the batch.
    let left = store.decide(&roomy, &0, at(30), 0, Apply::Check);
    assert_eq!(left.remaining, 9, "{left:?}");
}

/// `evict`: the least recently used restriction goes, and its key has its
/// quota back (the behaviour a flood buys: about a capacity of new keys).
#[test]
fn a_full_store_set_to_evict_gives_quotas_back() {
    let (store, hourly) = full_of_restrictions(WhenFull::Evict);
    let new = u64::MAX;
    assert!(
        store
            .decide(&hourly, &new, at(10), 1, Apply::Commit)
            .is_allowed()
    );
    // Kept: its second request is denied.
    assert!(
        store
            .decide(&hourly, &new, at(10), 1, Apply::Commit)
            .is_denied()
    );
    let stats = store.stats();
    assert!(
        stats.evictions > 0 && stats.keys <= store.capacity(),
        "{stats:?}"
    );
    let freed = (0..store.capacity() as u64)
        .filter(|k| {
            store
                .decide(&hourly, k, at(20), 1, Apply::Commit)
                .is_allowed()
        })
        .count();
    assert!(freed > 0, "{stats:?}");
}

/// States equal to a fresh key's are dropped before any restriction: once
/// the short restrictions lapse, new keys take exactly their places, the
/// long ones all stay.
#[test]
fn lapsed_states_make_room_and_restrictions_stay() {
    for when_full in [WhenFull::Admit, WhenFull::Deny] {
        let store: Store<u64, AnyState> = store(when_full, 1);
        let hourly = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3_600)).unwrap());
        let brief = AnyLimit::from(Gcra::per_second(1).unwrap());
        let cap = store.capacity() as u64;
        for k in 0..cap {
            let limit = if k % 2 == 0 { &hourly } else { &brief };
            store.decide(limit, &k, at(0), 1, Apply::Commit);
        }
        // A flood while full finds no room.
        for k in cap..4 * cap {
            store.decide(&hourly, &k, at(100), 1, Apply::Commit);
        }
        assert_eq!(store.len() as u64, cap);
        // Two seconds on, the per-second buckets are full again.
        let held = (4 * cap..8 * cap)
            .filter(|k| {
                store.decide(&hourly, k, at(2_100), 1, Apply::Commit);
                store
                    .decide(&hourly, k, at(2_100), 0, Apply::Check)
                    .remaining
                    == 0
            })
            .count() as u64;
        assert_eq!(held, cap / 2, "{when_full:?}");
        assert!(store.stats().reclaimed >= cap / 2);
        for k in (0..cap).step_by(2) {
            assert!(
                store
                    .decide(&hourly, &k, at(2_200), 1, Apply::Commit)
                    .is_denied(),
                "{when_full:?}: key {k} lost its restriction"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// However new keys arrive (costs, times within the victim's window),
    /// a store that admits or denies them when full never lets the victim
    /// through again, and never holds more than its capacity.
    #[test]
    fn no_flood_erases_a_restriction(
        deny in any::<bool>(),
        flood in prop::collection::vec((any::<u64>(), 0..3u64, 0..500u64), 1..3_000),
    ) {
        let when_full = if deny { WhenFull::Deny } else { WhenFull::Admit };
        let store: Store<u64, AnyState> = Store::new(StoreConfig {
            capacity: 64,
            shards: 1,
            when_full,
        })
        .unwrap();
        let limit = AnyLimit::from(Gcra::new(1, Duration::from_secs(3_600), 3).unwrap());
        let victim = 0u64;
        store.decide(&limit, &victim, at(0), 3, Apply::Commit);
        let mut now = 0;
        for (key, cost, gap) in flood {
            now += gap;
            store.decide(&limit, &(key | 1), at(now), cost, Apply::Commit);
            prop_assert!(store.len() <= 64);
        }
        prop_assert!(store.decide(&limit, &victim, at(now), 1, Apply::Commit).is_denied());
    }
}

/// `deny`: a batch of new keys that one shard has room for only some of
/// is rejected whole, not admitted in part without state.
#[test]
fn a_batch_of_new_keys_without_room_for_all_is_denied() {
    let store = store::<AnyState>(WhenFull::Deny, 1);
    let hourly = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3_600)).unwrap());
    // One place left.
    for k in 0..store.capacity() as u64 - 1 {
        assert!(
            store
                .decide(&hourly, &k, at(0), 1, Apply::Commit)
                .is_allowed()
        );
    }
    let (a, b) = (u64::MAX, u64::MAX - 1);
    let items = [a, b].map(|key| (key, hourly.clone()));
    let items = items.each_ref().map(|(key, limit)| Item {
        key,
        limit,
        cost: 1,
    });
    let mut out: [Decision; 2] = crate::common::blank_decisions();
    let d = store.decide_many(&items, at(10), Apply::Commit, &mut out);
    assert!(d.is_denied(), "{d:?} {out:?}");
    assert_eq!(store.stats().admitted_full, 0);
    // Nothing charged: the one place left still takes one of them.
    assert_eq!(store.len(), store.capacity() - 1);
    assert!(
        store
            .decide(&hourly, &a, at(20), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(store.len(), store.capacity());
}
