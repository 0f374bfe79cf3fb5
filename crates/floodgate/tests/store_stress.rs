//! Exactness under contention: many threads hammering the same keys never
//! get more than the limit admitted, whatever the interleaving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use floodgate::algorithms::{AnyLimit, Concurrency, FixedWindow, Gcra, SlidingLog, SlidingWindow};
use floodgate::store::Item;
use floodgate::{Algorithm, Apply, ManualClock, RateLimiter, Store, StoreConfig, Timestamp};

const THREADS: usize = 8;

/// Runs `THREADS` threads, each trying `tries` requests of cost 1 on one key
/// at a frozen instant, and returns how many were admitted.
fn hammer<A>(limit: A, tries: usize) -> u64
where
    A: Algorithm + 'static,
    A::State: 'static,
{
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let limiter: Arc<RateLimiter<u64, A, _>> = Arc::new(RateLimiter::with_clock(limit, clock));
    let admitted = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, admitted, barrier) = (limiter.clone(), admitted.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..tries {
                    if limiter.check(&7).is_allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

#[test]
fn one_hot_key_admits_exactly_the_limit() {
    for round in 0..50 {
        let limit = 100 + round * 37;
        let tries = (limit as usize) / THREADS + 50;
        let secs = Duration::from_secs(3600);
        assert_eq!(hammer(Gcra::new(1, secs, limit).unwrap(), tries), limit);
        assert_eq!(hammer(FixedWindow::new(limit, secs).unwrap(), tries), limit);
        assert_eq!(
            hammer(SlidingWindow::new(limit, secs).unwrap(), tries),
            limit
        );
        assert_eq!(hammer(SlidingLog::new(limit, secs).unwrap(), tries), limit);
        assert_eq!(
            hammer(
                (
                    Gcra::new(1, secs, limit).unwrap(),
                    FixedWindow::new(limit + 5, secs).unwrap()
                ),
                tries
            ),
            limit
        );
    }
}

#[test]
fn concurrency_permits_never_exceed_the_maximum() {
    let limiter: Arc<RateLimiter<u64, Concurrency>> =
        Arc::new(RateLimiter::new(Concurrency::new(3).unwrap()));
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, in_flight, peak) = (limiter.clone(), in_flight.clone(), peak.clone());
            thread::spawn(move || {
                for _ in 0..2_000 {
                    if let Ok(permit) = limiter.acquire(&1, 1) {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::hint::spin_loop();
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= 3);
    // Everything was given back: the full quota is available again.
    assert_eq!(limiter.peek(&1, 0).remaining, 3);
}

/// Layers over different keys (a global cap, per-user limits) decided
/// atomically: the global count is exact and no user exceeds its own limit,
/// even though requests denied by one layer must not consume the others.
#[test]
fn layered_batches_are_atomic_under_contention() {
    for round in 0..20u64 {
        let store: Arc<Store<String, _>> = Arc::new(Store::new(StoreConfig::default()).unwrap());
        let hour = Duration::from_secs(3600);
        let global_limit = 150 + round;
        let global = Arc::new(AnyLimit::from(
            FixedWindow::new(global_limit, hour).unwrap(),
        ));
        let per_user = Arc::new(AnyLimit::from(Gcra::new(1, hour, 40).unwrap()));
        let now = Timestamp::from_secs(1_700_000_000);
        let admitted: Arc<Vec<AtomicU64>> =
            Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, global, per_user, admitted) = (
                    store.clone(),
                    global.clone(),
                    per_user.clone(),
                    admitted.clone(),
                );
                thread::spawn(move || {
                    // Threads share users pairwise: user t/2.
                    let user = format!("user:{}", t / 2);
                    let mut out = [floodgate::Decision {
                        outcome: floodgate::Outcome::Allowed,
                        limit: 0,
                        remaining: 0,
                        reset_after: Duration::ZERO,
                        retry_after: None,
                    }; 2];
                    for _ in 0..100 {
                        let items = [
                            Item {
                                key: "global",
                                limit: &*global,
                                cost: 1,
                            },
                            Item {
                                key: user.as_str(),
                                limit: &*per_user,
                                cost: 1,
                            },
                        ];
                        if store
                            .decide_many(&items, now, Apply::Commit, &mut out)
                            .is_allowed()
                        {
                            admitted[t].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let per: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let total: u64 = per.iter().sum();
        // 4 users × 40 = 160 ≥ global: the global layer is the binding one.
        assert_eq!(total, global_limit.min(160), "round {round}: {per:?}");
        for pair in per.chunks(2) {
            assert!(pair.iter().sum::<u64>() <= 40, "{per:?}");
        }
        // Nothing denied leaked into the global counter.
        let items = [Item {
            key: "global",
            limit: &*global,
            cost: 0,
        }];
        let mut out = [items_decision(); 1];
        let d = store.decide_many(&items, now, Apply::Check, &mut out);
        assert_eq!(d.remaining, global_limit - total);
    }
}

fn items_decision() -> floodgate::Decision {
    floodgate::Decision {
        outcome: floodgate::Outcome::Allowed,
        limit: 0,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    }
}

#[test]
fn shaper_and_sub_window_counter_admit_exactly_the_limit() {
    use floodgate::algorithms::{NginxRate, Shaper, ShaperDelay, SubWindowCounter};
    for round in 0..30 {
        let limit = 100 + round * 41;
        let tries = (limit as usize) / THREADS + 50;
        // nginx admits `burst + 1` at once on a fresh key.
        let shaper = Shaper::new(NginxRate::PerMinute(1), limit - 1, ShaperDelay::NoDelay).unwrap();
        assert_eq!(hammer(shaper, tries), limit);
        let queued = Shaper::new(NginxRate::PerSecond(1), limit - 1, ShaperDelay::Queue).unwrap();
        assert_eq!(hammer(queued, tries), limit);
        let secs = Duration::from_secs(3600);
        assert_eq!(
            hammer(SubWindowCounter::new(limit, secs, 6).unwrap(), tries),
            limit
        );
    }
}
