//! `sync` over-admits by at most the bound `over_admission` computes. Several
//! instances decide the same keys on views pushed and pulled through one
//! real Redis, on random schedules: requests, time, pushes when due,
//! instances killed with hits not pushed (and replaced), Redis cut off and
//! back. Every unit the fleet admits is replayed, in time order, through
//! the core algorithm with the limit widened by the bound (for the
//! instances that took part): each must be admitted there.

use crate::common;
use common::{blank, instance};

use std::time::Duration;

use common::{CutProxy, Server};
use floodgate::algorithms::{AnyLimit, AnyState, FixedWindow, Gcra, SubWindowCounter};
use floodgate::{Algorithm, Apply, Timestamp};
use floodgate_policy::{Backend, Item, SyncMode};
use floodgate_redis::{
    BreakerConfig, FailurePolicy, Mode, RedisConfig, TimeSource, over_admission,
};
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
}

impl Kind {
    /// The limit, its count (limit or burst) widened by `extra`.
    fn limit(self, extra: u64) -> AnyLimit {
        let us = Duration::from_micros;
        match self {
            Kind::Fixed(l, w) => FixedWindow::new(l + extra, us(w)).unwrap().into(),
            Kind::Gcra(c, p, b) => Gcra::new(c, us(p), b + extra).unwrap().into(),
            Kind::Subs(l, s, k) => SubWindowCounter::new(l + extra, us(s * u64::from(k)), k)
                .unwrap()
                .into(),
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        (
            1u64..=40,
            prop_oneof![Just(10_000u64), Just(100_000), Just(2_000_000)]
        )
            .prop_map(|(l, w)| Kind::Fixed(l, w)),
        (
            1u64..=20,
            prop_oneof![Just(10_000u64), Just(1_000_000)],
            1u64..=20
        )
            .prop_map(|(c, p, b)| Kind::Gcra(c, p, b)),
        (
            1u64..=40,
            prop_oneof![Just(5_000u64), Just(50_000)],
            1u32..=4
        )
            .prop_map(|(l, s, k)| Kind::Subs(l, s, k)),
    ]
}

#[derive(Clone, Debug)]
enum Event {
    Decide { dt: u64, inst: usize, cost: u64 },
    Flush { dt: u64, inst: usize },
    Crash(usize),
    Cut,
    Heal,
}

const INSTANCES: usize = 3;

fn event() -> impl Strategy<Value = Event> {
    let dt = prop_oneof![
        4 => Just(0u64),
        4 => 1u64..2_000,
        3 => 2_000u64..60_000,
        1 => 60_000u64..1_000_000,
    ];
    prop_oneof![
        24 => (dt.clone(), 0..INSTANCES, 1u64..=3)
            .prop_map(|(dt, inst, cost)| Event::Decide { dt, inst, cost }),
        6 => (dt, 0..INSTANCES).prop_map(|(dt, inst)| Event::Flush { dt, inst }),
        1 => (0..INSTANCES).prop_map(Event::Crash),
        1 => Just(Event::Cut),
        2 => Just(Event::Heal),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    kind: Kind,
    interval_us: u64,
    events: Vec<Event>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        kind(),
        prop_oneof![Just(1_000u64), Just(10_000), Just(100_000)],
        prop::collection::vec(event(), 1..80),
    )
        .prop_map(|(kind, interval_us, events)| Case {
            kind,
            interval_us,
            events,
        })
}

async fn run_case(port: u16, c: &Case, id: u64) -> (u64, u64) {
    let proxy = CutProxy::start(port).await;
    let interval = Duration::from_micros(c.interval_us);
    let cfg = RedisConfig {
        key_prefix: format!("sb{id}:"),
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
        sync: SyncMode::Sync { interval },
        ..RedisConfig::new(&proxy.url(), Mode::Single).unwrap()
    };
    let mut fleet = Vec::new();
    for _ in 0..INSTANCES {
        fleet.push(instance(&cfg).await);
    }
    // Every instance that ever decides counts (a replaced one is another).
    let mut instances = INSTANCES as u32;
    let limit = c.kind.limit(0);
    let mut decisions: Vec<(u64, u64)> = Vec::new();
    let mut now_us = 1_700_000_000_000_000u64;
    let (mut admitted, mut decided) = (0, 0);
    for (n, ev) in c.events.iter().enumerate() {
        let ctx = format!("case {id} event {n} ({ev:?})");
        match *ev {
            Event::Decide { dt, inst, cost } => {
                now_us += dt;
                let item = Item {
                    group: b"g",
                    key: b"g:k",
                    limit: &limit,
                    cost,
                    on_failure: None,
                    sync: None,
                    zone: None,
                    permit: floodgate_policy::Permit::NONE,
                };
                let mut out = [blank()];
                let d = fleet[inst]
                    .decide(
                        &[item],
                        Timestamp::from_micros(now_us),
                        Apply::Commit,
                        &mut out,
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                decided += 1;
                if d.is_allowed() {
                    admitted += cost;
                    decisions.push((now_us, cost));
                }
            }
            Event::Flush { dt, inst } => {
                now_us += dt;
                fleet[inst].flush(Timestamp::from_micros(now_us)).await;
            }
            Event::Crash(inst) => {
                fleet[inst] = instance(&cfg).await;
                instances += 1;
            }
            Event::Cut => proxy.cut(),
            Event::Heal => proxy.heal(),
        }
    }
    // The replay, with the limit widened by the bound.
    let bound = over_admission(&limit, interval, 3, instances).expect("a sync limit");
    let widened = c.kind.limit(bound.units);
    let mut model = AnyState::Fresh;
    for (i, &(t, cost)) in decisions.iter().enumerate() {
        let d = widened.decide(&mut model, Timestamp::from_micros(t), cost, Apply::Commit);
        assert!(
            d.is_allowed(),
            "case {id}: admission {i} ({cost} at {t}) past the limit plus the bound {bound:?}: {c:?}"
        );
    }
    (admitted, decided)
}

#[test]
fn a_fleet_in_sync_mode_stays_within_the_bound() {
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
        cases: 40 * factor.max(1),
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
    let (admitted, decided) = *totals.lock().unwrap();
    assert!(
        admitted > 300 && decided > 500,
        "{admitted} admitted of {decided}"
    );
}

/// A window's hits pushed as of an earlier time than they were admitted
/// at (the caller's clock stepped back, as an instance's estimate of
/// Redis's clock does when a faster reply tightens it): Redis would count
/// no hits of a window it has not reached, so every instance, this one
/// too, would forget them. One instance, bound 0: never past the limit.
#[test]
fn hits_pushed_as_of_an_earlier_time_are_still_counted() {
    let server = Server::start();
    let rt = common::runtime();
    rt.block_on(async {
        let cfg = RedisConfig {
            key_prefix: "back:".into(),
            time_source: TimeSource::Client {
                expiry_slack: Duration::from_secs(3600),
            },
            sync: SyncMode::Sync {
                interval: Duration::from_millis(100),
            },
            ..RedisConfig::new(&server.url(), Mode::Single).unwrap()
        };
        let b = instance(&cfg).await;
        let limit = Kind::Fixed(30, 1_000_000).limit(0);
        let item = Item {
            group: b"g",
            key: b"g:k",
            limit: &limit,
            cost: 1,
            on_failure: None,
            sync: None,
            zone: None,
            permit: floodgate_policy::Permit::NONE,
        };
        let window = 1_700_000_000_000_000u64;
        let admitted = |at_us: u64, n: u32| {
            let b = &b;
            async move {
                let mut got = 0;
                for _ in 0..n {
                    let mut out = [blank()];
                    let d = b
                        .decide(
                            &[item],
                            Timestamp::from_micros(at_us),
                            Apply::Commit,
                            &mut out,
                        )
                        .await
                        .expect("decided");
                    got += u64::from(d.is_allowed());
                }
                got
            }
        };
        // The window of second `window` filled.
        assert_eq!(admitted(window + 500_000, 40).await, 30);
        // 3 admitted 1 ms into the next window, then pushed as of 1 ms
        // before it.
        let early = admitted(window + 1_001_000, 3).await;
        b.flush(Timestamp::from_micros(window + 999_000)).await;
        let later = admitted(window + 1_002_000, 40).await;
        assert_eq!(
            (early, early + later),
            (3, 30),
            "admitted in the window of second {}",
            window / 1_000_000 + 1
        );
    });
}
