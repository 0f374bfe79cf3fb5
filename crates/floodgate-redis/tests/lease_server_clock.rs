//! `sync: lease` on Redis's clock (the default time source): four
//! instances, each estimating Redis's clock from its replies, decide the
//! same keys at once in real time, with many tasks each. Every admission
//! whose round trip began and ended in one window was decided in that
//! window (Redis's clock is this machine's): no window of any key may hold
//! more of them than the limit. (Round trips across a window's end are
//! not placed; they can only hide a violation, never make one up.)

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Server, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::{Backend, SyncMode};
use floodgate_redis::{FailurePolicy, Mode, RedisConfig, ResilientBackend};

/// Window length (µs), keys (key `k` admits `limit(k)` per window),
/// instances, tasks each.
const WINDOW: u64 = 100_000;
const KEYS: u64 = 24;
const INSTANCES: u64 = 4;
const TASKS: u64 = 6;
/// How long the fleet runs (µs).
const RUN: u64 = 1_500_000;

/// From 1 to 93 per window: some keys with more demand than they admit,
/// some with less, some about as much (leases left over at a window's end).
fn limit(k: u64) -> u64 {
    1 + 4 * k
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

/// One task's admissions: (key, round trip start, end) in µs.
async fn hammer(
    backend: Arc<ResilientBackend>,
    limits: Arc<Vec<AnyLimit>>,
    seed: u64,
) -> Vec<(u64, u64, u64)> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut admitted = Vec::new();
    let end = now_us() + RUN;
    let mut out = [common::blank()];
    while now_us() < end {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let k = x.wrapping_mul(0x2545_F491_4F6C_DD1D) % KEYS;
        let key = format!("k{k}");
        let items = [item(b"g", key.as_bytes(), &limits[k as usize], 1)];
        let before = now_us();
        let d = backend
            .decide(
                &items,
                Timestamp::from_micros(before),
                Apply::Commit,
                &mut out,
            )
            .await
            .expect("decided");
        let after = now_us();
        if d.is_allowed() {
            admitted.push((k, before, after));
        }
    }
    admitted
}

#[test]
fn a_fleet_on_redis_clock_never_admits_more_than_the_limit_in_a_window() {
    let server = Server::start();
    let rt = common::runtime();
    rt.block_on(async {
        let config = RedisConfig {
            key_prefix: "sc:".into(),
            // Every admission is the lease's (a call that times out is a
            // denial, never a decision of another kind).
            failure_policy: FailurePolicy::FailClosed,
            timeout: Duration::from_secs(2),
            sync: SyncMode::Lease {
                duration: Duration::from_secs(1),
            },
            ..RedisConfig::new(&server.url(), Mode::Single).expect("config")
        };
        let limits: Arc<Vec<AnyLimit>> = Arc::new(
            (0..KEYS)
                .map(|k| {
                    FixedWindow::new(limit(k), Duration::from_micros(WINDOW))
                        .expect("limit")
                        .into()
                })
                .collect(),
        );
        let mut tasks = Vec::new();
        for i in 0..INSTANCES {
            let backend = Arc::new(common::instance(&config).await);
            for t in 0..TASKS {
                tasks.push(tokio::spawn(hammer(
                    backend.clone(),
                    limits.clone(),
                    i * TASKS + t + 1,
                )));
            }
        }
        let mut per_window: HashMap<(u64, u64), Vec<(u64, u64)>> = HashMap::new();
        let mut placed = 0;
        for task in tasks {
            for (k, before, after) in task.await.expect("task") {
                if before / WINDOW == after / WINDOW {
                    placed += 1;
                    per_window
                        .entry((k, before / WINDOW))
                        .or_default()
                        .push((before % WINDOW, after % WINDOW));
                }
            }
        }
        assert!(placed > 100, "too few admissions placed: {placed}");
        for ((k, w), v) in &per_window {
            assert!(
                v.len() as u64 <= limit(*k),
                "key {k} admitted {} in window {w} (limit {})",
                v.len(),
                limit(*k)
            );
        }
    });
}
