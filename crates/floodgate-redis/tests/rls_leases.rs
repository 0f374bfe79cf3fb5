//! Leased concurrency limits driven over RLS (`lease:`, `holder:`) on Redis
//! (a single server and a cluster), by two engines standing for two
//! `floodgate serve` instances, on one manual clock (`clock: client`):
//! units a client took on one instance and never gave back (it died) are
//! back on the other within one lease; a holder's decrement, on either
//! instance, frees its own units only, once; without a holder entry a
//! decrement frees one unit, never below none; and two instances deciding
//! concurrently never admit more than the limit in flight.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Cluster, Server};
use floodgate::{ManualClock, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Code, Engine, OwnedDescriptor, PolicySet, Response};
use floodgate_redis::{Mode, RedisBackend, RedisConfig, ResilientBackend, TimeSource};

const RULES: &str = "domains:
  - domain: d
    descriptors:
      - key: user
        descriptors:
          - key: request_id
            rate_limit: {algorithm: concurrency, max: 2, lease: 30s, holder: true}
      - key: tenant
        rate_limit: {algorithm: concurrency, max: 2, lease: 30s}
";

const LEASE: Duration = Duration::from_secs(30);

type Instance = Engine<ResilientBackend, Arc<ManualClock>>;

async fn instance(urls: Vec<String>, mode: Mode, clock: &Arc<ManualClock>) -> Instance {
    let config = RedisConfig {
        urls,
        mode,
        time_source: TimeSource::Client {
            expiry_slack: Duration::from_secs(600),
        },
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        ..RedisConfig::default()
    };
    let spec = load_str("t.yaml", RULES, &LoadOptions::default()).unwrap();
    let policy = PolicySet::compile(&spec).unwrap();
    let redis = RedisBackend::connect(&config).await.expect("connect");
    let backend = ResilientBackend::new(redis, &config).expect("resilient");
    Engine::with_clock(policy, backend, clock.clone())
}

async fn send(e: &Instance, d: OwnedDescriptor, hits: u32) -> (Code, u32) {
    let mut r = Response::default();
    e.evaluate("d", &[d], hits, &mut r).await.unwrap();
    (r.overall, r.statuses[0].limit_remaining)
}

fn start(user: &str, request: &str) -> OwnedDescriptor {
    OwnedDescriptor::new([("user", user), ("request_id", request)])
}

fn stop(user: &str, request: &str) -> OwnedDescriptor {
    start(user, request).negative()
}

async fn two_instances(urls: Vec<String>, mode: Mode) -> (Instance, Instance, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let a = instance(urls.clone(), mode.clone(), &clock).await;
    let b = instance(urls, mode, &clock).await;
    (a, b, clock)
}

/// Instance `a` admits two requests whose Envoy dies; `b` has the units
/// back one lease after each was taken, not before.
async fn a_dead_clients_units_return_within_one_lease(
    a: &Instance,
    b: &Instance,
    clock: &ManualClock,
) {
    assert_eq!(send(a, start("alice", "r1"), 1).await.0, Code::Ok);
    clock.advance(Duration::from_secs(10));
    assert_eq!(send(a, start("alice", "r2"), 1).await.0, Code::Ok);
    assert_eq!(send(b, start("alice", "r3"), 1).await.0, Code::OverLimit);
    clock.advance(LEASE - Duration::from_secs(10) - Duration::from_millis(1));
    assert_eq!(send(b, start("alice", "r3"), 1).await.0, Code::OverLimit);
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        send(b, start("alice", "r3"), 1).await.0,
        Code::Ok,
        "r1's lease ended"
    );
    assert_eq!(send(b, start("alice", "r4"), 1).await.0, Code::OverLimit);
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        send(b, start("alice", "r4"), 1).await.0,
        Code::Ok,
        "r2's lease ended"
    );
}

/// Decrements from either instance: a stranger's frees nothing, a
/// holder's frees its own units once, a late one (after its lease) frees
/// nothing another holder took since.
async fn decrements_free_only_their_holders_units(a: &Instance, b: &Instance, clock: &ManualClock) {
    assert_eq!(send(a, start("dave", "r1"), 1).await.0, Code::Ok);
    assert_eq!(send(a, start("dave", "r2"), 1).await.0, Code::Ok);
    assert_eq!(send(b, stop("dave", "forged"), 5).await, (Code::Ok, 0));
    assert_eq!(send(b, start("dave", "r3"), 1).await.0, Code::OverLimit);
    assert_eq!(
        send(b, stop("dave", "r1"), 5).await,
        (Code::Ok, 1),
        "r1's one unit"
    );
    assert_eq!(send(a, stop("dave", "r1"), 1).await, (Code::Ok, 1), "once");
    assert_eq!(send(b, start("dave", "r3"), 1).await.0, Code::Ok);
    assert_eq!(send(a, start("dave", "r4"), 1).await.0, Code::OverLimit);
    clock.advance(LEASE);
    assert_eq!(send(a, start("dave", "r5"), 1).await.0, Code::Ok);
    assert_eq!(send(b, stop("dave", "r2"), 1).await, (Code::Ok, 1));
    assert_eq!(send(b, start("dave", "r6"), 1).await.0, Code::Ok);
    assert_eq!(send(a, start("dave", "r7"), 1).await.0, Code::OverLimit);
}

/// Without a holder entry: one unit per decrement, floored at none.
async fn anonymous_decrements_floor(a: &Instance, b: &Instance) {
    let t = || OwnedDescriptor::new([("tenant", "t")]);
    assert_eq!(send(a, t(), 1).await.0, Code::Ok);
    assert_eq!(send(b, t(), 1).await.0, Code::Ok);
    assert_eq!(send(a, t(), 1).await.0, Code::OverLimit);
    assert_eq!(send(b, t().negative(), 1).await, (Code::Ok, 1));
    assert_eq!(
        send(a, t().negative(), 9).await,
        (Code::Ok, 2),
        "never below none"
    );
    assert_eq!(send(a, t(), 2).await.0, Code::Ok);
    assert_eq!(send(b, t(), 1).await.0, Code::OverLimit);
}

/// Tasks on both instances take and give back units of one user as fast as
/// they can: the units they hold at once never exceed the limit, and every
/// unit is back at the end.
async fn exact_under_concurrency(a: Arc<Instance>, b: Arc<Instance>) {
    let held = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let e = if t % 2 == 0 { a.clone() } else { b.clone() };
            let (held, most) = (held.clone(), most.clone());
            tokio::spawn(async move {
                for n in 0..40 {
                    let id = format!("t{t}n{n}");
                    if send(&e, start("erin", &id), 1).await.0 != Code::Ok {
                        continue;
                    }
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    held.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(send(&e, stop("erin", &id), 1).await.0, Code::Ok);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} in flight");
    assert_eq!(send(&a, start("erin", "last"), 2).await.0, Code::Ok);
}

async fn all(urls: Vec<String>, mode: Mode) {
    let (a, b, clock) = two_instances(urls, mode).await;
    a_dead_clients_units_return_within_one_lease(&a, &b, &clock).await;
    let expired = |e: &Instance| e.backend().redis().stats().lease_expired.get();
    assert_eq!(expired(&a) + expired(&b), 2, "r1 and r2, each once");
    decrements_free_only_their_holders_units(&a, &b, &clock).await;
    anonymous_decrements_floor(&a, &b).await;
    exact_under_concurrency(Arc::new(a), Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_units_over_rls_on_one_server() {
    let server = Server::start();
    all(vec![server.url()], Mode::Single).await;
}

#[test]
fn leased_units_over_rls_on_a_cluster() {
    let cluster = Cluster::start();
    common::runtime().block_on(all(cluster.urls(), Mode::Cluster));
}
