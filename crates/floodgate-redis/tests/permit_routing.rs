//! Releases go to the store that admitted the permit, whatever the breaker
//! says at release time: a permit the local fallback admitted during an
//! outage is given back locally even after Redis is back, one Redis
//! admitted is given back to Redis (and is never credited to the local
//! store): at once, or, when Redis cannot take it (down, or the breaker
//! open), queued and sent again once Redis answers. The permits remembered
//! for that and the queue stay bounded. Client-supplied time makes every
//! lease instant exact; only the breaker's cool-down and the background
//! delivery run on the real clock.

use crate::common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{PermitKey, Server, blank, item, permit};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::{Backend, BackendError, Released};
use floodgate_redis::{
    BreakerConfig, BreakerState, FailurePolicy, Mode, RedisBackend, RedisConfig, ResilientBackend,
    TimeSource,
};

/// The lease of every permit here.
const LEASE_US: u64 = 600_000_000;
/// A time far from Redis's own clock (client-supplied time).
const T0: u64 = 1_000_000_000_000;

fn config(url: String) -> RedisConfig {
    RedisConfig {
        urls: vec![url],
        mode: Mode::Single,
        timeout: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(100),
        time_source: TimeSource::Client {
            expiry_slack: Duration::ZERO,
        },
        concurrency_lease: Some(Duration::from_micros(LEASE_US)),
        failure_policy: FailurePolicy::Local { divide_by: 1 },
        breaker: BreakerConfig {
            failure_threshold: 1,
            cool_down: Duration::from_millis(100),
        },
        ..RedisConfig::default()
    }
}

async fn backend(server: &Server) -> ResilientBackend {
    let config = config(server.url());
    let redis = RedisBackend::connect(&config).await.expect("connect");
    ResilientBackend::new(redis, &config).expect("resilient")
}

/// A backend whose Redis never answers (nothing listens on its port).
async fn unreachable() -> ResilientBackend {
    let config = config(format!("redis://127.0.0.1:{}", common::free_port()));
    let redis = RedisBackend::connect_lazy(&config).await.expect("lazy");
    ResilientBackend::new(redis, &config).expect("resilient")
}

/// Waits for the queued releases to be delivered (in the background, once
/// a call to Redis succeeded).
async fn wait_delivered(b: &ResilientBackend) {
    let end = Instant::now() + Duration::from_secs(10);
    while b.deferred_releases() != 0 {
        assert!(
            Instant::now() < end,
            "{} releases still queued",
            b.deferred_releases()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Probes until the breaker has closed and Redis decides again.
async fn wait_closed(b: &ResilientBackend) {
    let limit = AnyLimit::from(FixedWindow::new(1_000_000, Duration::from_secs(3600)).unwrap());
    let probe = [item(b"probe", b"probe:1", &limit, 1)];
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let before = b.redis().stats().decisions.get();
        let mut out = [blank()];
        b.decide(&probe, Timestamp::from_micros(T0), Apply::Commit, &mut out)
            .await
            .expect("decision");
        if b.breaker_state() == BreakerState::Closed && b.redis().stats().decisions.get() > before {
            return;
        }
        assert!(
            Instant::now() < end,
            "breaker still {:?}",
            b.breaker_state()
        );
        // The breaker's cool-down runs on the real clock.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Makes successful calls until the queued releases are delivered (each
/// successful call starts a delivery unless one is running).
async fn deliver_by_calls(b: &ResilientBackend) {
    let limit = AnyLimit::from(FixedWindow::new(1_000_000, Duration::from_secs(3600)).unwrap());
    let call = [item(b"probe", b"probe:2", &limit, 1)];
    let end = Instant::now() + Duration::from_secs(5);
    while b.deferred_releases() != 0 {
        let mut out = [blank()];
        let d = b
            .decide(&call, Timestamp::from_micros(T0), Apply::Commit, &mut out)
            .await
            .expect("decision");
        assert!(d.is_allowed(), "{d:?}");
        assert!(
            Instant::now() < end,
            "{} releases still queued after 5 s of successful calls",
            b.deferred_releases()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `f` on a current-thread runtime of its own (on a thread of its
/// own), then drops that runtime with whatever tasks `f` spawned on it.
fn on_a_short_lived_runtime<F>(f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(f)
            })
            .join()
            .expect("short-lived runtime")
        })
    })
}

/// The queued releases are delivered by a task on the runtime of the call
/// that succeeded. When that runtime goes away before the task ends —
/// before it even ran, or with its releases in flight — the next
/// successful call delivers them (once stuck, nothing was ever delivered
/// again and the limit stayed full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_delivered_after_the_delivering_runtime_goes_away() {
    let server = Server::start();
    let config = RedisConfig {
        failure_policy: FailurePolicy::FailClosed,
        // Long enough for a delivery to be caught in flight.
        timeout: Duration::from_millis(500),
        ..config(server.url())
    };
    let redis = RedisBackend::connect(&config).await.expect("connect");
    let b = ResilientBackend::new(redis, &config).expect("resilient");
    let k = PermitKey::new(&b, b"route", 2, b"route:runtime");
    let limit = AnyLimit::from(FixedWindow::new(1_000_000, Duration::from_secs(3600)).unwrap());
    let probe = [item(b"probe", b"probe:1", &limit, 1)];
    for (first, in_flight) in [(1, false), (10, true)] {
        // Both permits taken; Redis freezes, so both releases are queued:
        // the first times out and opens the breaker, the second is not
        // even tried.
        assert!(k.acquire(first, 1, T0).await.is_allowed());
        assert!(k.acquire(first + 1, 1, T0).await.is_allowed());
        assert!(k.acquire(first + 2, 1, T0).await.is_denied());
        server.pause();
        k.try_release(first, 1, T0 + 1).await.expect("queued");
        k.try_release(first + 1, 1, T0 + 1).await.expect("queued");
        server.resume();
        assert_eq!(b.breaker_state(), BreakerState::Open);
        assert_eq!(b.deferred_releases(), 2);
        // The cool-down runs on the real clock; then a decision probes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let redelivered = b.stats().releases_redelivered.get();
        let timeouts = b.redis().stats().timeouts.get();
        // The probe succeeds on a short-lived runtime, where it starts the
        // delivery, and the runtime is dropped.
        on_a_short_lived_runtime(async {
            let mut out = [blank()];
            let d = b
                .decide(&probe, Timestamp::from_micros(T0), Apply::Commit, &mut out)
                .await
                .expect("probe");
            assert!(d.is_allowed(), "{d:?}");
            assert_eq!(b.breaker_state(), BreakerState::Closed);
            if in_flight {
                // Frozen again: the delivery sends its batch and waits.
                server.pause();
                let calls = b.redis().stats().calls.get();
                let end = Instant::now() + Duration::from_secs(5);
                while b.redis().stats().calls.get() < calls + 2 {
                    assert!(Instant::now() < end, "the delivery did not start");
                    tokio::task::yield_now().await;
                }
            }
            // Otherwise the delivery was spawned and never ran.
        });
        // Nothing delivered, nothing timed out: the delivery went with its
        // runtime, its releases (if sent) unanswered.
        assert_eq!(b.stats().releases_redelivered.get(), redelivered);
        assert_eq!(b.redis().stats().timeouts.get(), timeouts);
        assert_eq!(b.deferred_releases(), 2);
        server.resume();
        deliver_by_calls(&b).await;
        assert_eq!(b.stats().releases_redelivered.get(), redelivered + 2);
        assert_eq!(k.held(T0 + 2).await, 0);
        assert_eq!(b.breaker_state(), BreakerState::Closed);
    }
    assert_eq!(b.stats().releases_dropped.get(), 0);
    assert!(k.acquire(20, 1, T0 + 3).await.is_allowed());
    assert!(k.acquire(21, 1, T0 + 3).await.is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_taken_locally_is_given_back_locally_after_redis_returns() {
    let mut server = Server::start();
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"route", 1, b"route:local");
    // Outage: the local fallback admits permit 1 and is then full.
    tokio::task::block_in_place(|| server.kill());
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    assert_eq!(b.breaker_state(), BreakerState::Open);
    assert_eq!(b.stats().local_fallbacks.get(), 1);
    assert!(k.acquire(2, 1, T0 + 1).await.is_denied());
    assert_eq!(b.local_permits(), 1);
    // Redis is back and the breaker closed before the request completes.
    tokio::task::block_in_place(|| server.restart());
    wait_closed(&b).await;
    let calls = b.redis().stats().calls.get();
    k.try_release(1, 1, T0 + 2)
        .await
        .expect("given back locally");
    assert_eq!(b.local_permits(), 0);
    assert_eq!(
        b.redis().stats().calls.get(),
        calls,
        "nothing sent to Redis"
    );
    // Redis decides its own key, untouched by the local permit.
    assert!(k.acquire(3, 1, T0 + 3).await.is_allowed());
    k.try_release(3, 1, T0 + 4)
        .await
        .expect("given back to Redis");
    assert_eq!(b.redis().stats().calls.get(), calls + 2);
    assert_eq!(b.local_permits(), 0);
    // A second outage: the local store has its whole capacity again.
    tokio::task::block_in_place(|| server.kill());
    let fallbacks = b.stats().local_fallbacks.get();
    assert!(
        k.acquire(4, 1, T0 + 5).await.is_allowed(),
        "local unit leaked"
    );
    assert_eq!(b.stats().local_fallbacks.get(), fallbacks + 1);
    assert!(k.acquire(5, 1, T0 + 6).await.is_denied());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_taken_in_redis_is_given_back_to_redis_after_an_outage() {
    // Written to its append-only file, the key survives a restart.
    let mut server = Server::start_with(&["--appendonly", "yes"]);
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"route", 2, b"route:redis");
    assert!(k.acquire(1, 1, T0).await.is_allowed());
    assert_eq!(b.redis().stats().decisions.get(), 1);
    assert_eq!(b.local_permits(), 0);
    // Outage: the local store admits permit 2 (one of its two units).
    tokio::task::block_in_place(|| server.kill());
    assert!(k.acquire(2, 1, T0 + 1).await.is_allowed());
    assert_eq!(b.breaker_state(), BreakerState::Open);
    assert_eq!(b.local_permits(), 1);
    // Permit 1's release is Redis's, and the breaker is open: queued, not
    // tried (no timeout to pay).
    let calls = b.redis().stats().calls.get();
    k.try_release(1, 1, T0 + 2).await.expect("queued");
    assert_eq!(b.redis().stats().calls.get(), calls);
    assert_eq!(b.deferred_releases(), 1);
    assert_eq!(b.stats().releases_deferred.get(), 1);
    assert_eq!(b.breaker_state(), BreakerState::Open);
    // The local store was not credited: one unit left there, not two.
    assert_eq!(k.held(T0 + 3).await, 1);
    assert!(k.acquire(3, 1, T0 + 4).await.is_allowed());
    assert!(k.acquire(4, 1, T0 + 5).await.is_denied());
    k.try_release(2, 1, T0 + 6)
        .await
        .expect("given back locally");
    k.try_release(3, 1, T0 + 6)
        .await
        .expect("given back locally");
    assert_eq!(b.local_permits(), 0);
    // Redis is back (with permit 1, from its append-only file): the first
    // call that succeeds sends the queued release.
    tokio::task::block_in_place(|| server.restart());
    wait_closed(&b).await;
    wait_delivered(&b).await;
    assert_eq!(b.stats().releases_redelivered.get(), 1);
    let decided = b.redis().stats().decisions.get();
    assert_eq!(k.held(T0 + 7).await, 0);
    assert_eq!(b.redis().stats().decisions.get(), decided + 1);
    // Its whole capacity again, in Redis.
    assert!(k.acquire(5, 2, T0 + 8).await.is_allowed());
    assert!(k.acquire(6, 1, T0 + 9).await.is_denied());
    assert_eq!(b.stats().releases_dropped.get(), 0);
}

/// A release Redis fails to take while the breaker is still closed is
/// queued as well; a concurrency limit whose permits were all in flight
/// when Redis went away is whole again once it is back, not when the
/// leases end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_redis_failed_to_take_are_sent_again_once_it_answers() {
    let mut server = Server::start_with(&["--appendonly", "yes"]);
    let b = backend(&server).await;
    let k = PermitKey::new(&b, b"route", 3, b"route:full");
    for id in 1..=3 {
        assert!(k.acquire(id, 1, T0).await.is_allowed());
    }
    assert!(k.acquire(4, 1, T0).await.is_denied());
    // Redis goes away with every permit in flight; the breaker is closed
    // still, so the first release tries Redis, fails and opens it.
    tokio::task::block_in_place(|| server.kill());
    assert_eq!(b.breaker_state(), BreakerState::Closed);
    let calls = b.redis().stats().calls.get();
    for id in 1..=3 {
        k.try_release(id, 1, T0 + 1).await.expect("queued");
    }
    assert_eq!(b.redis().stats().calls.get(), calls + 1);
    assert_eq!(b.breaker_state(), BreakerState::Open);
    assert_eq!(b.deferred_releases(), 3);
    tokio::task::block_in_place(|| server.restart());
    wait_closed(&b).await;
    wait_delivered(&b).await;
    assert_eq!(b.stats().releases_redelivered.get(), 3);
    assert_eq!(k.held(T0 + 2).await, 0);
    for id in 5..=7 {
        assert!(k.acquire(id, 1, T0 + 3).await.is_allowed(), "{id}");
    }
}

/// The queue of releases waiting for Redis is bounded: beyond it the
/// oldest are dropped (and counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queued_releases_stay_bounded() {
    let server = Server::start();
    let b = backend(&server).await.with_deferred_release_bound(3);
    assert_eq!(b.deferred_release_bound(), 3);
    let k = PermitKey::new(&b, b"route", 10, b"route:queued");
    for id in 1..=5 {
        assert!(k.acquire(id, 1, T0).await.is_allowed());
    }
    assert_eq!(b.issued_permits(), 5);
    server.pause();
    for id in 1..=5 {
        assert_eq!(k.release(id, 1, T0).await, Released::Queued(1));
    }
    server.resume();
    assert_eq!(b.issued_permits(), 0);
    assert_eq!(b.deferred_releases(), 3);
    assert_eq!(b.stats().releases_deferred.get(), 5);
    assert_eq!(b.stats().releases_dropped.get(), 2);
    assert_eq!(b.stats().releases_redelivered.get(), 0);
}

/// The permits Redis admitted through an instance are remembered (so that
/// their releases can wait for Redis) within a bound: holders that never
/// give back, on ever more keys, make it forget the oldest, whose releases
/// are then refused while Redis is away (and sent to Redis when it
/// answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remembered_permits_stay_bounded() {
    let server = Server::start();
    let b = backend(&server).await.with_issued_permit_bound(64);
    assert_eq!(b.issued_permit_bound(), 64);
    // A hundred keys, ten permits each: permit `id` on key `id % 100`.
    let keys: Vec<PermitKey<'_, ResilientBackend>> = (0..100)
        .map(|j| {
            let name: &'static [u8] = format!("route:bounded:{j}").leak().as_bytes();
            PermitKey::new(&b, b"route", 100, name)
        })
        .collect();
    let key = |id: u64| &keys[(id % 100) as usize];
    for id in 1..=1_000u64 {
        assert!(key(id).acquire(id, 1, T0).await.is_allowed(), "{id}");
        assert!(b.issued_permits() <= 64, "{id}: {}", b.issued_permits());
    }
    // One shard at this bound: the newest ones are remembered.
    let n = b.issued_permits() as u64;
    assert!((32..=64).contains(&n), "{n}");
    assert_eq!(b.local_permits(), 0);
    server.pause();
    for id in (1_001 - n..=1_000).rev() {
        assert_eq!(
            key(id).release(id, 1, T0 + 1).await,
            Released::Queued(1),
            "{id}"
        );
    }
    assert_eq!(b.issued_permits(), 0);
    assert_eq!(b.deferred_releases() as u64, n);
    // A forgotten one is not queued.
    for id in [1, 1_000 - n] {
        assert!(matches!(
            key(id).try_release(id, 1, T0 + 1).await,
            Err(BackendError::Unavailable(_))
        ));
    }
    assert_eq!(b.deferred_releases() as u64, n);
    server.resume();
    wait_closed(&b).await;
    deliver_by_calls(&b).await;
    let mut held = 0;
    for k in &keys {
        held += k.held(T0 + 2).await;
    }
    assert_eq!(held, 1_000 - n);
    // Redis answers again: a forgotten permit's release goes to it.
    assert_eq!(key(1).release(1, 1, T0 + 3).await, Released::Given(1));
    assert_eq!(key(1).held(T0 + 3).await, 9);
}

/// The local fallback remembers exactly the permits it admitted that hold
/// units: holders that never give back hold one entry each, requests that
/// complete leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_permits_are_those_holding_units() {
    let b = unreachable().await;
    let k = PermitKey::new(&b, b"route", 1_000, b"route:local-held");
    for id in 1..=1_000u64 {
        assert!(k.acquire(id, 1, T0 + id).await.is_allowed(), "{id}");
    }
    assert!(k.acquire(1_001, 1, T0).await.is_denied());
    assert_eq!(b.breaker_state(), BreakerState::Open);
    assert_eq!(b.local_permits(), 1_000);
    for id in 1..1_000u64 {
        assert_eq!(k.release(id, 1, T0 + 1_000).await, Released::Given(1));
    }
    assert_eq!(b.local_permits(), 1);
    for id in 2_000..3_000u64 {
        assert!(k.acquire(id, 1, T0 + id).await.is_allowed(), "{id}");
        assert_eq!(k.release(id, 5, T0 + id).await, Released::Given(1));
    }
    assert_eq!(b.local_permits(), 1);
    assert_eq!(k.release(1_000, 1, T0).await, Released::Given(1));
    assert_eq!(b.local_permits(), 0);
    assert_eq!(k.held(T0 + 5_000).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_of_a_permit_give_back_at_most_what_it_took() {
    let b = unreachable().await;
    let k = PermitKey::new(&b, b"route", 4, b"route:partial");
    assert!(k.acquire(1, 3, T0).await.is_allowed());
    assert!(k.acquire(2, 1, T0).await.is_allowed());
    k.try_release(1, 2, T0 + 1).await.expect("local");
    assert_eq!(k.held(T0 + 1).await, 2);
    assert_eq!(b.local_permits(), 2);
    // More than it still holds: only its last unit, never permit 2's.
    k.try_release(1, 5, T0 + 2).await.expect("local");
    assert_eq!(k.held(T0 + 2).await, 1);
    assert_eq!(b.local_permits(), 1);
    // Given back already: not to the local store, and not queued for
    // Redis, which this instance never asked.
    assert!(matches!(
        k.try_release(1, 1, T0 + 3).await,
        Err(BackendError::Unavailable(_))
    ));
    assert_eq!(b.deferred_releases(), 0);
    assert_eq!(k.held(T0 + 3).await, 1);
    // A dry run holds nothing and is not remembered.
    let items = [permit(b"route", k.key, &k.limit, 1, 9)];
    let mut out = [blank()];
    b.decide(&items, Timestamp::from_micros(T0), Apply::Check, &mut out)
        .await
        .unwrap();
    assert_eq!(b.local_permits(), 1);
}

/// Items built without a permit (0) keep the breaker's routing: to the
/// local store while the breaker is open, for items under the local policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_without_a_permit_follow_the_breaker() {
    let b = unreachable().await;
    let k = PermitKey::new(&b, b"route", 2, b"route:anonymous");
    let calls = b.redis().stats().calls.get();
    assert!(k.acquire(0, 1, T0).await.is_allowed());
    assert!(k.acquire(0, 1, T0).await.is_allowed());
    assert!(k.acquire(0, 1, T0).await.is_denied());
    // The local store counts them under no permit.
    assert_eq!(b.local_permits(), 1);
    assert!(k.try_release(0, 1, T0 + 1).await.is_err());
    assert_eq!(k.held(T0 + 1).await, 1);
    // Only the first decision tried Redis; the release did not.
    assert_eq!(b.redis().stats().calls.get(), calls + 1);
}
