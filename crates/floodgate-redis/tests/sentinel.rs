//! Redis Sentinel with real processes: a primary, a replica and sentinels
//! (`redis-server --sentinel`). The backend finds the primary through the
//! sentinels and decides there exactly as on a single server; when the
//! primary is killed or failed over (`SENTINEL FAILOVER`, the old primary
//! still up), every decision still gets an answer within the timeout (the
//! failure policy), and decisions go back to Redis — the new primary — by
//! themselves within a few seconds, counting exactly.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Load, MASTER, SentinelSet, blank, free_port, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::{Backend, BackendError};
use floodgate_redis::{
    BreakerConfig, BreakerState, ConnectError, FailurePolicy, Mode, RedisBackend, RedisConfig,
    ResilientBackend,
};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Scheduling slack on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(100);

fn config(sentinels: Vec<String>, master: &str, policy: FailurePolicy) -> RedisConfig {
    RedisConfig {
        urls: sentinels.iter().map(|a| format!("redis://{a}")).collect(),
        mode: Mode::Sentinel {
            master_name: master.to_owned(),
        },
        timeout: TIMEOUT,
        connect_timeout: Duration::from_millis(100),
        failure_policy: policy,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cool_down: Duration::from_millis(200),
        },
        ..RedisConfig::default()
    }
}

async fn resilient(config: &RedisConfig, lazy: bool) -> Arc<ResilientBackend> {
    let redis = if lazy {
        RedisBackend::connect_lazy(config).await
    } else {
        RedisBackend::connect(config).await
    };
    Arc::new(ResilientBackend::new(redis.expect("connect"), config).expect("resilient"))
}

/// Decides `n` requests on a fresh 5-per-hour key through Redis; returns
/// how many were admitted. Fails if one was not decided by Redis.
async fn exact(b: &ResilientBackend, key: &str, n: usize) -> usize {
    let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let items = [item(b"exact", key.as_bytes(), &limit, 1)];
    let mut out = [blank()];
    let mut admitted = 0;
    for _ in 0..n {
        let before = b.redis().stats().decisions.get();
        let d = b
            .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert_eq!(
            b.redis().stats().decisions.get(),
            before + 1,
            "decided by Redis"
        );
        admitted += usize::from(d.is_allowed());
    }
    admitted
}

/// Waits until the breaker is closed and Redis (server `primary` of the
/// set) decides again.
async fn wait_served_by(b: &ResilientBackend, set: &SentinelSet, primary: usize, within: Duration) {
    let end = Instant::now() + within;
    let limit = AnyLimit::from(FixedWindow::new(1000, Duration::from_secs(3600)).unwrap());
    let mut out = [blank()];
    let mut n = 0u64;
    loop {
        n += 1;
        let key = format!("probe:{n}");
        let items = [item(b"probe", key.as_bytes(), &limit, 1)];
        let before = b.redis().stats().decisions.get();
        b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .expect("a decision");
        let by_redis = b.redis().stats().decisions.get() > before;
        if by_redis && b.breaker_state() == BreakerState::Closed {
            let state = b.redis().state_key(&items[0]);
            let mut conn = set.servers[primary].conn();
            let there: bool = tokio::task::block_in_place(|| {
                redis::cmd("EXISTS").arg(&state).query(&mut conn).unwrap()
            });
            if there {
                return;
            }
        }
        assert!(
            Instant::now() < end,
            "decisions did not resume on the new primary: {:?}",
            b.breaker_state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_bounded(worst: Duration) {
    eprintln!("slowest decision: {worst:?}");
    assert!(worst <= TIMEOUT + SLACK, "a decision took {worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_primary_when_it_is_killed() {
    let mut set = tokio::task::block_in_place(|| SentinelSet::start(3));
    // A sentinel that is down is skipped.
    let mut sentinels = vec![format!("127.0.0.1:{}", free_port())];
    sentinels.extend(set.addrs());
    let config = config(sentinels, MASTER, FailurePolicy::Local { divide_by: 1 });
    let b = resilient(&config, false).await;
    assert_eq!(exact(&b, "before", 7).await, 5);
    // The key lives on the primary; let the replica catch up.
    let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let state = b.redis().state_key(&item(b"exact", b"before", &limit, 1));
    tokio::task::block_in_place(|| {
        let primary = &set.servers[0];
        let exists: bool = redis::cmd("EXISTS")
            .arg(&state)
            .query(&mut primary.conn())
            .unwrap();
        assert!(exists, "decided on the primary");
        assert_eq!(primary.cli(&["wait", "1", "2000"]).trim(), "1");
    });

    let load = Load::start(&b, 8, 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = Instant::now();
    tokio::task::block_in_place(|| set.servers[0].kill());
    tokio::task::block_in_place(|| set.wait_primary(1, Duration::from_secs(20)));
    let promoted = killed.elapsed();
    wait_served_by(&b, &set, 1, Duration::from_secs(10)).await;
    eprintln!(
        "primary killed: replica promoted after {promoted:?}, decisions on it after {:?}",
        killed.elapsed()
    );
    let (n, worst) = load.finish().await;
    assert!(n > 100, "{n} decisions");
    assert_bounded(worst);

    // Exact counting goes on on the new primary, with the state it had
    // replicated before the failover.
    assert_eq!(exact(&b, "before", 2).await, 0);
    assert_eq!(exact(&b, "after", 7).await, 5);
    let s = b.stats();
    assert!(s.backend_errors.get() > 0 || s.short_circuited.get() > 0);
    assert!(s.local_fallbacks.get() > 0, "the policy covered the gap");
    // The promoted replica had never run the script: NOSCRIPT handled.
    assert!(b.redis().stats().script_loads.get() >= 1);
    assert!(b.is_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_manual_failover_before_the_old_primary_is_demoted() {
    let set = tokio::task::block_in_place(|| SentinelSet::start(1));
    // No sentinel knows the name, or no sentinel answers: refused.
    let unknown = config(set.addrs(), "nosuchmaster", FailurePolicy::FailClosed);
    assert!(matches!(
        RedisBackend::connect(&unknown).await,
        Err(ConnectError::Connect(_))
    ));
    let nobody = config(
        vec![format!("127.0.0.1:{}", free_port())],
        MASTER,
        FailurePolicy::FailClosed,
    );
    assert!(matches!(
        RedisBackend::connect(&nobody).await,
        Err(ConnectError::Connect(_))
    ));

    // A replica (what a demoted primary becomes) refuses the scripts with
    // READONLY: an unavailable server, as for a connection error (in
    // Sentinel mode, the primary is looked up again).
    let replica = RedisConfig {
        urls: vec![set.servers[1].url()],
        ..RedisConfig::default()
    };
    let on_replica = RedisBackend::connect(&replica).await.unwrap();
    let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let e = on_replica
        .decide(
            &[item(b"r", b"r:1", &limit, 1)],
            Timestamp::ZERO,
            Apply::Commit,
            &mut [blank()],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BackendError::Unavailable(m) if m.contains("read only replica")),
        "{e}"
    );

    // Lazily: the primary is looked up in the background.
    let config = config(set.addrs(), MASTER, FailurePolicy::FailClosed);
    let b = resilient(&config, true).await;
    wait_served_by(&b, &set, 0, Duration::from_secs(5)).await;
    assert_eq!(exact(&b, "before", 6).await, 5);

    let load = Load::start(&b, 8, 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    assert_eq!(
        set.sentinels[0]
            .cli(&["sentinel", "failover", MASTER])
            .trim(),
        "OK"
    );
    tokio::task::block_in_place(|| set.wait_primary(1, Duration::from_secs(20)));
    let promoted = started.elapsed();
    // The old primary still answers as a primary until the sentinel
    // demotes it; decisions follow the sentinel's word before that.
    wait_served_by(&b, &set, 1, Duration::from_secs(5)).await;
    let followed = started.elapsed();
    assert_eq!(
        set.role(0),
        "master",
        "not demoted yet: followed the sentinels"
    );
    eprintln!(
        "manual failover: replica promoted after {promoted:?}, decisions on it after {followed:?}"
    );
    let (n, worst) = load.finish().await;
    assert!(n > 100, "{n} decisions");
    assert_bounded(worst);
    assert_eq!(exact(&b, "after", 6).await, 5);
    assert!(b.is_ready());
}
