//! Bounded memory: idle keys are forgotten by themselves, a full store
//! (set to evict) evicts the least recently used keys first and counts
//! them, and hostile key churn leaves the table's allocation flat.

use std::time::Duration;

use floodgate::algorithms::{Concurrency, FixedWindow, Gcra};
use floodgate::store::WhenFull;
use floodgate::{ManualClock, RateLimiter, StoreConfig, Timestamp};

fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_secs(1_700_000_000))
}

#[test]
fn idle_keys_are_reclaimed_without_any_call() {
    let clock = clock();
    let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
        Gcra::per_second(10).unwrap(),
        StoreConfig::with_capacity(1 << 20),
        &clock,
    )
    .unwrap();
    for k in 0..10_000u64 {
        assert!(limiter.check(&k).is_allowed());
    }
    assert_eq!(limiter.store().len(), 10_000);
    // A second later every bucket is full again: the keys equal fresh keys.
    clock.advance(Duration::from_secs(2));
    for k in 10_000..30_000u64 {
        limiter.check(&k);
    }
    let stats = limiter.store().stats();
    assert!(stats.reclaimed >= 10_000, "{stats:?}");
    assert!(stats.keys <= 20_000 + 64 * 64, "{stats:?}");
    assert_eq!(stats.evictions, 0);
}

#[test]
fn requests_that_leave_a_key_fresh_store_nothing() {
    let clock = clock();
    let limiter: RateLimiter<u64, _, _> = RateLimiter::with_clock(
        FixedWindow::new(5, Duration::from_secs(60)).unwrap(),
        &clock,
    );
    for k in 0..1000u64 {
        // Peeks and never-admissible costs do not create state.
        assert!(limiter.peek(&k, 1).is_allowed());
        assert!(limiter.check_n(&k, 0).is_allowed());
        assert!(limiter.check_n(&k, 6).is_denied());
    }
    assert_eq!(limiter.store().len(), 0);
}

#[test]
fn a_full_store_evicts_least_recently_used_first() {
    let clock = clock();
    let capacity = 4096;
    let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
        Gcra::new(1, Duration::from_secs(3600), 10).unwrap(),
        StoreConfig {
            capacity,
            shards: 16,
            when_full: WhenFull::Evict,
        },
        &clock,
    )
    .unwrap();
    // A hot set, touched over and over, and a stream of one-off keys.
    let hot: Vec<u64> = (0..256).collect();
    for (i, k) in (1_000_000u64..1_040_000).enumerate() {
        limiter.check(&k);
        if i % 8 == 0 {
            for h in &hot {
                limiter.check_n(h, 0);
                limiter.check(h);
            }
        }
        if i % 8 == 7 {
            // Drain the hot buckets' credit back a little so they stay live.
            clock.advance(Duration::from_millis(1));
        }
    }
    let stats = limiter.store().stats();
    assert!(stats.keys <= capacity, "{stats:?}");
    assert!(stats.evictions > 30_000, "{stats:?}");
    // The hot keys survived: they are still charged (10 − 1 per touch, so
    // they are empty), whereas an evicted key would be fresh again.
    for h in &hot {
        assert_eq!(limiter.peek(h, 0).remaining, 0, "hot key {h} was evicted");
    }
}

#[test]
fn hostile_churn_keeps_memory_flat() {
    let clock = clock();
    let limiter: RateLimiter<u128, _, _> = RateLimiter::with_config(
        FixedWindow::new(100, Duration::from_secs(60)).unwrap(),
        StoreConfig::with_capacity(10_000),
        &clock,
    )
    .unwrap();
    let mut x: u128 = 0x243F_6A88_85A3_08D3_1319_8A2E_0370_7344;
    let mut allocated = Vec::new();
    for round in 0..10 {
        for _ in 0..100_000 {
            // Random "IPv6 addresses".
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            limiter.check(&x);
        }
        allocated.push(limiter.store().allocated());
        assert!(limiter.store().len() <= 10_000 + 64, "round {round}");
    }
    // The allocation reached its bound early and never grew after.
    assert!(
        allocated.windows(2).skip(1).all(|w| w[1] <= w[0]),
        "{allocated:?}"
    );
    // Every key held is restricted: the rest were decided without state.
    assert!(limiter.store().stats().admitted_full >= 900_000);
}

#[test]
fn keys_holding_permits_are_never_evicted() {
    let clock = clock();
    let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
        Concurrency::new(1).unwrap(),
        StoreConfig {
            capacity: 64,
            shards: 1,
            ..StoreConfig::default()
        },
        &clock,
    )
    .unwrap();
    let held: Vec<_> = (0..32u64)
        .map(|k| limiter.acquire(&k, 1).unwrap())
        .collect();
    // Churn through many short-lived permits.
    for k in 1000..5000u64 {
        drop(limiter.acquire(&k, 1).unwrap());
    }
    for k in 0..32u64 {
        assert!(
            limiter.acquire(&k, 1).is_err(),
            "permit of key {k} was lost"
        );
    }
    drop(held);
    for k in 0..32u64 {
        assert!(limiter.acquire(&k, 1).is_ok());
    }
}

#[test]
fn the_system_clock_follows_the_wall_clock() {
    use floodgate::{Clock, SystemClock};
    use std::time::{SystemTime, UNIX_EPOCH};
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = wall();
    let ours = SystemClock.now().as_nanos();
    let after = wall();
    // Within a millisecond of the operating system's reading.
    assert!(
        ours + 1_000_000 >= before && ours <= after + 1_000_000,
        "{before} {ours} {after}"
    );
}

#[test]
fn the_system_clock_keeps_pace_with_the_monotonic_clock() {
    use floodgate::{Clock, SystemClock};
    use std::time::{Duration, Instant};
    let (t0, s0) = (Instant::now(), SystemClock.now());
    std::thread::sleep(Duration::from_millis(50));
    let (s1, t1) = (SystemClock.now(), Instant::now());
    let ours = i128::from(s1.as_nanos()) - i128::from(s0.as_nanos());
    let mono = t1.duration_since(t0).as_nanos() as i128;
    // A re-anchor in between may move it by the drift of a second.
    assert!((ours - mono).abs() < 2_000_000, "{ours} vs {mono}");
}

/// Only permits held pin a key: a state whose idle instant saturates at the
/// end of time (a huge weighted charge, a penalty hammered on, a block for
/// ever) is still evicted when the store is full and set to evict.
#[test]
fn saturated_idle_times_do_not_pin_keys() {
    use floodgate::algorithms::{AnyLimit, AnyState};
    use floodgate::{Algorithm, Apply, Penalize, Store};

    fn bounded<A: Algorithm>(limit: &A, now: Timestamp, keys: u64, cost: u64, hits: usize) {
        let store: Store<u64, A::State> = Store::new(StoreConfig {
            capacity: 64,
            shards: 1,
            when_full: WhenFull::Evict,
        })
        .unwrap();
        for k in 0..keys {
            for _ in 0..hits {
                store.decide(limit, &k, now, cost, Apply::Commit);
            }
        }
        let stats = store.stats();
        assert!(stats.keys <= 64, "{stats:?}");
        assert!(stats.evictions >= keys - 64, "{stats:?}");
        assert_eq!(stats.reclaimed, 0, "{stats:?}");
    }

    let day = Duration::from_secs(86_400);
    let now = Timestamp::from_secs(1_700_000_000);
    // Idle in 1000 years: past the end of time.
    let yearly = Gcra::new(1, day * 365, 1000).unwrap();
    bounded(&yearly, now, 10_000, 1000, 1);
    // Each denial counted pushes the bucket a day further.
    let daily = Penalize(Gcra::new(1, day, 1).unwrap());
    let late = Timestamp::MAX.saturating_sub(day * 5);
    bounded(&daily, late, 500, 1, 10);
    // Blocked for ever after a denial.
    let blocking: AnyLimit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .with_block(Duration::MAX);
    bounded(&blocking, now, 500, 1, 2);
    let mut s = AnyState::Fresh;
    blocking.decide(&mut s, now, 1, Apply::Commit);
    blocking.decide(&mut s, now, 1, Apply::Commit);
    // Its idle instant saturates, but only limits that hold permits pin.
    assert_eq!(blocking.idle_at(&s, now), Timestamp::MAX);
    assert!(!blocking.pins());
    assert!(AnyLimit::from(Concurrency::new(1).unwrap()).pins());
    assert!((yearly, Concurrency::new(1).unwrap()).pins());
}

/// At the end of time itself, a key idle already (whose idle instant is
/// `now`) is not pinned either: permits taken then evict it.
#[test]
fn idle_keys_at_the_end_of_time_are_not_pinned() {
    use floodgate::algorithms::{AnyLimit, AnyState};
    use floodgate::{Apply, Store};

    let store: Store<u64, AnyState> = Store::new(StoreConfig {
        capacity: 64,
        shards: 1,
        when_full: WhenFull::Evict,
    })
    .unwrap();
    let bucket = AnyLimit::from(Gcra::per_second(1).unwrap());
    let permits = AnyLimit::from(Concurrency::new(1).unwrap());
    let end = Timestamp::MAX;
    for k in 0..60u64 {
        store.decide(&bucket, &k, end - Duration::from_secs(10), 1, Apply::Commit);
    }
    for k in 0..60u64 {
        store.decide(&bucket, &k, end, 0, Apply::Commit);
    }
    for k in 1000..1040u64 {
        assert!(
            store
                .decide(&permits, &k, end, 1, Apply::Commit)
                .is_allowed()
        );
    }
    let stats = store.stats();
    assert!(stats.evictions > 0 && stats.keys <= 64, "{stats:?}");
}

/// A capacity below the shards' minimum sweep size is still the bound.
#[test]
fn a_small_capacity_is_kept() {
    let clock = clock();
    for capacity in [1, 5, 63] {
        let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
            Gcra::per_hour(1).unwrap(),
            StoreConfig::with_capacity(capacity),
            &clock,
        )
        .unwrap();
        for k in 0..50u64 {
            assert!(limiter.check(&k).is_allowed());
        }
        // The capacity, but at least one key per shard.
        let bound = limiter.store().capacity();
        assert!(bound < 2 * capacity, "capacity {capacity}: {bound}");
        let stats = limiter.store().stats();
        assert!(stats.keys <= bound, "capacity {capacity}: {stats:?}");
    }
}

/// Past 2^32 seconds since the epoch (the year 2106 for the system clock)
/// and across the store's rebasing of idle times, a live key keeps its
/// state through every sweep, and an idle one is still reclaimed.
#[test]
fn keys_outlive_the_year_2106() {
    for start in [
        (1u64 << 31) - 30,
        (1 << 32) + 1_000,
        5_000_000_000,
        17_000_000_000,
    ] {
        let clock = ManualClock::new(Timestamp::from_secs(start));
        let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
            Gcra::per_hour(1).unwrap(),
            StoreConfig {
                capacity: 1 << 20,
                shards: 1,
                ..StoreConfig::default()
            },
            &clock,
        )
        .unwrap();
        assert!(limiter.check(&0).is_allowed());
        for round in 0..3u64 {
            // A minute on, many new keys: sweeps run, the base may move.
            clock.advance(Duration::from_secs(60));
            for k in 1..2_000u64 {
                limiter.check(&(round * 10_000 + k));
            }
            let d = limiter.check_n(&0, 0);
            assert_eq!(
                d.remaining, 0,
                "start {start}, round {round}: key 0 was dropped"
            );
        }
        // An hour later every key is idle: the next sweep reclaims them.
        clock.advance(Duration::from_secs(3_600));
        limiter.store().sweep(floodgate::Clock::now(&clock));
        assert_eq!(limiter.store().len(), 0, "start {start}");
    }
}

/// Bytes per key held, for the algorithms whose states are 16 bytes (a
/// 32-byte entry with a `u64` key), at every 50 000 keys from 100 000 to
/// 1 000 000: the shards' staggered sizes keep the tables about 63 % full
/// at any count (52–57 bytes a key), where shards of one size swing
/// between 44 % and 87.5 % (69 bytes a key at 1 000 000). What the store
/// reports is what [`Store::bytes_holding`] foresees, within 5 %.
///
/// [`Store::bytes_holding`]: floodgate::Store::bytes_holding
#[test]
fn memory_per_key_stays_low_at_every_count() {
    use floodgate::algorithms::SlidingWindow;
    use floodgate::{Algorithm, Apply, Store};

    fn per_key<A: Algorithm>(limit: &A) -> Vec<(u64, f64)> {
        let config = StoreConfig::with_capacity(2_000_000);
        let store: Store<u64, A::State> = Store::new(config).unwrap();
        assert_eq!(Store::<u64, A::State>::ENTRY, 32);
        let now = Timestamp::from_secs(1_700_000_000);
        let mut out = Vec::new();
        for k in 0..1_000_000u64 {
            store.decide(
                limit,
                &k.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                now,
                1,
                Apply::Commit,
            );
            let n = k + 1;
            if n >= 100_000 && n % 50_000 == 0 {
                let bytes = store.bytes() as f64;
                let foreseen = Store::<u64, A::State>::bytes_holding(config, n as usize) as f64;
                assert!(
                    (bytes / foreseen - 1.0).abs() <= 0.05,
                    "{n}: {bytes} {foreseen}"
                );
                out.push((n, bytes / n as f64));
            }
        }
        out
    }
    let hour = Duration::from_secs(3600);
    for figures in [
        per_key(&FixedWindow::new(1000, hour).unwrap()),
        per_key(&Gcra::new(1000, hour, 1000).unwrap()),
        per_key(&SlidingWindow::new(1000, hour).unwrap()),
    ] {
        let worst = figures.iter().map(|f| f.1).fold(0.0, f64::max);
        assert!(worst <= 60.0, "{figures:?}");
    }
}

/// Entry sizes: a 16-byte state with a `u64` key is a 32-byte entry; the
/// state of any kind ([`AnyState`], 24 bytes: the largest unboxed state, 16
/// bytes, and its kind) a 40-byte one, and packed ([`PackedState`], its
/// kind in the inline state's spare bits) a 32-byte one again.
///
/// [`AnyState`]: floodgate::algorithms::AnyState
/// [`PackedState`]: floodgate::algorithms::PackedState
#[test]
fn entries_are_compact() {
    use floodgate::Store;
    use floodgate::algorithms::{
        AnyState, GcraState, PackedState, SlidingWindowState, WindowState,
    };
    assert_eq!(std::mem::size_of::<AnyState>(), 24);
    assert_eq!(Store::<u64, AnyState>::ENTRY, 40);
    assert_eq!(std::mem::size_of::<PackedState>(), 16);
    assert_eq!(Store::<u64, PackedState>::ENTRY, 32);
    assert_eq!(Store::<u64, GcraState>::ENTRY, 32);
    assert_eq!(Store::<u64, WindowState>::ENTRY, 32);
    assert_eq!(Store::<u64, SlidingWindowState>::ENTRY, 32);
}

/// A store's shards share out exactly its capacity, however small beside
/// the shards asked for: full, it holds that many keys and no more.
#[test]
fn a_small_store_holds_exactly_its_capacity() {
    use floodgate::Store;
    use floodgate::algorithms::WindowState;
    for capacity in (1..=300).chain([1_000, 4_097]) {
        for shards in [1, 64, 1 << 16] {
            let config = StoreConfig {
                capacity,
                shards,
                ..StoreConfig::default()
            };
            let store: Store<u64, WindowState> = Store::new(config).unwrap();
            assert_eq!(store.capacity(), capacity, "{shards} shards");
        }
    }
}
