//! Concurrency permits on Redis, each with its own lease: a permit that is
//! never released is freed exactly a lease after its acquisition, whatever
//! other traffic its key sees; a released one at once; the key expires when
//! the last lease ends. Releases naming no permit the key holds (unknown,
//! already released, expired) or more units than the permit holds change
//! nothing else. Client-supplied time makes every instant exact.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, PermitKey, Server, blank, item, permit};
use floodgate::algorithms::{AnyLimit, Concurrency, FixedWindow};
use floodgate::{Apply, ManualClock, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Backend, Code, Engine, OwnedDescriptor, PolicySet, Released, Response};
use floodgate_redis::{
    BreakerConfig, FailurePolicy, Mode, RedisBackend, RedisConfig, ResilientBackend, TimeSource,
};
use redis::Commands;

/// The lease of every test here.
const LEASE_US: u64 = 10_000_000;
/// A time far from Redis's own clock (client-supplied time).
const T0: u64 = 1_000_000_000_000;

fn config(urls: Vec<String>, mode: Mode) -> RedisConfig {
    RedisConfig {
        urls,
        mode,
        timeout: Duration::from_secs(5),
        time_source: TimeSource::Client {
            expiry_slack: Duration::ZERO,
        },
        concurrency_lease: Some(Duration::from_micros(LEASE_US)),
        ..RedisConfig::default()
    }
}

async fn backend(server: &Server) -> RedisBackend {
    RedisBackend::connect(&config(vec![server.url()], Mode::Single))
        .await
        .expect("connect")
}

impl PermitKey<'_, RedisBackend> {
    fn name(&self) -> Vec<u8> {
        self.b.state_key(&item(b"lease", self.key, &self.limit, 0))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_permit_is_freed_a_lease_after_its_acquisition_under_steady_traffic() {
    let server = Server::start();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"lease", 3, b"lease:leak");
    // A holder takes a unit and never gives it back.
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    // Meanwhile, every 250 ms a request takes a unit and gives it back
    // 100 ms later: the key is acquired again and again, well within every
    // lease.
    let mut id = 1_000;
    let mut t = T0 + 250_000;
    let mut boundary = false;
    while t < T0 + 3 * LEASE_US {
        assert!(k.acquire(id, 1, t).await.is_allowed(), "at {t}");
        let leaked = u64::from(t < T0 + LEASE_US);
        assert_eq!(k.held(t).await, leaked + 1, "at {t}");
        k.release(id, 1, t + 100_000).await;
        assert_eq!(k.held(t + 100_000).await, leaked, "at {t}");
        if t < T0 + LEASE_US && t + 250_000 >= T0 + LEASE_US {
            // Exactly at the lease's end, not a microsecond earlier.
            assert_eq!(k.held(T0 + LEASE_US - 1).await, 1);
            assert_eq!(k.held(T0 + LEASE_US).await, 0);
            boundary = true;
        }
        id += 1;
        t += 250_000;
    }
    assert!(boundary);
    // The whole limit is free again.
    assert!(k.acquire(id, 3, t).await.is_allowed());
    assert_eq!(b.stats().errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_permit_is_freed_at_once() {
    let server = Server::start();
    let mut conn = server.conn();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"lease", 3, b"lease:released");
    assert_eq!(k.acquire(7, 2, T0).await.remaining, 1);
    assert!(k.acquire(8, 1, T0 + 1).await.is_allowed());
    assert!(k.acquire(9, 1, T0 + 2).await.is_denied());
    k.release(7, 2, T0 + 3).await;
    assert_eq!(k.held(T0 + 3).await, 1);
    assert_eq!(k.acquire(9, 2, T0 + 4).await.remaining, 0);
    k.release(8, 1, T0 + 5).await;
    k.release(9, 2, T0 + 5).await;
    assert_eq!(k.held(T0 + 5).await, 0);
    // Nothing held: the key is gone.
    assert!(!conn.exists::<_, bool>(k.name()).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permit_expires_at_its_own_time() {
    let server = Server::start();
    let mut conn = server.conn();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"lease", 5, b"lease:own");
    let s = 1_000_000;
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    assert!(k.acquire(2, 2, T0 + 3 * s).await.is_allowed());
    assert!(k.acquire(3, 1, T0 + 6 * s).await.is_allowed());
    // The key lives until the latest lease ends (relative: client time).
    let ttl: i64 = conn.pttl(k.name()).unwrap();
    assert!((9_000..=10_000).contains(&ttl), "ttl {ttl}");
    for (at, held) in [
        (T0 + LEASE_US - 1, 4),
        (T0 + LEASE_US, 3),
        (T0 + 3 * s + LEASE_US - 1, 3),
        (T0 + 3 * s + LEASE_US, 1),
        (T0 + 6 * s + LEASE_US - 1, 1),
    ] {
        assert_eq!(k.held(at).await, held, "at T0 + {} µs", at - T0);
    }
    // Dropping permit 2 at the end of its lease rewrote the key, to live
    // until permit 3's lease ends, 3 s later.
    let ttl: i64 = conn.pttl(k.name()).unwrap();
    assert!((2_000..=3_000).contains(&ttl), "ttl {ttl}");
    assert_eq!(k.held(T0 + 6 * s + LEASE_US).await, 0);
    assert!(!conn.exists::<_, bool>(k.name()).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_expires_when_the_last_lease_ends_on_server_time() {
    let server = Server::start();
    let mut conn = server.conn();
    let config = RedisConfig {
        urls: vec![server.url()],
        timeout: Duration::from_secs(5),
        ..RedisConfig::default()
    };
    let b = RedisBackend::connect(&config).await.expect("connect");
    let k = PermitKey::new(&b, b"lease", 3, b"lease:server");
    let lease_us = floodgate_redis::DEFAULT_CONCURRENCY_LEASE.as_micros() as u64;
    let expiry = || -> u64 {
        redis::cmd("PEXPIRETIME")
            .arg(k.name())
            .query(&mut server.conn())
            .unwrap()
    };
    let mut out = [blank()];
    let mut at = Vec::new();
    for id in [1, 2] {
        let items = [permit(b"lease", k.key, &k.limit, 1, id)];
        let (d, t) = b
            .decide_timed(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert!(d.is_allowed());
        at.push(t.as_micros());
        // Redis's clock (the only one here) moves on, so that the two
        // leases end in distinct milliseconds.
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(at[1] / 1000 > at[0] / 1000, "{at:?}");
    assert_eq!(expiry(), (at[1] + lease_us).div_ceil(1000));
    // Permit 2 released: the key lives until permit 1's lease ends.
    k.release(2, 1, 0).await;
    assert_eq!(expiry(), (at[0] + lease_us).div_ceil(1000));
    k.release(1, 1, 0).await;
    assert!(!conn.exists::<_, bool>(k.name()).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_naming_nothing_held_are_harmless() {
    let server = Server::start();
    let mut conn = server.conn();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"lease", 5, b"lease:odd");
    let s = 1_000_000;
    assert!(k.acquire(1, 2, T0).await.is_allowed());
    assert!(k.acquire(2, 1, T0 + s).await.is_allowed());
    // An id the key never saw, and permit 0 (no id): nothing, and said so.
    assert_eq!(k.release(99, 5, T0 + s).await, Released::NotHeld);
    assert_eq!(k.release(0, 5, T0 + s).await, Released::NotHeld);
    assert_eq!(k.held(T0 + s).await, 3);
    // More units than the permit holds: it gives back its own, no more.
    assert_eq!(k.release(1, 5, T0 + s).await, Released::Given(2));
    assert_eq!(k.held(T0 + s).await, 1);
    // Released twice: nothing more.
    assert_eq!(k.release(1, 2, T0 + s).await, Released::NotHeld);
    assert_eq!(k.held(T0 + s).await, 1);
    // Fewer units than it holds: the rest stays with the permit.
    assert!(k.acquire(3, 3, T0 + s).await.is_allowed());
    assert_eq!(k.release(3, 1, T0 + s).await, Released::Given(1));
    assert_eq!(k.held(T0 + s).await, 3);
    k.release(3, 1, T0 + s).await;
    assert_eq!(k.held(T0 + s).await, 2);
    assert_eq!(k.release(3, 9, T0 + s).await, Released::Given(1));
    assert_eq!(k.held(T0 + s).await, 1);
    // A permit held again (the same id) adds its units and renews its lease.
    assert!(k.acquire(2, 1, T0 + 2 * s).await.is_allowed());
    assert_eq!(k.held(T0 + s + LEASE_US).await, 2);
    let state: String = conn.get(k.name()).unwrap();
    assert_eq!(state, format!("c2:2:{};", T0 + 2 * s + LEASE_US));
    // After its lease: a release finds nothing, and takes nothing else.
    assert!(
        k.acquire(4, 1, T0 + 2 * s + LEASE_US - 1)
            .await
            .is_allowed()
    );
    assert_eq!(
        k.release(2, 2, T0 + 2 * s + LEASE_US).await,
        Released::NotHeld
    );
    assert_eq!(k.held(T0 + 2 * s + LEASE_US).await, 1);
    k.release(4, 1, T0 + 2 * s + LEASE_US).await;
    assert!(!conn.exists::<_, bool>(k.name()).unwrap());
    // On a key that is gone, or holds something else: nothing happens.
    assert_eq!(
        k.release(4, 1, T0 + 3 * s + LEASE_US).await,
        Released::NotHeld
    );
    let _: () = conn.set(k.name(), "f1:2").unwrap();
    assert_eq!(
        k.release(4, 1, T0 + 3 * s + LEASE_US).await,
        Released::NotHeld
    );
    let state: String = conn.get(k.name()).unwrap();
    assert_eq!(state, "f1:2");
    assert_eq!(b.stats().errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_without_a_lease_are_held_until_released() {
    let server = Server::start();
    let mut conn = server.conn();
    let b = RedisBackend::connect(&RedisConfig {
        concurrency_lease: None,
        ..config(vec![server.url()], Mode::Single)
    })
    .await
    .expect("connect");
    let k = PermitKey::new(&b, b"lease", 2, b"lease:none");
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    assert!(k.acquire(2, 1, T0 + 1).await.is_allowed());
    let far = T0 + 1_000 * LEASE_US;
    assert!(k.acquire(3, 1, far).await.is_denied());
    assert_eq!(conn.pttl::<_, i64>(k.name()).unwrap(), -1);
    k.release(1, 1, far).await;
    assert_eq!(k.held(far).await, 1);
    assert_eq!(conn.pttl::<_, i64>(k.name()).unwrap(), -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_count_is_one_permit_with_a_lease() {
    let server = Server::start();
    let mut conn = server.conn();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"lease", 3, b"lease:legacy");
    // 'c<held>': the state before permits had leases of their own.
    let _: () = conn.set(k.name(), "c2").unwrap();
    // A release names no permit of it: left as it is.
    assert_eq!(k.release(1, 2, T0).await, Released::NotHeld);
    let state: String = conn.get(k.name()).unwrap();
    assert_eq!(state, "c2");
    // Counted, and given a lease by the first write.
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    assert!(k.acquire(2, 1, T0).await.is_denied());
    assert_eq!(k.held(T0 + LEASE_US - 1).await, 3);
    assert_eq!(k.held(T0 + LEASE_US).await, 0);
    assert_eq!(b.stats().state_resets.get(), 0);
}

/// Through the engine: each request holds a permit of its own, so the one
/// whose release never comes is freed a lease after it was admitted while
/// the others come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_names_each_requests_permit() {
    let server = Server::start();
    let yaml = "domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {algorithm: concurrency, max: 2}
";
    let spec = load_str("t.yaml", yaml, &LoadOptions::default()).unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_micros(T0)));
    let engine = Engine::with_clock(
        PolicySet::compile(&spec).unwrap(),
        backend(&server).await,
        clock.clone(),
    );
    let req = [OwnedDescriptor::new([("tenant", "t")])];
    let mut leaked = Response::default();
    engine.evaluate("api", &req, 1, &mut leaked).await.unwrap();
    assert_eq!(leaked.overall, Code::Ok);
    let step = Duration::from_millis(500);
    let mut r = Response::default();
    for n in 0..(2 * LEASE_US / 500_000) {
        clock.advance(step);
        engine.evaluate("api", &req, 1, &mut r).await.unwrap();
        assert_eq!(r.overall, Code::Ok, "request {n}");
        // One more on top: admitted only once the leaked permit is gone.
        let mut extra = Response::default();
        engine.evaluate("api", &req, 1, &mut extra).await.unwrap();
        let expired = (n + 1) * 500_000 >= LEASE_US;
        assert_eq!(extra.overall == Code::Ok, expired, "request {n}");
        engine.release(&extra).await;
        engine.release(&r).await;
    }
    assert_eq!(engine.backend().stats().errors.get(), 0);
}

/// A permit taken from the local store during an outage is given back
/// there, as before permits had ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_during_an_outage_go_to_the_local_store() {
    let mut server = Server::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(100),
        failure_policy: FailurePolicy::Local { divide_by: 1 },
        breaker: BreakerConfig {
            failure_threshold: 1,
            cool_down: Duration::from_secs(60),
        },
        ..config(vec![server.url()], Mode::Single)
    };
    let redis = RedisBackend::connect(&config).await.expect("connect");
    let b = ResilientBackend::new(redis, &config).expect("resilient");
    let k = PermitKey::new(&b, b"lease", 1, b"lease:outage");
    // In Redis while it is up.
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    k.release(1, 1, T0).await;
    tokio::task::block_in_place(|| server.kill());
    // Down: the local store decides, and takes the release back.
    assert!(k.acquire(2, 1, T0 + 1).await.is_allowed());
    assert!(k.acquire(3, 1, T0 + 2).await.is_denied());
    let it = permit(b"lease", k.key, &k.limit, 0, 2);
    b.release(it, 1, Timestamp::from_micros(T0 + 3))
        .await
        .expect("given back to the local store");
    assert!(k.acquire(4, 1, T0 + 4).await.is_allowed());
}

/// A rule with a concurrency limit and a window (one group, one slot) on a
/// cluster: the permits' leases are the same as on one server.
#[test]
fn per_permit_leases_on_a_cluster() {
    let cluster = Cluster::start();
    let rt = common::runtime();
    rt.block_on(async {
        let b = RedisBackend::connect(&config(cluster.urls(), Mode::Cluster))
            .await
            .expect("connect");
        let conc = AnyLimit::from(Concurrency::new(2).unwrap());
        let window = AnyLimit::from(FixedWindow::new(1_000, Duration::from_secs(3600)).unwrap());
        let rule = |id, cost| {
            [
                permit(b"rule", b"rule:conc", &conc, cost, id),
                item(b"rule", b"rule:window", &window, cost),
            ]
        };
        let mut out = [blank(), blank()];
        // Leak one permit, then keep the key busy past its lease.
        let items = rule(1, 1);
        assert!(
            b.decide(&items, Timestamp::from_micros(T0), Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed()
        );
        let mut t = T0;
        for id in 2..40u64 {
            t += 500_000;
            let items = rule(id, 1);
            let d = b
                .decide(&items, Timestamp::from_micros(t), Apply::Commit, &mut out)
                .await
                .unwrap();
            assert!(d.is_allowed(), "{id}: {d:?}");
            // The leaked permit counts until its lease ends, exactly.
            let leaked = u64::from(t < T0 + LEASE_US);
            assert_eq!(out[0].remaining, 1 - leaked, "{id}");
            b.release(items[0], 1, Timestamp::from_micros(t))
                .await
                .unwrap();
        }
        assert_eq!(b.stats().cross_slot.get(), 0);
        assert_eq!(b.stats().errors.get(), 0);
    });
}
