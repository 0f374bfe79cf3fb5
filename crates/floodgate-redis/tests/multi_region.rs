//! Two regions, a delayed link between them: the simulation behind
//! `docs/multi-region.md`. Each region has its own real `redis-server`;
//! time is the simulation's (client-supplied), so a link delay costs no
//! waiting and every run gives the same figures.
//!
//! * **Per-region counting, asynchronous aggregation**: each region decides
//!   exactly on its own Redis; every hit it admits is sent to the other
//!   region, which adds it to its own count when it arrives, a link delay
//!   later. Each region sees the other's hits late, so the two together
//!   admit past the limit: the test measures by how much, per window,
//!   against the delay, and checks it against `(rate_a + rate_b) × delay`.
//! * **Affinity**: the key's traffic all in one region: nothing to
//!   aggregate, never past the limit.
//! * **A region's share leased**: both regions decide in `sync: lease`
//!   against one home Redis; a lease call from the remote region crosses
//!   the link (two delays). Never past the limit; the figure is how many of
//!   the remote region's decisions wait for the link.
//!
//! Print the table with
//! `cargo test -p floodgate-redis --test suite multi_region -- --nocapture`.

use crate::common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use common::{Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::{Backend, SyncMode};
use floodgate_redis::{
    BreakerConfig, FailurePolicy, Mode, RedisBackend, RedisConfig, ResilientBackend, TimeSource,
};

/// The limit: per window of one second.
const LIMIT: u64 = 100;
const WINDOW_US: u64 = 1_000_000;
const WINDOWS: u64 = 3;
/// Requests per second arriving in each region (together three times the
/// limit).
const RATE: u64 = 150;
/// The simulation's epoch (µs), on a window boundary.
const BASE: u64 = 1_000_000 * WINDOW_US;
/// Link delays simulated (ms).
const DELAYS_MS: [u64; 6] = [0, 10, 25, 50, 100, 250];

fn config(url: &str, prefix: &str, sync: SyncMode) -> RedisConfig {
    RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout: Duration::from_secs(2),
        time_source: TimeSource::Client {
            expiry_slack: Duration::from_secs(3600),
        },
        failure_policy: FailurePolicy::FailClosed,
        breaker: BreakerConfig {
            failure_threshold: 1000,
            cool_down: Duration::from_millis(5),
        },
        sync,
        ..RedisConfig::new(url, Mode::Single).unwrap()
    }
}

async fn region(url: &str, prefix: &str, sync: SyncMode) -> ResilientBackend {
    let config = config(url, prefix, sync);
    let redis = RedisBackend::connect_lazy(&config).await.expect("backend");
    ResilientBackend::new(redis, &config).expect("backend")
}

/// Decides one request (or forces one hit) on `b` at `at_us`.
async fn decide(b: &ResilientBackend, limit: &AnyLimit, at_us: u64, apply: Apply) -> bool {
    let items = [item(b"g", b"key", limit, 1)];
    let mut out = [blank()];
    b.decide(
        &items,
        Timestamp::from_micros(BASE + at_us),
        apply,
        &mut out,
    )
    .await
    .expect("a decision")
    .is_allowed()
}

/// Arrival times (µs) of the requests of a region receiving `rate` per
/// second, shifted by `phase` (0..1 of the spacing).
fn arrivals(rate: u64, phase: f64) -> Vec<u64> {
    if rate == 0 {
        return Vec::new();
    }
    let every = WINDOW_US as f64 / rate as f64;
    (0..rate * WINDOWS)
        .map(|i| ((i as f64 + phase) * every) as u64)
        .collect()
}

/// Admissions of both regions together, per window.
type PerWindow = [u64; WINDOWS as usize];

/// Over-admission per window: (mean, max) in units.
fn over(admitted: &PerWindow) -> (f64, u64) {
    let over: Vec<u64> = admitted.iter().map(|&a| a.saturating_sub(LIMIT)).collect();
    let max = over.iter().copied().max().unwrap_or(0);
    (over.iter().sum::<u64>() as f64 / over.len() as f64, max)
}

/// Per-region counting: each region decides on its own Redis and adds the
/// other's hits `delay_us` after they were admitted there.
async fn aggregated(urls: [&str; 2], rates: [u64; 2], delay_us: u64, run: &str) -> PerWindow {
    let limit = AnyLimit::from(FixedWindow::new(LIMIT, Duration::from_micros(WINDOW_US)).unwrap());
    let regions = [
        region(urls[0], &format!("{run}a:"), SyncMode::Exact).await,
        region(urls[1], &format!("{run}b:"), SyncMode::Exact).await,
    ];
    // Events in time order: (time, 0 = a hit arriving over the link / 1 =
    // a request, region, origin time).
    let mut events: BinaryHeap<Reverse<(u64, u8, usize, u64)>> = BinaryHeap::new();
    for (r, &rate) in rates.iter().enumerate() {
        for t in arrivals(rate, 0.5 * r as f64) {
            events.push(Reverse((t, 1, r, t)));
        }
    }
    let mut admitted = PerWindow::default();
    while let Some(Reverse((t, kind, r, origin))) = events.pop() {
        if kind == 0 {
            // The other region's hit, counted in the window it was
            // admitted in (a window that has ended counts no more).
            if origin / WINDOW_US == t / WINDOW_US {
                decide(&regions[r], &limit, t, Apply::Force).await;
            }
            continue;
        }
        if decide(&regions[r], &limit, t, Apply::Commit).await {
            admitted[(t / WINDOW_US) as usize] += 1;
            events.push(Reverse((t + delay_us, 0, 1 - r, t)));
        }
    }
    admitted
}

/// Both regions lease from one home Redis (region a's). Returns the
/// admissions per window and the remote region's lease calls per decision
/// (each a crossing of the link there and back).
async fn leased(home: &str, rates: [u64; 2], run: &str) -> (PerWindow, f64) {
    let limit = AnyLimit::from(FixedWindow::new(LIMIT, Duration::from_micros(WINDOW_US)).unwrap());
    let lease = SyncMode::Lease {
        duration: Duration::from_micros(WINDOW_US),
    };
    let regions = [
        region(home, &format!("{run}:"), lease).await,
        region(home, &format!("{run}:"), lease).await,
    ];
    let mut events: Vec<(u64, usize)> = Vec::new();
    for (r, &rate) in rates.iter().enumerate() {
        events.extend(arrivals(rate, 0.5 * r as f64).into_iter().map(|t| (t, r)));
    }
    events.sort();
    let mut admitted = PerWindow::default();
    let mut remote = 0u64;
    for (t, r) in events {
        if decide(&regions[r], &limit, t, Apply::Commit).await {
            admitted[(t / WINDOW_US) as usize] += 1;
        }
        remote += u64::from(r == 1);
    }
    let calls = regions[1].sharing_stats().lease_calls.get();
    (admitted, calls as f64 / remote.max(1) as f64)
}

#[test]
fn over_admission_against_the_link_delay() {
    let rt = common::runtime();
    rt.block_on(async {
        let (a, b) = (Server::start(), Server::start());
        let urls = [a.url(), b.url()];
        let urls = [urls[0].as_str(), urls[1].as_str()];
        println!(
            "limit {LIMIT}/s, {RATE}/s arriving in each region ({} in all), {WINDOWS} windows",
            2 * RATE
        );
        println!(
            "| link delay | per-region counting, split 50/50: past the limit per window, mean (max) | \
             affinity (all in one region) | region's share leased: past the limit | remote decisions waiting for the link |"
        );
        println!("|---|---|---|---|---|");
        let mut last = 0.0;
        for (i, &ms) in DELAYS_MS.iter().enumerate() {
            let delay = ms * 1000;
            let split = aggregated(urls, [RATE, RATE], delay, &format!("s{i}")).await;
            let (mean, max) = over(&split);
            // Each region admits on a count missing the other's last
            // `delay` of hits, at most.
            let bound = (2 * RATE * delay).div_ceil(WINDOW_US) + 1;
            assert!(
                max <= bound,
                "{ms} ms: {max} past the limit in a window, more than {bound} ({split:?})"
            );
            if ms == 0 {
                assert_eq!(max, 0, "no delay, no over-admission: {split:?}");
            }
            assert!(mean + 1.0 >= last, "{ms} ms: less over-admission with a longer delay");
            last = mean;
            let one = aggregated(urls, [2 * RATE, 0], delay, &format!("f{i}")).await;
            assert_eq!(over(&one).1, 0, "{ms} ms, affinity: {one:?}");
            let (shared, waits) = leased(urls[0], [RATE, RATE], &format!("l{i}")).await;
            assert_eq!(over(&shared).1, 0, "{ms} ms, leased: {shared:?}");
            println!(
                "| {ms} ms | {mean:.1} ({max}) units, {:.1} % ({:.1} %) | 0 | 0 | {:.1} % (each {} ms more) |",
                mean * 100.0 / LIMIT as f64,
                max as f64 * 100.0 / LIMIT as f64,
                waits * 100.0,
                2 * ms
            );
        }
        assert!(last > 0.0, "the longest delay shows over-admission");
    });
}
