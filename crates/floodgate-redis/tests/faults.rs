//! Faults under load: Redis killed and restarted empty (its script cache
//! gone), frozen (SIGSTOP), blocked (`DEBUG SLEEP`), and a cluster primary
//! failed over and killed. Every request must still get a decision within
//! the timeout, by the failure policy when Redis cannot answer; nothing
//! panics; and the breaker closes again by itself once Redis is back.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Load, Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow, Gcra};
use floodgate::{Apply, Timestamp};
use floodgate_policy::Backend;
use floodgate_redis::{
    BreakerConfig, BreakerState, FailurePolicy, Mode, RedisBackend, RedisConfig, ResilientBackend,
};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Scheduling slack on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(100);

async fn resilient(urls: Vec<String>, mode: Mode, policy: FailurePolicy) -> Arc<ResilientBackend> {
    let config = RedisConfig {
        urls,
        mode,
        timeout: TIMEOUT,
        connect_timeout: Duration::from_millis(100),
        failure_policy: policy,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cool_down: Duration::from_millis(200),
        },
        ..RedisConfig::default()
    };
    let redis = RedisBackend::connect(&config).await.expect("connect");
    Arc::new(ResilientBackend::new(redis, &config).expect("resilient"))
}

/// Waits until the breaker has closed and Redis answers decisions again.
async fn wait_recovered(b: &ResilientBackend, within: Duration) {
    let end = Instant::now() + within;
    let before = b.redis().stats().decisions.get();
    while b.breaker_state() != BreakerState::Closed
        || b.redis().stats().decisions.get() < before + 20
    {
        assert!(
            Instant::now() < end,
            "did not recover: {:?}",
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
async fn killed_then_restarted_empty() {
    let mut server = Server::start();
    let b = resilient(
        vec![server.url()],
        Mode::Single,
        FailurePolicy::Local { divide_by: 2 },
    )
    .await;
    let load = Load::start(&b, 8, 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_ne!(b.breaker_state(), BreakerState::Closed);
    // The local policy decides meanwhile: still ready.
    assert!(b.is_ready());
    // Back, empty: no data and no cached script (NOSCRIPT on first use).
    tokio::task::block_in_place(|| server.restart());
    wait_recovered(&b, Duration::from_secs(5)).await;
    let (n, worst) = load.finish().await;
    assert!(n > 100);
    assert_bounded(worst);
    let s = b.stats();
    assert!(s.backend_errors.get() > 0);
    assert!(s.local_fallbacks.get() > 0);
    assert!(s.short_circuited.get() > 0);
    assert!(s.breaker_opened.get() >= 1 && s.breaker_closed.get() >= 1);
    assert!(b.redis().stats().script_loads.get() >= 1);
    assert!(b.is_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_process_times_out_and_recovers() {
    let server = Server::start();
    let b = resilient(vec![server.url()], Mode::Single, FailurePolicy::FailClosed).await;
    let load = Load::start(&b, 8, 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.pause();
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.resume();
    wait_recovered(&b, Duration::from_secs(5)).await;
    let (_, worst) = load.finish().await;
    assert_bounded(worst);
    assert!(b.stats().fail_closed.get() > 0);
    assert!(b.redis().stats().timeouts.get() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_server_debug_sleep() {
    let server = Server::start_with(&["--enable-debug-command", "yes"]);
    let b = resilient(vec![server.url()], Mode::Single, FailurePolicy::FailOpen).await;
    let load = Load::start(&b, 8, 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let port = server.port();
    let sleeper = std::thread::spawn(move || common::cli(port, &["debug", "sleep", "0.8"]));
    tokio::time::sleep(Duration::from_millis(900)).await;
    tokio::task::block_in_place(|| sleeper.join().expect("debug sleep"));
    wait_recovered(&b, Duration::from_secs(5)).await;
    let (_, worst) = load.finish().await;
    assert_bounded(worst);
    assert!(b.stats().fail_open.get() > 0);
}

#[test]
fn cluster_failover_and_primary_loss() {
    let mut cluster = Cluster::start();
    let rt = common::runtime();
    rt.block_on(async {
        let b = resilient(
            cluster.urls(),
            Mode::Cluster,
            FailurePolicy::Local { divide_by: 3 },
        )
        .await;
        let load = Load::start(&b, 8, 6);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The group "load0" lives on some primary: fail it over to its replica.
        let slot = common::slot(&b.redis().state_key(&item(
            b"load0",
            b"x",
            &AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap()),
            1,
        )));
        let (primary, replica) = match cluster.owners(slot) {
            Some((p, Some(r))) => (p, r),
            other => panic!("no replica for slot {slot}: {other:?}"),
        };
        assert_eq!(
            cluster.nodes[replica].cli(&["cluster", "failover"]).trim(),
            "OK"
        );
        tokio::task::block_in_place(|| {
            let end = Instant::now() + Duration::from_secs(10);
            while cluster.owners(slot).map(|o| o.0) != Some(replica) {
                assert!(Instant::now() < end, "failover did not happen");
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        wait_recovered(&b, Duration::from_secs(10)).await;
        let loads = b.redis().stats().script_loads.get();
        // Now kill the new primary: its replica (the old primary) takes over
        // after the node timeout.
        tokio::task::block_in_place(|| cluster.nodes[replica].kill());
        tokio::task::block_in_place(|| {
            let end = Instant::now() + Duration::from_secs(20);
            while cluster.owners(slot).map(|o| o.0) != Some(primary) {
                assert!(Instant::now() < end, "no automatic failover");
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        wait_recovered(&b, Duration::from_secs(15)).await;
        let (n, worst) = load.finish().await;
        assert!(n > 100);
        assert_bounded(worst);
        // The promoted replicas never ran the script: NOSCRIPT was handled.
        assert!(b.redis().stats().script_loads.get() >= loads.max(1));
        assert!(b.stats().backend_errors.get() > 0 || b.stats().short_circuited.get() > 0);
    });
}

async fn with_policy(server: &Server, policy: FailurePolicy, cache: usize) -> ResilientBackend {
    let config = RedisConfig {
        urls: vec![server.url()],
        timeout: TIMEOUT,
        connect_timeout: Duration::from_millis(100),
        failure_policy: policy,
        local_cache_capacity: cache,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cool_down: Duration::from_secs(60),
        },
        ..RedisConfig::default()
    };
    let redis = RedisBackend::connect(&config).await.expect("connect");
    ResilientBackend::new(redis, &config).expect("resilient")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_when_redis_is_gone() {
    let mut server = Server::start();
    let open = with_policy(&server, FailurePolicy::FailOpen, 100).await;
    let closed = with_policy(&server, FailurePolicy::FailClosed, 0).await;
    let local = with_policy(&server, FailurePolicy::Local { divide_by: 2 }, 0).await;
    let ten = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(60)).unwrap());
    let one = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(60)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    let mut out = [blank()];
    // Known to Redis as denied before it goes away.
    let hot = [item(b"p", b"p:hot", &one, 1)];
    open.decide(&hot, now, Apply::Commit, &mut out)
        .await
        .unwrap();
    let d = open
        .decide(&hot, now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_denied());
    tokio::task::block_in_place(|| server.kill());
    let key = [item(b"p", b"p:k", &ten, 1)];
    let mut admitted = 0;
    for _ in 0..8 {
        let started = Instant::now();
        assert!(
            open.decide(&key, now, Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed()
        );
        assert!(
            closed
                .decide(&key, now, Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_denied()
        );
        admitted += u32::from(
            local
                .decide(&key, now, Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed(),
        );
        assert_bounded(started.elapsed() / 3);
        // The denial Redis gave stays in force locally, even failing open.
        let d = open
            .decide(&hot, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert!(d.is_denied() && d.retry_after.is_some(), "{d:?}");
    }
    assert_eq!(admitted, 5, "10 per window divided by 2 instances");
    assert_eq!(open.stats().fail_open.get(), 8);
    assert_eq!(closed.stats().fail_closed.get(), 8);
    assert_eq!(local.stats().local_fallbacks.get(), 8);
    assert!(open.redis().stats().cache_hits.get() >= 8);
    for b in [&open, &closed, &local] {
        assert_eq!(b.breaker_state(), BreakerState::Open);
        assert_eq!(b.stats().backend_errors.get(), 3);
        assert_eq!(b.stats().short_circuited.get(), 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_unavailable() {
    let server = Server::start();
    let b = with_policy(&server, FailurePolicy::FailOpen, 0).await;
    let limit = AnyLimit::from(Gcra::new(5, Duration::from_secs(1), 5).unwrap());
    let items = [item(b"m", b"m:a", &limit, 1)];
    let mut out = [blank()];
    b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .unwrap();
    server.cli(&["config", "set", "maxmemory", "1"]);
    // The script is refused as a whole (it may write), never half-applied.
    let e = b
        .redis()
        .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, floodgate_policy::BackendError::Unavailable(m) if m.contains("OOM")),
        "{e}"
    );
    assert!(
        b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_allowed()
    );
    assert_eq!(b.stats().fail_open.get(), 1);
    server.cli(&["config", "set", "maxmemory", "0"]);
    b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(b.stats().fail_open.get(), 1);
}

/// Started while Redis is down, the probes keep trying; once one finds
/// Redis back, every connection answers: no decision after the breaker
/// closes is left to the failure policy by a connection still failed
/// from the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_answers_once_a_probe_finds_redis() {
    // Probes during the outage over every connection, each left failed.
    probes_find_redis(4, 8).await;
}

/// As at a start during an outage: the first probe fails on one
/// connection, and the one that finds Redis back goes on another, never
/// dialled (its first connection succeeds); the failed one must answer
/// too once the breaker closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_failed_in_the_outage_answers_when_another_finds_redis() {
    probes_find_redis(2, 1).await;
}

/// A backend of `connections` started while Redis is down, probed
/// `outage_probes` times before Redis comes back; then probed until the
/// breaker closes, after which every decision (over every connection) is
/// Redis's.
async fn probes_find_redis(connections: usize, outage_probes: usize) {
    let mut server = Server::start();
    tokio::task::block_in_place(|| server.kill());
    let config = RedisConfig {
        urls: vec![server.url()],
        connections,
        // Generous: a slow reply on a loaded machine is still Redis's.
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_millis(100),
        failure_policy: FailurePolicy::FailOpen,
        breaker: BreakerConfig {
            failure_threshold: 1,
            cool_down: Duration::from_millis(20),
        },
        ..RedisConfig::default()
    };
    let redis = RedisBackend::connect_lazy(&config).await.expect("lazy");
    let b = ResilientBackend::new(redis, &config)
        .expect("resilient")
        .starting_unreachable();
    for _ in 0..outage_probes {
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!b.probe().await);
    }
    // The failed connections' own reconnection attempts (a few, within
    // the connect timeout) are over before Redis comes back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| server.restart());
    let end = Instant::now() + Duration::from_secs(10);
    while !b.probe().await {
        assert!(Instant::now() < end, "Redis never found again");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let one = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(60)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    let mut out = [blank()];
    for k in 0..(2 * connections as u8) {
        let key = [b'k', k];
        let items = [item(b"p", &key, &one, 1)];
        let first = b
            .decide(&items, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        let second = b
            .decide(&items, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert!(
            first.is_allowed() && second.is_denied(),
            "key {k}: {first:?}, {second:?}; errors {}, fail open {}",
            b.stats().backend_errors.get(),
            b.stats().fail_open.get()
        );
    }
    assert_eq!(b.stats().fail_open.get(), 0);
    assert_eq!(b.breaker_state(), BreakerState::Closed);
}
