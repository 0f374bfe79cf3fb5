//! Releases as a hostile client sends them, through the engine on Redis (a
//! single server and a cluster): permits that were never issued, permits
//! of other keys, a holder's permit again and again, more units than it
//! took, and the neighbours of one's own permit. None frees a unit it did
//! not take. And a flood of forged releases while Redis is paused: none is
//! queued, the queue holds the real ones only, and once Redis is back the
//! victim's limit admits again at once, while a normal client is served
//! throughout.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Cluster, Server};
use floodgate_policy::engine::ReleaseReport;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{
    Backend, BackendError, Code, Engine, OwnedDescriptor, Permit, PolicySet, Response,
};
use floodgate_redis::{
    BreakerConfig, BreakerState, FailurePolicy, Mode, RedisBackend, RedisConfig, ResilientBackend,
};

const RULES: &str = "domains:
  - domain: d
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 2}
      - key: user
        rate_limit: {requests: 1000000, per: 1h}
";

fn policy() -> PolicySet {
    let spec = load_str("t.yaml", RULES, &LoadOptions::default()).unwrap();
    PolicySet::compile(&spec).unwrap()
}

fn config(urls: Vec<String>, mode: Mode) -> RedisConfig {
    RedisConfig {
        urls,
        mode,
        timeout: Duration::from_millis(100),
        connect_timeout: Duration::from_millis(200),
        failure_policy: FailurePolicy::Local { divide_by: 1 },
        breaker: BreakerConfig {
            failure_threshold: 1,
            cool_down: Duration::from_millis(100),
        },
        ..RedisConfig::default()
    }
}

/// [`config`] for a Redis that stays up: every call is Redis's to answer,
/// however loaded the machine (no timeout hands a call to the fallback).
fn steady(urls: Vec<String>, mode: Mode) -> RedisConfig {
    RedisConfig {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        ..config(urls, mode)
    }
}

async fn engine(config: &RedisConfig) -> Engine<ResilientBackend> {
    let redis = RedisBackend::connect(config).await.expect("connect");
    Engine::new(
        policy(),
        ResilientBackend::new(redis, config).expect("resilient"),
    )
}

fn job(name: &str) -> [OwnedDescriptor; 1] {
    [OwnedDescriptor::new([("job", name)])]
}

/// A check: its code and permit (none when denied).
async fn check<B: Backend>(e: &Engine<B>, req: &[OwnedDescriptor]) -> (Code, Permit) {
    let mut r = Response::default();
    e.evaluate("d", req, 1, &mut r).await.unwrap();
    let p = r.permit().filter(|_| r.overall == Code::Ok);
    (r.overall, p.unwrap_or(Permit::NONE))
}

async fn release<B: Backend>(
    e: &Engine<B>,
    req: &[OwnedDescriptor],
    hits: u32,
    permit: Permit,
) -> ReleaseReport {
    let mut r = Response::default();
    e.release_request("d", req, hits, permit, &mut r)
        .await
        .unwrap()
}

/// How many more checks of `req` are admitted now (each kept in flight).
async fn room<B: Backend>(e: &Engine<B>, req: &[OwnedDescriptor]) -> usize {
    let mut n = 0;
    while n < 10 && check(e, req).await.0 == Code::Ok {
        n += 1;
    }
    n
}

fn near(p: Permit, d: i64) -> Permit {
    Permit::from(p.get().wrapping_add_signed(i128::from(d)))
}

/// A normal client deciding on its own key, a few ms apart, while an
/// attack runs: how long each of its decisions took.
struct Probe {
    stop: Arc<AtomicBool>,
    decided: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<Duration>>,
}

impl Probe {
    fn start<B: Backend + Send + Sync + 'static>(e: &Arc<Engine<B>>) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let decided = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (e, stop, decided) = (e.clone(), stop.clone(), decided.clone());
            async move {
                let mut took = Vec::new();
                let req = [OwnedDescriptor::new([("user", "normal")])];
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    assert_eq!(check(&e, &req).await.0, Code::Ok);
                    took.push(started.elapsed());
                    decided.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                took
            }
        });
        Probe {
            stop,
            decided,
            task,
        }
    }

    /// Stops the client (once it has decided a few times, should the attack
    /// have been shorter than that); asserts it was served all along: half
    /// of its decisions within 100 ms (the median: a loaded machine may
    /// stall any single one, an attack that starves the client moves the
    /// median).
    async fn served(self) {
        let until = Instant::now() + Duration::from_secs(5);
        while self.decided.load(Ordering::Relaxed) < 5 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut took = self.task.await.unwrap();
        assert!(took.len() >= 5, "{} decisions", took.len());
        took.sort_unstable();
        let median = took[took.len() / 2];
        assert!(
            median < Duration::from_millis(100),
            "normal client: median {median:?} of {}",
            took.len()
        );
    }
}

/// Forged, repeated, cross-key and oversized releases against one engine,
/// while a normal client is served.
async fn forged_releases_free_nothing<B: Backend + Send + Sync + 'static>(e: &Arc<Engine<B>>) {
    let probe = Probe::start(e);
    let e = &**e;
    let victim = job("render");
    let (_, a) = check(e, &victim).await;
    let (_, b) = check(e, &victim).await;
    assert_eq!(check(e, &victim).await.0, Code::OverLimit);
    let mut forged = vec![
        Permit::random(),
        Permit::from(1u64),
        Permit::from(u128::MAX),
    ];
    for p in [a, b] {
        forged.extend([near(p, 1), near(p, -1), Permit::from(p.get() as u64)]);
    }
    for p in forged {
        for _ in 0..3 {
            let r = release(e, &victim, 1, p).await;
            assert_eq!((r.units(), r.not_held, r.failed), (0, 1, 0), "{p:?} {r:?}");
        }
    }
    assert_eq!(room(e, &victim).await, 0, "a forged release freed a unit");
    // A permit names its own key only.
    let other = job("encode");
    let (_, c) = check(e, &other).await;
    for p in [a, b] {
        assert_eq!(release(e, &other, 1, p).await.not_held, 1);
    }
    assert_eq!(release(e, &victim, 1, c).await.not_held, 1);
    assert_eq!(room(e, &victim).await, 0);
    assert_eq!(room(e, &other).await, 1);
    // `hits: 1000` gives back the one unit taken, once.
    let r = release(e, &victim, 1000, a).await;
    assert_eq!((r.given, r.not_held), (1, 0), "{r:?}");
    for _ in 0..3 {
        assert_eq!(release(e, &victim, 1, a).await.not_held, 1);
    }
    assert_eq!(room(e, &victim).await, 1, "b still holds its unit");
    probe.served().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_repeated_and_cross_key_releases_change_nothing() {
    let server = Server::start();
    let e = Arc::new(engine(&steady(vec![server.url()], Mode::Single)).await);
    forged_releases_free_nothing(&e).await;
    assert_eq!(e.backend().redis().stats().errors.get(), 0);
    assert_eq!(e.backend().deferred_releases(), 0);
}

#[test]
fn forged_repeated_and_cross_key_releases_change_nothing_on_a_cluster() {
    let cluster = Cluster::start();
    common::runtime().block_on(async {
        let e = Arc::new(engine(&steady(cluster.urls(), Mode::Cluster)).await);
        forged_releases_free_nothing(&e).await;
        assert_eq!(e.backend().redis().stats().errors.get(), 0);
    });
}

/// Permits are not a counter: a thousand requests' permits are far apart
/// (random 128-bit values), and an attacker holding a permit of a key
/// frees nothing by releasing the thousands of ids around it, among which,
/// with ids counted up from a base, were its neighbours' permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_cannot_be_guessed_from_ones_own() {
    let server = Server::start();
    let e = Arc::new(engine(&steady(vec![server.url()], Mode::Single)).await);
    let probe = Probe::start(&e);
    let mut ids = Vec::new();
    for i in 0..1_000 {
        let req = job(&format!("spread:{i}"));
        let (code, p) = check(&e, &req).await;
        assert_eq!(code, Code::Ok);
        ids.push(p.get());
        assert_eq!(release(&e, &req, 1, p).await.given, 1);
    }
    ids.sort_unstable();
    let closest = ids.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest > 1 << 80, "two permits {closest} apart");

    let victim = job("render");
    let (_, theirs) = check(&e, &victim).await;
    let (_, mine) = check(&e, &victim).await;
    for d in (-2_000..=2_000).filter(|&d| d != 0) {
        let r = release(&e, &victim, 1, near(mine, d)).await;
        assert_eq!(r.units(), 0, "{d}");
    }
    assert_eq!(room(&e, &victim).await, 0, "{theirs:?} freed by a guess");
    probe.served().await;
}

/// The flood: two holders fill a concurrency limit on Redis, Redis
/// freezes, and while it is frozen the holders' two releases arrive among
/// a hundred thousand forged ones. The forged ones are refused (nothing can
/// check them) and never queued: the queue holds the two real releases,
/// no more than the permits outstanding here. A normal client is answered
/// throughout, by the local fallback. Once Redis answers again the two
/// releases are delivered and the victim's limit admits at once, not when
/// the ten-minute leases end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_flood_during_a_paused_redis_does_not_jam_a_limit() {
    const FORGED: usize = 100_000;
    let server = Server::start();
    let e = Arc::new(engine(&config(vec![server.url()], Mode::Single)).await);
    let victim = job("render");
    let (_, a) = check(&e, &victim).await;
    let (_, b) = check(&e, &victim).await;
    assert_eq!(check(&e, &victim).await.0, Code::OverLimit);
    assert_eq!(e.backend().issued_permits(), 2);
    server.pause();

    // A normal client, deciding all along.
    let probe = Probe::start(&e);

    let attackers: Vec<_> = (0..4)
        .map(|t| {
            let e = e.clone();
            tokio::spawn(async move {
                let victim = job("render");
                let mut queued = 0;
                for i in 0..FORGED / 4 {
                    // The holders' own releases, in the middle of the flood.
                    let real = match (t, i) {
                        (0, 10_000) => Some(a),
                        (3, 20_000) => Some(b),
                        _ => None,
                    };
                    if let Some(p) = real {
                        let r = release(&e, &victim, 1, p).await;
                        assert_eq!((r.queued, r.failed), (1, 0), "{r:?}");
                        queued += 1;
                    }
                    let r = release(&e, &victim, 1, Permit::random()).await;
                    assert_eq!((r.units(), r.failed), (0, 1), "{r:?}");
                    assert!(
                        matches!(
                            r.error,
                            Some(BackendError::Unavailable(_) | BackendError::Timeout(_))
                        ),
                        "{r:?}"
                    );
                    assert!(e.backend().deferred_releases() <= 2);
                    // Each release a request of its own, as a server runs
                    // them (a refused one completes without waiting).
                    tokio::task::yield_now().await;
                }
                queued
            })
        })
        .collect();
    let mut queued = 0;
    for t in attackers {
        queued += t.await.unwrap();
    }
    assert_eq!(queued, 2);
    probe.served().await;
    let b = e.backend();
    assert_eq!(b.deferred_releases(), 2);
    assert_eq!(b.issued_permits(), 0);
    assert_eq!(b.stats().releases_dropped.get(), 0);

    // Redis is back: the first decision it makes sends the two releases.
    server.resume();
    let back = Instant::now();
    loop {
        let req = [OwnedDescriptor::new([("user", "normal")])];
        check(&e, &req).await;
        if b.breaker_state() == BreakerState::Closed && b.deferred_releases() == 0 {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(10), "not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.stats().releases_redelivered.get(), 2);
    assert_eq!(room(&e, &victim).await, 2, "the limit is whole again");
    assert!(
        back.elapsed() < Duration::from_secs(10),
        "{:?}",
        back.elapsed()
    );
}

/// During an outage a holder's own permit is no key to more than it took:
/// sent for another key it is refused, never queued; with `hits: 1000` it
/// queues the one unit it took; sent again it is refused. The queue holds
/// no more than the units outstanding here, and once Redis answers each
/// limit has back exactly what was released: the permits still held keep
/// their units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_outage_a_holders_permit_queues_what_it_took_once() {
    let server = Server::start();
    let e = Arc::new(engine(&config(vec![server.url()], Mode::Single)).await);
    let (victim, other) = (job("render"), job("encode"));
    let (_, a) = check(&e, &victim).await;
    let (_, b) = check(&e, &victim).await;
    let (_, c) = check(&e, &other).await;
    assert_eq!(e.backend().issued_permits(), 3);
    server.pause();
    // The first decision finds Redis gone (it waits for the timeout, then
    // the breaker opens); the normal client is served by the fallback from
    // then on.
    let user = [OwnedDescriptor::new([("user", "normal")])];
    assert_eq!(check(&e, &user).await.0, Code::Ok);
    let b_ = e.backend();
    assert_eq!(b_.breaker_state(), BreakerState::Open);
    let probe = Probe::start(&e);
    let refused = |r: &ReleaseReport| r.units() == 0 && r.failed == 1 && r.error.is_some();
    // Each permit on the key it does not hold.
    for (req, p) in [(&other, a), (&other, b), (&victim, c)] {
        for hits in [1, 1000] {
            let r = release(&e, req, hits, p).await;
            assert!(refused(&r), "{p:?} {r:?}");
        }
    }
    assert_eq!(b_.deferred_releases(), 0);
    assert_eq!(b_.issued_permits(), 3);
    // Its own key, a thousand units asked: the one it took is queued.
    let r = release(&e, &victim, 1000, a).await;
    assert_eq!((r.queued, r.given, r.failed), (1, 0, 0), "{r:?}");
    // Again: it holds nothing any more.
    for hits in [1, 1000] {
        let r = release(&e, &victim, hits, a).await;
        assert!(refused(&r), "{r:?}");
    }
    assert_eq!(b_.deferred_releases(), 1);
    assert!(b_.deferred_releases() <= b_.issued_permits() + 1);
    assert_eq!(b_.issued_permits(), 2);
    probe.served().await;

    server.resume();
    let back = Instant::now();
    loop {
        check(&e, &user).await;
        if b_.breaker_state() == BreakerState::Closed && b_.deferred_releases() == 0 {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(10), "not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b_.stats().releases_redelivered.get(), 1);
    assert_eq!(room(&e, &victim).await, 1, "b still holds its unit");
    assert_eq!(room(&e, &other).await, 1, "c still holds its unit");
}

/// Under `sync: lease` an instance decides an in-flight limit on the units
/// it leased, without a round trip. Forged releases of its key change
/// nothing there: they free no unit (leased or in Redis), and they do not
/// send the key's next decision to Redis (a flood of them would otherwise
/// turn the lease off), while the holder's own release is given back, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_releases_leave_a_leased_limit_alone() {
    const LEASED: &str = "domains:
  - domain: d
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, max: 100, sync: {mode: lease, duration: 10s}}
      - key: user
        rate_limit: {requests: 1000000, per: 1h}
";
    let server = Server::start();
    let config = steady(vec![server.url()], Mode::Single);
    let redis = RedisBackend::connect(&config).await.expect("connect");
    let spec = load_str("t.yaml", LEASED, &LoadOptions::default()).unwrap();
    let e = Arc::new(Engine::new(
        PolicySet::compile(&spec).unwrap(),
        ResilientBackend::new(redis, &config).expect("resilient"),
    ));
    let probe = Probe::start(&e);
    let victim = job("render");
    let (code, a) = check(&e, &victim).await;
    assert_eq!(code, Code::Ok);
    let (_, b) = check(&e, &victim).await;
    let stats = e.backend().sharing_stats();
    let calls = stats.lease_calls.get();
    for p in [
        Permit::random(),
        near(a, 1),
        near(b, -1),
        Permit::from(1u64),
    ] {
        for hits in [1, 1000] {
            let r = release(&e, &victim, hits, p).await;
            assert_eq!((r.units(), r.not_held, r.failed), (0, 1, 0), "{p:?} {r:?}");
        }
    }
    // The next decision is still made on the lease.
    assert_eq!(check(&e, &victim).await.0, Code::Ok);
    assert_eq!(stats.lease_calls.get(), calls, "sent to Redis again");
    // The holder's own release is given back, once.
    let r = release(&e, &victim, 1000, a).await;
    assert_eq!((r.given, r.not_held), (1, 0), "{r:?}");
    assert_eq!(release(&e, &victim, 1, a).await.not_held, 1);
    // Two held: 98 more, not one beyond (the forged releases freed none).
    let mut admitted = 0;
    while admitted <= 100 && check(&e, &victim).await.0 == Code::Ok {
        admitted += 1;
    }
    assert_eq!(admitted, 98);
    probe.served().await;
}
