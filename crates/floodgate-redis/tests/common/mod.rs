//! Real Redis servers for the tests: `redis-server` processes on free ports,
//! killed on drop (and by the kernel if the test process dies), a real
//! six-node cluster (three primaries, three replicas), and a Sentinel
//! deployment (a primary, a replica, one or three sentinels).
//!
//! `redis-server` and `redis-cli` must be installed: the tests fail, loudly,
//! without them (`scripts/test.sh` installs them).

// Each test binary uses a part of this module.
#![allow(dead_code, unused_imports)]

mod cluster;
mod cut;
mod load;
mod permit_key;
mod process;
mod sentinel;
mod server;
mod twin;

use std::time::Duration;

use floodgate::algorithms::AnyLimit;
use floodgate::{Decision, Outcome};
use floodgate_policy::{Item, Permit};

pub(crate) use cluster::Cluster;
pub(crate) use cut::CutProxy;
pub(crate) use load::Load;
pub(crate) use permit_key::PermitKey;
pub(crate) use process::{free_port, ping};
pub(crate) use sentinel::{MASTER, Sentinel, SentinelSet, wait};
pub(crate) use server::{Server, cli};
pub(crate) use twin::Twin;

/// The slot of a key (CRC16 of its hash tag).
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|o| {
            key[o + 1..]
                .iter()
                .position(|&b| b == b'}')
                .filter(|&c| c > 0)
                .map(|c| &key[o + 1..o + 1 + c])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A placeholder decision to fill output slices with.
pub(crate) fn blank() -> Decision {
    Decision {
        outcome: Outcome::Never,
        limit: u64::MAX,
        remaining: u64::MAX,
        reset_after: Duration::MAX,
        retry_after: None,
    }
}

/// An instance of the fleet: a backend of its own on `config`'s Redis
/// (connected lazily), with the resilience layer and sync modes.
pub(crate) async fn instance(
    config: &floodgate_redis::RedisConfig,
) -> floodgate_redis::ResilientBackend {
    let redis = floodgate_redis::RedisBackend::connect_lazy(config)
        .await
        .expect("backend");
    floodgate_redis::ResilientBackend::new(redis, config).expect("backend")
}

/// A batch item (holding permit 0 if it is a concurrency limit).
pub(crate) fn item<'a>(group: &'a [u8], key: &'a [u8], limit: &'a AnyLimit, cost: u64) -> Item<'a> {
    Item {
        group,
        key,
        limit,
        cost,
        on_failure: None,
        sync: None,
        permit: Permit::NONE,
        zone: None,
    }
}

/// A concurrency item holding permit number `permit` (0: none).
pub(crate) fn permit<'a>(
    group: &'a [u8],
    key: &'a [u8],
    limit: &'a AnyLimit,
    cost: u64,
    permit: u64,
) -> Item<'a> {
    Item {
        permit: Permit::from(permit),
        ..item(group, key, limit, cost)
    }
}

/// `d` rounded up to whole microseconds.
pub(crate) fn ceil_us(d: Duration) -> Duration {
    Duration::from_micros(d.as_nanos().div_ceil(1000) as u64)
}

/// The in-memory decision with its durations rounded up to whole µs, as
/// Redis reports them.
pub(crate) fn as_redis(d: Decision) -> Decision {
    Decision {
        reset_after: ceil_us(d.reset_after),
        retry_after: d.retry_after.map(ceil_us),
        ..d
    }
}

/// A multi-threaded runtime for tests that are not `#[tokio::test]`.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
