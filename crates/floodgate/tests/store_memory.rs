//! Bounded memory: idle keys are forgotten by themselves, a full store
//! evicts the least recently used keys first and counts them, and hostile
//! key churn leaves the table's allocation flat.

use std::time::Duration;

use floodgate::algorithms::{Concurrency, FixedWindow, Gcra};
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
    assert!(limiter.store().stats().evictions >= 900_000);
}

#[test]
fn keys_holding_permits_are_never_evicted() {
    let clock = clock();
    let limiter: RateLimiter<u64, _, _> = RateLimiter::with_config(
        Concurrency::new(1).unwrap(),
        StoreConfig {
            capacity: 64,
            shards: 1,
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
    let ours = s1.as_nanos() as i128 - s0.as_nanos() as i128;
    let mono = t1.duration_since(t0).as_nanos() as i128;
    // A re-anchor in between may move it by the drift of a second.
    assert!((ours - mono).abs() < 2_000_000, "{ours} vs {mono}");
}
