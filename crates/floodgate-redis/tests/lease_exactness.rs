//! `sync: lease` never lets a fleet admit more than the limit. Several
//! instances (each a backend of its own, with its own leases) decide the
//! same keys through one real Redis, on random schedules: requests racing
//! the ends of their leases, background work (leases given back when they
//! end, penalties told), instances killed while holding leases and
//! replaced, instances shut down, Redis cut off mid-call (calls that ran
//! in Redis with their replies lost) and back, and limits changed while
//! leases are out. Every unit the fleet admits is replayed, in time order,
//! through the core algorithm with the limit in force (one store deciding
//! for everyone): each must be admitted there too. In-flight limits: the
//! permits held by live instances never exceed the limit.
//!
//! Redis cannot be reached, the rule fails closed: the guarantee is the
//! leases' (a failure policy that admits admits on its own terms).

use crate::common;
use common::{blank, instance};

use std::time::Duration;

use common::{CutProxy, Server};
use floodgate::algorithms::{AnyLimit, AnyState, Concurrency, FixedWindow, Gcra, SubWindowCounter};
use floodgate::{Algorithm, Apply, Timestamp};
use floodgate_policy::{Backend, Item, SyncMode};
use floodgate_redis::{BreakerConfig, FailurePolicy, Mode, RedisConfig, TimeSource};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Limit, window (µs).
    Fixed(u64, u64),
    /// Count per period (µs), burst.
    Gcra(u64, u64, u64),
    /// Limit, sub-window (µs), sub-windows.
    Subs(u64, u64, u32),
    /// In flight.
    Conc(u64),
}

impl Kind {
    /// The limit with its count (limit, burst or max) replaced by `n`.
    fn limit(self, n: u64) -> AnyLimit {
        let us = Duration::from_micros;
        match self {
            Kind::Fixed(_, w) => FixedWindow::new(n, us(w)).unwrap().into(),
            Kind::Gcra(c, p, _) => Gcra::new(c, us(p), n).unwrap().into(),
            Kind::Subs(_, s, k) => SubWindowCounter::new(n, us(s * u64::from(k)), k)
                .unwrap()
                .into(),
            Kind::Conc(_) => Concurrency::new(n).unwrap().into(),
        }
    }

    fn count(self) -> u64 {
        match self {
            Kind::Fixed(l, _) | Kind::Subs(l, _, _) => l,
            Kind::Gcra(_, _, b) => b,
            Kind::Conc(m) => m,
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        (
            1u64..=12,
            prop_oneof![Just(1_000u64), Just(50_000), Just(3_000_000)]
        )
            .prop_map(|(l, w)| Kind::Fixed(l, w)),
        (
            1u64..=5,
            prop_oneof![Just(1_000u64), Just(100_000)],
            1u64..=10
        )
            .prop_map(|(c, p, b)| Kind::Gcra(c, p, b)),
        (1u64..=12, prop_oneof![Just(500u64), Just(40_000)], 1u32..=4)
            .prop_map(|(l, s, k)| Kind::Subs(l, s, k)),
        (1u64..=4).prop_map(Kind::Conc),
    ]
}

#[derive(Clone, Debug)]
enum Event {
    /// After `dt` µs, instance `inst` decides `cost` on `key` (and one
    /// unit on the other key in the same batch, with `both`).
    Decide {
        dt: u64,
        inst: usize,
        key: usize,
        cost: u64,
        both: bool,
    },
    /// After `dt` µs, instance `inst` decides `n` requests of one unit on
    /// `key` at once (its next lease is then sized for a busy key).
    Burst {
        dt: u64,
        inst: usize,
        key: usize,
        n: u64,
    },
    /// Instance `inst` gives back its oldest permit on `key`.
    Release {
        inst: usize,
        key: usize,
    },
    /// After `dt` µs, instance `inst` does its background work.
    Flush {
        dt: u64,
        inst: usize,
    },
    /// Instance `inst` dies (its leases are never given back) and a new
    /// one takes its place.
    Crash(usize),
    /// Instance `inst` stops (giving its leases back) and a new one takes
    /// its place.
    Stop(usize),
    /// Redis becomes unreachable / reachable again.
    Cut,
    Heal,
    /// Every instance now has `count` as `key`'s limit.
    Reload {
        key: usize,
        count: u64,
    },
}

const INSTANCES: usize = 3;

fn event() -> impl Strategy<Value = Event> {
    let dt = prop_oneof![
        4 => Just(0u64),
        4 => 1u64..2_000,
        3 => 2_000u64..200_000,
        1 => 200_000u64..3_000_000,
    ];
    prop_oneof![
        20 => (dt.clone(), 0..INSTANCES, 0usize..2, 0u64..=4, prop::bool::weighted(0.2))
            .prop_map(|(dt, inst, key, cost, both)| Event::Decide { dt, inst, key, cost, both }),
        4 => (dt.clone(), 0..INSTANCES, 0usize..2, 2u64..=8)
            .prop_map(|(dt, inst, key, n)| Event::Burst { dt, inst, key, n }),
        3 => (0..INSTANCES, 0usize..2).prop_map(|(inst, key)| Event::Release { inst, key }),
        3 => (dt, 0..INSTANCES).prop_map(|(dt, inst)| Event::Flush { dt, inst }),
        1 => (0..INSTANCES).prop_map(Event::Crash),
        1 => (0..INSTANCES).prop_map(Event::Stop),
        1 => Just(Event::Cut),
        2 => Just(Event::Heal),
        1 => (0usize..2, 1u64..=12).prop_map(|(key, count)| Event::Reload { key, count }),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    kinds: [Kind; 2],
    /// The lease duration (µs).
    lease_us: u64,
    events: Vec<Event>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        kind(),
        kind(),
        prop_oneof![Just(1_000u64), Just(30_000), Just(1_000_000)],
        prop::collection::vec(event(), 1..60),
    )
        .prop_map(|(a, b, lease_us, events)| Case {
            kinds: [a, b],
            lease_us,
            events,
        })
}

fn config(url: &str, prefix: &str, lease_us: u64) -> RedisConfig {
    RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(100),
        time_source: TimeSource::Client {
            expiry_slack: Duration::from_secs(3600),
        },
        failure_policy: FailurePolicy::FailClosed,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cool_down: Duration::from_millis(5),
        },
        sync: SyncMode::Lease {
            duration: Duration::from_micros(lease_us),
        },
        ..RedisConfig::new(url, Mode::Single).unwrap()
    }
}

/// One store deciding for the whole fleet: every admission must fit.
struct Model {
    states: [AnyState; 2],
    /// Permits live instances hold, per instance and key: (permit, units).
    held: Vec<[Vec<(u64, u64)>; 2]>,
}

impl Model {
    fn admit(&mut self, key: usize, limit: &AnyLimit, now: Timestamp, cost: u64, ctx: &str) {
        if limit.is_concurrency() {
            let held: u64 = self.held.iter().flat_map(|h| &h[key]).map(|p| p.1).sum();
            assert!(
                held + cost <= limit.max_units(),
                "{ctx}: {} in flight, limit {}",
                held + cost,
                limit.max_units()
            );
            return;
        }
        let d = limit.decide(&mut self.states[key], now, cost, Apply::Commit);
        assert!(
            d.is_allowed(),
            "{ctx}: the fleet admitted {cost} on key {key} at {now:?} past the limit ({d:?})"
        );
    }
}

trait MaxUnits {
    fn max_units(&self) -> u64;
}

impl MaxUnits for AnyLimit {
    fn max_units(&self) -> u64 {
        match self.kind() {
            floodgate::algorithms::LimitKind::Concurrency(c) => c.max(),
            _ => 0,
        }
    }
}

async fn run_case(port: u16, c: &Case, id: u64) -> (u64, u64) {
    let proxy = CutProxy::start(port).await;
    let cfg = config(&proxy.url(), &format!("lx{id}:"), c.lease_us);
    let mut fleet = Vec::new();
    for _ in 0..INSTANCES {
        fleet.push(instance(&cfg).await);
    }
    let mut counts = [c.kinds[0].count(), c.kinds[1].count()];
    let mut limits = [c.kinds[0].limit(counts[0]), c.kinds[1].limit(counts[1])];
    let groups = [b"g0".to_vec(), b"g1".to_vec()];
    let keys = [b"g0:k".to_vec(), b"g1:k".to_vec()];
    let mut model = Model {
        states: [AnyState::Fresh, AnyState::Fresh],
        held: vec![Default::default(); INSTANCES],
    };
    let mut now_us = 1_700_000_000_000_000u64;
    let mut permit = 1u64;
    let (mut admitted, mut decided) = (0, 0);
    let events: Vec<Event> = c
        .events
        .iter()
        .flat_map(|ev| match *ev {
            Event::Burst { dt, inst, key, n } => (0..n)
                .map(|i| Event::Decide {
                    dt: if i == 0 { dt } else { 0 },
                    inst,
                    key,
                    cost: 1,
                    both: false,
                })
                .collect(),
            ref other => vec![other.clone()],
        })
        .collect();
    for (n, ev) in events.iter().enumerate() {
        let ctx = format!("case {id} event {n} ({ev:?})");
        match *ev {
            Event::Burst { .. } => unreachable!("expanded above"),
            Event::Decide {
                dt,
                inst,
                key,
                cost,
                both,
            } => {
                now_us += dt;
                let now = Timestamp::from_micros(now_us);
                let picks: Vec<(usize, u64)> = if both {
                    vec![(key, cost), (1 - key, 1)]
                } else {
                    vec![(key, cost)]
                };
                permit += 1;
                let items: Vec<Item<'_>> = picks
                    .iter()
                    .map(|&(k, cost)| Item {
                        group: &groups[k],
                        key: &keys[k],
                        limit: &limits[k],
                        cost,
                        on_failure: None,
                        sync: None,
                        zone: None,
                        permit: if limits[k].is_concurrency() {
                            floodgate_policy::Permit::from(permit)
                        } else {
                            floodgate_policy::Permit::NONE
                        },
                    })
                    .collect();
                let mut out = vec![blank(); items.len()];
                let d = fleet[inst]
                    .decide(&items, now, Apply::Commit, &mut out)
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                decided += 1;
                if d.is_allowed() {
                    for &(k, cost) in &picks {
                        if cost == 0 {
                            continue;
                        }
                        admitted += cost;
                        model.admit(k, &limits[k], now, cost, &ctx);
                        if limits[k].is_concurrency() {
                            model.held[inst][k].push((permit, cost));
                        }
                    }
                }
            }
            Event::Release { inst, key } => {
                if model.held[inst][key].is_empty() {
                    continue;
                }
                let (p, units) = model.held[inst][key].remove(0);
                let item = Item {
                    group: &groups[key],
                    key: &keys[key],
                    limit: &limits[key],
                    cost: units,
                    on_failure: None,
                    sync: None,
                    zone: None,
                    permit: p.into(),
                };
                let _ = fleet[inst]
                    .release(item, units, Timestamp::from_micros(now_us))
                    .await;
            }
            Event::Flush { dt, inst } => {
                now_us += dt;
                fleet[inst].flush(Timestamp::from_micros(now_us)).await;
            }
            Event::Crash(inst) => {
                // Its requests die with it.
                model.held[inst] = Default::default();
                fleet[inst] = instance(&cfg).await;
            }
            Event::Stop(inst) => {
                let held = std::mem::take(&mut model.held[inst]);
                for (key, permits) in held.iter().enumerate() {
                    for &(p, units) in permits {
                        let item = Item {
                            group: &groups[key],
                            key: &keys[key],
                            limit: &limits[key],
                            cost: units,
                            on_failure: None,
                            sync: None,
                            zone: None,
                            permit: p.into(),
                        };
                        let _ = fleet[inst]
                            .release(item, units, Timestamp::from_micros(now_us))
                            .await;
                    }
                }
                fleet[inst].shutdown(Timestamp::from_micros(now_us)).await;
                fleet[inst] = instance(&cfg).await;
            }
            Event::Cut => proxy.cut(),
            Event::Heal => proxy.heal(),
            Event::Reload { key, count } => {
                counts[key] = count;
                limits[key] = c.kinds[key].limit(count);
            }
        }
    }
    (admitted, decided)
}

#[test]
fn a_fleet_of_leases_never_admits_past_the_limit() {
    let server = Server::start();
    let port: u16 = server
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let rt = common::runtime();
    let factor = std::env::var("FLOODGATE_REDIS_CASES")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    let mut runner = TestRunner::new(Config {
        cases: 48 * factor.max(1),
        failure_persistence: None,
        ..Config::default()
    });
    let ids = std::sync::atomic::AtomicU64::new(0);
    let totals = std::sync::Mutex::new((0u64, 0u64));
    let result = runner.run(&case(), |c| {
        let id = ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (a, d) = rt.block_on(run_case(port, &c, id));
        let mut t = totals.lock().unwrap();
        t.0 += a;
        t.1 += d;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The schedules admit plenty: the check is not vacuous.
    let (admitted, decided) = *totals.lock().unwrap();
    assert!(
        admitted > 200 && decided > 500,
        "{admitted} admitted of {decided}"
    );
}

/// A token bucket's leased tokens are taken from the bucket when granted,
/// but may be used later: while they wait, the bucket must not refill them
/// for someone else. One instance banks tokens (a lease larger than its
/// first requests, after its first lease ran out at once); another takes
/// all the bucket gives a few milliseconds later; then the banked tokens
/// are used. Replayed through one bucket, every admission fits.
#[test]
fn tokens_leased_and_not_used_yet_are_never_refilled() {
    let server = Server::start();
    let rt = common::runtime();
    rt.block_on(async {
        let cfg = config(&server.url(), "bank:", 1_000_000);
        let fleet = [instance(&cfg).await, instance(&cfg).await];
        // 1 token a millisecond, bursts of 16.
        let limit = AnyLimit::from(Gcra::new(1, Duration::from_millis(1), 16).unwrap());
        let mut model = AnyState::Fresh;
        let t0 = 1_700_000_000_000_000u64;
        let mut admitted = 0;
        let mut decide = async |inst: usize, at_us: u64| {
            let item = Item {
                group: b"g",
                key: b"g:bucket",
                limit: &limit,
                cost: 1,
                on_failure: None,
                sync: None,
                zone: None,
                permit: floodgate_policy::Permit::NONE,
            };
            let now = Timestamp::from_micros(at_us);
            let mut out = [blank()];
            let d = fleet[inst]
                .decide(&[item], now, Apply::Commit, &mut out)
                .await
                .expect("decided");
            if d.is_allowed() {
                admitted += 1;
                let m = limit.decide(&mut model, now, 1, Apply::Commit);
                assert!(
                    m.is_allowed(),
                    "instance {inst} at +{} µs: past the bucket",
                    at_us - t0
                );
            }
            d.is_allowed()
        };
        // Instance 0 takes two tokens at once: its second lease is sized
        // for a busy key, larger than it uses now.
        assert!(decide(0, t0).await);
        assert!(decide(0, t0).await);
        // 6 ms later, instance 1 takes all the bucket gives...
        for _ in 0..20 {
            decide(1, t0 + 6_000).await;
        }
        // ...and the banked tokens are used: they were kept out of it.
        for _ in 0..10 {
            decide(0, t0 + 6_000).await;
        }
        assert!(admitted >= 16, "{admitted}");
        let banked = fleet[0].sharing_stats().lease_units.get();
        assert!(banked >= 6, "no tokens were banked ({banked} leased)");
    });
}

/// Negative hits in `sync: lease` across instances: units one instance
/// admitted and another gives back (Envoy's refund reaching another
/// instance) are every instance's again, and no more: the fleet admits
/// the limit, plus exactly what was given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_reach_every_instance_and_free_no_more_than_given() {
    let server = Server::start();
    let config = config(&server.url(), "lr:", 60_000_000);
    let (a, b) = (instance(&config).await, instance(&config).await);
    let limit = AnyLimit::from(FixedWindow::new(6, Duration::from_secs(60)).unwrap());
    let one = |cost| {
        [Item {
            sync: Some(config.sync),
            ..common::item(b"lr", b"lr:k", &limit, cost)
        }]
    };
    let now = Timestamp::from_secs(600);
    let mut out = [blank()];
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += u64::from(
            a.decide(&one(1), now, Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed(),
        );
    }
    assert_eq!(admitted, 6);
    let d = b
        .decide(&one(3), now, Apply::Refund, &mut out)
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    for i in 0..10 {
        let by = if i % 2 == 0 { &a } else { &b };
        admitted += u64::from(
            by.decide(&one(1), now, Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed(),
        );
    }
    assert_eq!(admitted, 9, "the limit and the 3 given back");
}
