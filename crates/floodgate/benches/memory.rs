//! Memory per key at 1 000 000 keys (`KEYS` overrides): resident set size
//! delta / keys, for every algorithm and for governor's keyed limiter (or
//! those named after `--bench`), each measured in a fresh child process so
//! that one measurement cannot reuse another's pages. Each store has room
//! for twice the keys. `any_*` hold an [`AnyLimit`]'s state of any kind
//! (`AnyState`, 24 bytes), `packed_*` the same packed as the policy's
//! store keeps it (`PackedState`, 16 bytes).
//!
//! `cargo bench -p floodgate --bench memory`
//! `KEYS=10000000 cargo bench -p floodgate --bench memory -- gcra fixed_window`

use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;

use floodgate::algorithms::{
    AnyLimit, FixedWindow, Gcra, NginxRate, Packed, Shaper, ShaperDelay, SlidingLog, SlidingWindow,
    SubWindowCounter,
};
use floodgate::{Algorithm, RateLimiter, StoreConfig};

const KEYS: u64 = 1_000_000;
/// Under `cargo test` (no `--bench` flag) a quick smoke run.
const SMOKE_KEYS: u64 = 10_000;

fn keys() -> u64 {
    if std::env::args().any(|a| a == "--bench" || a == "--child") {
        std::env::var("KEYS").map_or(KEYS, |k| k.parse().expect("KEYS: a number"))
    } else {
        SMOKE_KEYS
    }
}
const NAMES: [&str; 12] = [
    "governor",
    "gcra",
    "fixed_window",
    "sliding_window",
    "sub_windows_6",
    "shaper",
    "sliding_log_10",
    "sliding_log_100",
    "any_fixed_window",
    "packed_fixed_window",
    "packed_gcra",
    "packed_sliding_window",
];

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// RSS growth (none if the process shrank meanwhile, as it may under a
/// short test run) from `keys()` keys charged `cost` each, at one instant (so
/// that no key turns idle while they are inserted, however long that takes).
fn fill<A: Algorithm>(limit: A, cost: u64) -> u64 {
    let before = rss_bytes();
    let clock = floodgate::ManualClock::new(floodgate::Timestamp::from_secs(1_700_000_000));
    let limiter: RateLimiter<u64, A, _> = RateLimiter::with_config(
        limit,
        StoreConfig::with_capacity(2 * keys() as usize),
        &clock,
    )
    .unwrap();
    for k in 0..keys() {
        std::hint::black_box(limiter.check_n(&k, cost));
    }
    assert_eq!(limiter.store().len() as u64, keys());
    let after = rss_bytes();
    std::hint::black_box(&limiter);
    after.saturating_sub(before)
}

fn measure(name: &str) -> u64 {
    let hour = Duration::from_secs(3600);
    match name {
        "governor" => {
            let before = rss_bytes();
            let quota = governor::Quota::per_hour(NonZeroU32::new(1000).unwrap());
            let limiter = governor::DefaultKeyedRateLimiter::<u64>::keyed(quota);
            for k in 0..keys() {
                let _ = std::hint::black_box(limiter.check_key(&k));
            }
            let after = rss_bytes();
            std::hint::black_box(&limiter);
            after.saturating_sub(before)
        }
        "gcra" => fill(Gcra::new(1000, hour, 1000).unwrap(), 1),
        "fixed_window" => fill(FixedWindow::new(1000, hour).unwrap(), 1),
        "sliding_window" => fill(SlidingWindow::new(1000, hour).unwrap(), 1),
        "sub_windows_6" => fill(SubWindowCounter::new(1000, hour, 6).unwrap(), 1),
        "shaper" => fill(
            Shaper::new(NginxRate::PerMinute(10), 100, ShaperDelay::NoDelay).unwrap(),
            1,
        ),
        // A full log: every key holds `limit` timestamps.
        "sliding_log_10" => fill(SlidingLog::new(10, hour).unwrap(), 10),
        "sliding_log_100" => fill(SlidingLog::new(100, hour).unwrap(), 100),
        "any_fixed_window" => fill(AnyLimit::from(FixedWindow::new(1000, hour).unwrap()), 1),
        "packed_fixed_window" => fill(
            Packed(AnyLimit::from(FixedWindow::new(1000, hour).unwrap())),
            1,
        ),
        "packed_gcra" => fill(
            Packed(AnyLimit::from(Gcra::new(1000, hour, 1000).unwrap())),
            1,
        ),
        "packed_sliding_window" => fill(
            Packed(AnyLimit::from(SlidingWindow::new(1000, hour).unwrap())),
            1,
        ),
        other => panic!("unknown limiter {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        println!("{}", measure(&args[pos + 1]));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    println!("{:<22} {:>14} {:>12}", "limiter", "RSS delta", "bytes/key");
    if keys() == SMOKE_KEYS {
        for name in NAMES {
            measure(name);
        }
        println!("(smoke run; `cargo bench` measures 1 000 000 keys per limiter)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let named: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for name in NAMES {
        if !named.is_empty() && !named.iter().any(|n| *n == name) {
            continue;
        }
        let out = Command::new(&exe).args(["--child", name]).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        println!(
            "{:<22} {:>11} MiB {:>12.1}",
            name,
            bytes / (1 << 20),
            bytes as f64 / keys() as f64
        );
    }
}
