//! Differential tests: random limits (every kind, every penalty mode, with
//! and without a block duration), random schedules of microsecond-aligned times, random costs (0, within, equal to
//! and above the quota), multi-item batches with duplicate keys, dry runs,
//! refunds (negative hits) and releases — decided by the in-memory backend and by Redis (a single
//! server and a cluster, where batches span several slots) must agree on
//! every item: outcome, limit and remaining exactly, durations after
//! rounding the in-memory ones up to whole microseconds.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Cluster, Server, Twin, item};
use floodgate::Apply;
use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, NginxRate, Penalty, Shaper, ShaperDelay, SlidingLog,
    SlidingWindow, SubWindowCounter,
};
use floodgate_policy::SyncMode;
use floodgate_redis::{Mode, RedisConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Clone, Debug)]
enum Spec {
    Gcra(u64, u64, u64),
    Fixed(u64, u64),
    Two(u64, u64),
    Subs(u64, u64, u32),
    Log(u64, u64),
    Shaper(NginxRate, u64, ShaperDelay),
    Conc(u64),
}

impl Spec {
    fn limit(&self) -> AnyLimit {
        let us = Duration::from_micros;
        match *self {
            Spec::Gcra(count, period, burst) => Gcra::new(count, us(period), burst).unwrap().into(),
            Spec::Fixed(l, w) => FixedWindow::new(l, us(w)).unwrap().into(),
            Spec::Two(l, w) => SlidingWindow::new(l, us(w)).unwrap().into(),
            Spec::Subs(l, s, n) => SubWindowCounter::new(l, us(s * u64::from(n)), n)
                .unwrap()
                .into(),
            Spec::Log(l, w) => SlidingLog::new(l, us(w)).unwrap().into(),
            Spec::Shaper(r, b, d) => Shaper::new(r, b, d).unwrap().into(),
            Spec::Conc(m) => Concurrency::new(m).unwrap().into(),
        }
    }

    fn quota(&self) -> u64 {
        match *self {
            Spec::Gcra(_, _, b) => b,
            Spec::Fixed(l, _) | Spec::Two(l, _) | Spec::Subs(l, _, _) | Spec::Log(l, _) => l,
            Spec::Shaper(_, b, _) => b + 1,
            Spec::Conc(m) => m,
        }
    }
}

fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1_000u64),
        Just(1_000_000),
        Just(3_000_000),
        1u64..5_000_000,
    ]
}

/// Large magnitudes, where the scripts' products leave 2^53.
fn big_spec() -> impl Strategy<Value = Spec> {
    const MAX: u64 = 1 << 40;
    prop_oneof![
        (1u64..=MAX, 1u64..=100_000_000_000, 1u64..=MAX).prop_map(|(c, p, b)| Spec::Gcra(c, p, b)),
        (1u64..=MAX, 1u64..=3_000_000_000_000_000).prop_map(|(l, w)| Spec::Fixed(l, w)),
        (1u64..=u64::from(u32::MAX), 1u64..=3_000_000_000_000).prop_map(|(l, w)| Spec::Two(l, w)),
        (1u64..=MAX, 1u64..=100_000_000_000, 1u32..=6).prop_map(|(l, s, n)| Spec::Subs(l, s, n)),
        (
            (1u64..=1 << 30).prop_map(NginxRate::PerSecond),
            0u64..=1 << 30
        )
            .prop_map(|(r, b)| Spec::Shaper(r, b, ShaperDelay::After(b / 2))),
    ]
    .prop_filter("exact in Redis", |s| {
        floodgate_redis::validate(&s.limit()).is_ok()
    })
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        4 => small_spec(),
        1 => big_spec(),
    ]
}

fn small_spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        (1u64..=20, period(), 1u64..=10).prop_map(|(c, p, b)| Spec::Gcra(c, p, b)),
        (1u64..=10, period()).prop_map(|(l, w)| Spec::Fixed(l, w)),
        (1u64..=10, period()).prop_map(|(l, w)| Spec::Two(l, w)),
        (1u64..=20, 1u64..=1_000_000, 1u32..=6).prop_map(|(l, s, n)| Spec::Subs(l, s, n)),
        (1u64..=8, period()).prop_map(|(l, w)| Spec::Log(l, w)),
        (
            prop_oneof![
                (1u64..=20).prop_map(NginxRate::PerSecond),
                (1u64..=600).prop_map(NginxRate::PerMinute)
            ],
            0u64..=6,
            prop_oneof![
                Just(ShaperDelay::Queue),
                Just(ShaperDelay::NoDelay),
                (0u64..=4).prop_map(ShaperDelay::After)
            ]
        )
            .prop_map(|(r, b, d)| Spec::Shaper(r, b, d)),
        (1u64..=5).prop_map(Spec::Conc),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    /// Advance time, then decide on (key, cost selector) picks: commit,
    /// check or refund them.
    Decide(u64, Apply, Vec<(usize, u64)>),
    /// Give back units of a key (a no-op unless it is a concurrency limit).
    Release(usize, u64),
}

#[derive(Clone, Debug)]
struct Case {
    /// Per key: its limit, penalty mode, block (ns, 0: none), and group.
    keys: Vec<(Spec, Penalty, u64, usize)>,
    base_us: u64,
    steps: Vec<Step>,
}

fn case() -> impl Strategy<Value = Case> {
    let keys = prop::collection::vec((spec(), penalty(), block(), 0usize..3), 1..=4);
    let dt = prop_oneof![
        3 => Just(0u64),
        3 => 1u64..2_000,
        3 => 2_000u64..3_000_000,
        1 => 3_000_000u64..20_000_000,
    ];
    let step = prop_oneof![
        9 => (dt, apply(), prop::collection::vec((0usize..4, 0u64..=11), 1..=3))
            .prop_map(|(dt, apply, picks)| Step::Decide(dt, apply, picks)),
        1 => (0usize..4, 1u64..=3).prop_map(|(k, u)| Step::Release(k, u)),
    ];
    (
        keys,
        0u64..2_000_000_000_000_000,
        prop::collection::vec(step, 1..40),
    )
        .prop_map(|(keys, base_us, steps)| Case {
            keys,
            base_us,
            steps,
        })
}

fn apply() -> impl Strategy<Value = Apply> {
    prop_oneof![
        15 => Just(Apply::Check),
        15 => Just(Apply::Refund),
        70 => Just(Apply::Commit),
    ]
}

fn penalty() -> impl Strategy<Value = Penalty> {
    prop_oneof![
        Just(Penalty::None),
        Just(Penalty::OwnDenials),
        Just(Penalty::AllDenials),
    ]
}

/// A block duration in ns (0: none): whole microseconds on the schedules'
/// scale, and some that are not whole microseconds (Redis rounds them up).
fn block() -> impl Strategy<Value = u64> {
    prop_oneof![
        5 => Just(0u64),
        1 => (1u64..3_000).prop_map(|us| us * 1_000),
        1 => (1u64..5_000_000).prop_map(|us| us * 1_000),
        1 => 1u64..5_000_000_000,
    ]
}

/// Cost selector: 0..=8 as is, 9 = the quota, 10 = above it, 11 = half.
fn cost(sel: u64, quota: u64) -> u64 {
    match sel {
        9 => quota,
        10 => quota + 1,
        11 => quota / 2,
        s => s,
    }
}

async fn run_case(t: &Twin, c: &Case, id: u64) {
    // Every case has keys of its own in Redis, and a store of its own in
    // memory (cases start at unrelated times).
    t.forget_memory();
    let limits: Vec<AnyLimit> = c
        .keys
        .iter()
        .map(|(s, p, b, _)| {
            s.limit()
                .with_penalty_mode(*p)
                .with_block(Duration::from_nanos(*b))
        })
        .collect();
    let groups: Vec<String> = (0..3).map(|g| format!("c{id}g{g}")).collect();
    let names: Vec<String> = c
        .keys
        .iter()
        .enumerate()
        .map(|(i, (_, _, _, g))| format!("{}:k{i}", groups[*g]))
        .collect();
    let mut now = c.base_us;
    for (n, step) in c.steps.iter().enumerate() {
        match step {
            Step::Decide(dt, apply, picks) => {
                let check = *apply == Apply::Check;
                now += dt;
                // Lease and sync modes decide the items of a batch that
                // share a key together (their costs added up), and a dry
                // run of several items from each one's replica alone (see
                // docs/redis.md): their batches have distinct keys, and
                // their dry runs one item.
                let shared = t.config.sync != SyncMode::Exact;
                let mut picks = picks.clone();
                if shared {
                    let mut seen = Vec::new();
                    picks.retain(|&(k, _)| {
                        let k = k % c.keys.len();
                        let new = !seen.contains(&k);
                        seen.push(k);
                        new
                    });
                    if check {
                        picks.truncate(1);
                    }
                }
                let items: Vec<_> = picks
                    .iter()
                    .map(|&(k, sel)| {
                        let k = k % c.keys.len();
                        let (spec, _, _, g) = &c.keys[k];
                        item(
                            groups[*g].as_bytes(),
                            names[k].as_bytes(),
                            &limits[k],
                            cost(sel, spec.quota()),
                        )
                    })
                    .collect();
                t.step(&items, now, *apply, &format!("case {id} step {n}"))
                    .await;
            }
            Step::Release(k, units) => {
                let k = k % c.keys.len();
                let (_, _, _, g) = &c.keys[k];
                t.release(
                    item(groups[*g].as_bytes(), names[k].as_bytes(), &limits[k], 0),
                    *units,
                )
                .await;
            }
        }
    }
}

fn run(urls: Vec<String>, mode: Mode, cases: u32) {
    run_with(urls, mode, cases, |_| {});
}

fn run_with(urls: Vec<String>, mode: Mode, cases: u32, f: impl FnOnce(&mut RedisConfig)) {
    static IDS: AtomicU64 = AtomicU64::new(0);
    let rt = common::runtime();
    let twin = rt.block_on(Twin::with(urls, mode.clone(), "d:", f));
    // FLOODGATE_REDIS_CASES multiplies the number of cases (a longer soak).
    let factor = std::env::var("FLOODGATE_REDIS_CASES")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    let mut runner = TestRunner::new(Config {
        cases: cases * factor.max(1),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        rt.block_on(run_case(&twin, &c, id));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let stats = twin.redis.stats();
    if mode == Mode::Cluster {
        assert!(stats.cross_slot.get() > 0, "no batch spanned several slots");
    }
    assert_eq!(stats.errors.get(), 0);
}

#[test]
fn memory_and_single_server_agree() {
    let server = Server::start();
    run(vec![server.url()], Mode::Single, 200);
}

/// Every command through the pipelining window (a single server's only):
/// the same decisions, each pipeline's replies back to their callers.
#[test]
fn memory_and_single_server_agree_through_a_pipelining_window() {
    let server = Server::start();
    run_with(vec![server.url()], Mode::Single, 60, |c| {
        c.pipeline_window = Duration::from_micros(200);
        c.pipeline_limit = 4;
    });
}

/// `sync: lease` on one instance: every decision of a batch the mode
/// applies to is made in memory against leases, and is the in-memory
/// store's own, exactly (durations unrounded); the other batches are
/// decided by Redis.
#[test]
fn memory_and_lease_mode_agree() {
    let server = Server::start();
    run_with(vec![server.url()], Mode::Single, 150, |c| {
        c.sync = SyncMode::Lease {
            duration: Duration::from_secs(2),
        };
    });
}

#[test]
fn memory_and_cluster_agree() {
    let cluster = Cluster::start();
    run(cluster.urls(), Mode::Cluster, 100);
    odd_keys_on_a_cluster(&cluster);
}

/// Huge keys, binary groups with braces, and a key of the wrong type, in
/// batches spanning slots: no CROSSSLOT, no error, the in-memory decisions.
fn odd_keys_on_a_cluster(cluster: &Cluster) {
    use redis::Commands;
    let rt = common::runtime();
    rt.block_on(async {
        let t = Twin::new(cluster.urls(), Mode::Cluster, "odd:").await;
        let limit = AnyLimit::from(SlidingLog::new(3, Duration::from_secs(10)).unwrap());
        let bucket = AnyLimit::from(Gcra::new(3, Duration::from_secs(1), 2).unwrap());
        let mut huge = vec![b'{'; 1 << 20];
        huge[..3].copy_from_slice(b"hg}");
        let groups: [&[u8]; 4] = [b"{", b"}{", b"\0{x}\0", &huge[..3]];
        let keys: [&[u8]; 4] = [b"{:a", b"}{:\0", b"\0{x}\0:}{", &huge];
        let wrong = t.redis.state_key(&item(groups[1], keys[1], &bucket, 1));
        let _: () = cluster.conn().lpush(&wrong, "x").unwrap();
        for k in 0..6u64 {
            let items: Vec<_> = (0..4)
                .map(|i| item(groups[i], keys[i], if i == 1 { &bucket } else { &limit }, 1))
                .collect();
            t.step(
                &items,
                5_000_000 + k * 100_000,
                Apply::Commit,
                &format!("odd {k}"),
            )
            .await;
        }
        assert!(t.redis.stats().cross_slot.get() > 0);
        // Seen by both phases of the first (cross-slot) batch, then fixed.
        assert_eq!(t.redis.stats().state_resets.get(), 2);
        assert_eq!(t.redis.stats().errors.get(), 0);
    });
}

/// Penalties charged by denials in three sub-windows in a row, decided in
/// memory in `sync: lease` mode before any is told to Redis: each stays
/// counted in its own sub-window (the retry is the in-memory one).
#[test]
fn lease_mode_owes_penalties_of_three_sub_windows_exactly() {
    let server = Server::start();
    let rt = common::runtime();
    let twin = rt.block_on(Twin::with(vec![server.url()], Mode::Single, "p:", |c| {
        c.sync = SyncMode::Lease {
            duration: Duration::from_secs(2),
        };
    }));
    let mut id = 0;
    for penalty in [Penalty::OwnDenials, Penalty::AllDenials] {
        for offset in [0u64, 400_000, 856_000] {
            // 12 per 5.14 s in 6 sub-windows of 856.904 ms: 1 admitted,
            // 12 denied (charged), then one denied in each of the next two
            // sub-windows, and one more.
            let c = Case {
                keys: vec![(Spec::Subs(12, 856_904, 6), penalty, 0, 0)],
                base_us: 1_700_000_000_000_000 + offset,
                steps: vec![
                    Step::Decide(0, Apply::Commit, vec![(0, 1)]),
                    Step::Decide(0, Apply::Commit, vec![(0, 9)]),
                    Step::Decide(229_600, Apply::Commit, vec![(0, 1)]),
                    Step::Decide(856_904, Apply::Commit, vec![(0, 1)]),
                    Step::Decide(0, Apply::Commit, vec![(0, 1)]),
                ],
            };
            id += 1;
            rt.block_on(run_case(&twin, &c, id));
        }
    }
}
