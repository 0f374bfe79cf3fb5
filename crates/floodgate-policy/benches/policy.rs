//! Policy lookup plus decision: a request of 3 descriptors against a
//! configuration of 1 000 rules, in process, on the in-memory store; and
//! one descriptor decided the general way and by a direct plan.
//!
//! `cargo bench -p floodgate-policy --bench policy`
//!
//! Before the timed runs it counts heap allocations per request in steady
//! state (a counting global allocator) and prints them.
//!
//! The `_observed` cases decide the same requests on an engine recording
//! limited decisions ([`LimitedKeys`], the admin dashboard's top keys).
//! Instruction counts, repeatable on a loaded machine: with
//! `FLOODGATE_BENCH_ITERATIONS=N` set, each case runs `N` times in a
//! function of its own (`case_<name>`) and the bench exits:
//!
//! ```sh
//! cargo bench -p floodgate-policy --bench policy --no-run
//! FLOODGATE_BENCH_ITERATIONS=200000 valgrind --tool=callgrind \
//!     --callgrind-out-file=policy.cg target/release/deps/policy-<hash>
//! callgrind_annotate --inclusive=yes policy.cg | grep case_
//! ```
//!
//! (each `case_` function's inclusive count divided by `N`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use floodgate::{Apply, StoreConfig};
use floodgate_policy::observe::LimitedKeys;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

struct Counting;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f)
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("the in-memory engine never waits"),
    }
}

/// 1 000 rules: 996 per-user exact rules, a per-IP default, a nested
/// per-(tenant, route) rule with wildcards, and a global cap. The limits are
/// high enough that nothing is denied, and long enough that no key becomes
/// idle (and is forgotten and re-stored) during the run: the figure is the
/// steady state of a busy service.
fn config() -> String {
    let mut y = String::from("domains:\n  - domain: api\n    descriptors:\n");
    for i in 0..996 {
        y.push_str(&format!(
            "      - key: user\n        value: user-{i}\n        rate_limit: {{algorithm: token_bucket, requests: 1000, per: 1h, burst: 1000000000}}\n"
        ));
    }
    y.push_str(
        "      - key: remote_address
        rate_limit: {algorithm: sliding_window, requests: 1000000000, per: 1h}
      - key: tenant
        descriptors:
          - key: route
            value: /orders/*
            rate_limit: {requests: 1000000000, per: 1m}
          - key: route
            rate_limit: {requests: 1000000000, per: 1m}
      - key: scope
        value: global
        rate_limit: {requests: 1000000000, per: 1h}
",
    );
    y
}

type Bench = Engine<MemoryBackend>;

/// An engine on the 1 000-rule configuration, observed or not.
fn engine(observed: bool) -> Bench {
    let spec = load_str("bench.yaml", &config(), &LoadOptions::default()).unwrap();
    let policy = PolicySet::compile(&spec).unwrap();
    assert_eq!(policy.rules().len(), 1000);
    let engine = Engine::new(policy, MemoryBackend::new(StoreConfig::default()).unwrap());
    if observed {
        engine.with_observer(std::sync::Arc::new(LimitedKeys::new(
            2048,
            Duration::from_secs(10),
        )))
    } else {
        engine
    }
}

/// An engine where every request of `clients()` is denied (one request
/// an hour per client, spent during set-up), observed or not.
fn denying(observed: bool) -> Bench {
    let yaml = "domains:\n  - domain: api\n    descriptors:\n      - key: client\n        rate_limit: {name: per-client, algorithm: fixed_window, requests: 1, per: 1h}\n";
    let spec = load_str("deny.yaml", yaml, &LoadOptions::default()).unwrap();
    let engine = Engine::new(
        PolicySet::compile(&spec).unwrap(),
        MemoryBackend::new(StoreConfig::default()).unwrap(),
    );
    let engine = if observed {
        engine.with_observer(std::sync::Arc::new(LimitedKeys::new(
            2048,
            Duration::from_secs(10),
        )))
    } else {
        engine
    };
    let mut response = Response::default();
    for c in clients() {
        ready(engine.evaluate("api", &c, 1, &mut response)).unwrap();
    }
    engine
}

fn requests() -> Vec<[OwnedDescriptor; 3]> {
    (0..1024)
        .map(|i| {
            [
                OwnedDescriptor::new([("remote_address", format!("10.0.{}.{}", i / 256, i % 256))]),
                OwnedDescriptor::new([("user", format!("user-{}", i % 996))]),
                OwnedDescriptor::new([
                    ("tenant", "acme".to_string()),
                    ("route", format!("/orders/{i}")),
                ]),
            ]
        })
        .collect()
}

fn clients() -> Vec<[OwnedDescriptor; 1]> {
    (0..1024)
        .map(|i| [OwnedDescriptor::new([("client", format!("c-{i}"))])])
        .collect()
}

fn run_3(engine: &Bench, requests: &[[OwnedDescriptor; 3]], n: usize, response: &mut Response) {
    for i in 0..n {
        ready(engine.evaluate("api", black_box(&requests[i % 1024]), 1, response)).unwrap();
        black_box(response.overall);
    }
}

fn run_1(engine: &Bench, requests: &[[OwnedDescriptor; 1]], n: usize, response: &mut Response) {
    for i in 0..n {
        engine
            .evaluate_now(
                "api",
                black_box(&requests[i % 1024]),
                1,
                Apply::Commit,
                response,
            )
            .unwrap()
            .unwrap();
        black_box(response.overall);
    }
}

// Each case is told apart by a marker of its own, so that the linker
// does not fold identical functions into one.
#[inline(never)]
fn case_3_descriptors(e: &Bench, r: &[[OwnedDescriptor; 3]], n: usize, out: &mut Response) {
    black_box("3_descriptors");
    run_3(e, r, n, out);
}

#[inline(never)]
fn case_3_descriptors_observed(
    e: &Bench,
    r: &[[OwnedDescriptor; 3]],
    n: usize,
    out: &mut Response,
) {
    black_box("3_descriptors_observed");
    run_3(e, r, n, out);
}

#[inline(never)]
fn case_1_denied(e: &Bench, r: &[[OwnedDescriptor; 1]], n: usize, out: &mut Response) {
    black_box("1_denied");
    run_1(e, r, n, out);
}

#[inline(never)]
fn case_1_denied_observed(e: &Bench, r: &[[OwnedDescriptor; 1]], n: usize, out: &mut Response) {
    black_box("1_denied_observed");
    run_1(e, r, n, out);
}

fn run_direct(e: &Bench, r: &[[OwnedDescriptor; 3]], n: usize, out: &mut Response) {
    let plan = e.direct_plan("api", &["remote_address"]).unwrap();
    for i in 0..n {
        e.evaluate_direct(&plan, black_box(&r[i % 1024][0]), 1, Apply::Commit, out)
            .unwrap();
        black_box(out.overall);
    }
}

#[inline(never)]
fn case_1_direct(e: &Bench, r: &[[OwnedDescriptor; 3]], n: usize, out: &mut Response) {
    black_box("1_direct");
    run_direct(e, r, n, out);
}

#[inline(never)]
fn case_1_direct_observed(e: &Bench, r: &[[OwnedDescriptor; 3]], n: usize, out: &mut Response) {
    black_box("1_direct_observed");
    run_direct(e, r, n, out);
}

/// Runs each case `n` times, for counting instructions (see the module
/// documentation).
fn count_instructions(n: usize) {
    let mut response = Response::default();
    let requests = requests();
    let (plain, observed) = (engine(false), engine(true));
    // Warm: every key stored.
    case_3_descriptors(&plain, &requests, 1024, &mut response);
    case_3_descriptors_observed(&observed, &requests, 1024, &mut response);
    case_3_descriptors(&plain, &requests, n, &mut response);
    case_3_descriptors_observed(&observed, &requests, n, &mut response);
    case_1_direct(&plain, &requests, n, &mut response);
    case_1_direct_observed(&observed, &requests, n, &mut response);
    let clients = clients();
    let (plain, observed) = (denying(false), denying(true));
    case_1_denied(&plain, &clients, n, &mut response);
    case_1_denied_observed(&observed, &clients, n, &mut response);
    assert_eq!(response.overall, floodgate_policy::Code::OverLimit);
}

fn bench(c: &mut Criterion) {
    let engine = engine(false);
    let requests = requests();
    let mut response = Response::default();
    for r in &requests {
        ready(engine.evaluate("api", r, 1, &mut response)).unwrap();
        assert_eq!(response.overall, floodgate_policy::Code::Ok);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let n = 100_000u64;
    for i in 0..n as usize {
        ready(engine.evaluate("api", &requests[i % 1024], 1, &mut response)).unwrap();
    }
    let per = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / n as f64;
    println!("heap allocations per request (steady state): {per:.4}");

    let mut group = c.benchmark_group("policy");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(3));
    group.bench_function("3_descriptors_1000_rules", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            ready(engine.evaluate("api", black_box(&requests[i % 1024]), 1, &mut response))
                .unwrap();
            black_box(response.overall)
        });
    });
    // One descriptor of the per-IP rule (no value changes it): matched
    // and decided the general way, and by a direct plan.
    let ips: Vec<[OwnedDescriptor; 1]> = requests.iter().map(|r| [r[0].clone()]).collect();
    let plan = engine
        .direct_plan("api", &["remote_address"])
        .expect("the per-IP rule has a plan");
    group.bench_function("1_descriptor_general", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            let d = black_box(&ips[i % 1024]);
            engine
                .evaluate_now("api", d, 1, Apply::Commit, &mut response)
                .unwrap()
                .unwrap();
            black_box(response.overall)
        });
    });
    group.bench_function("1_descriptor_direct", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            let d = black_box(&ips[i % 1024][0]);
            engine
                .evaluate_direct(&plan, d, 1, Apply::Commit, &mut response)
                .unwrap();
            black_box(response.overall)
        });
    });
    // The same with limited decisions recorded: on admitted requests (all
    // of the 3-descriptor ones) and on denied ones.
    let observed = self::engine(true);
    group.bench_function("3_descriptors_1000_rules_observed", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            ready(observed.evaluate("api", black_box(&requests[i % 1024]), 1, &mut response))
                .unwrap();
            black_box(response.overall)
        });
    });
    let clients = clients();
    for (name, engine) in [
        ("1_descriptor_denied", denying(false)),
        ("1_descriptor_denied_observed", denying(true)),
    ] {
        group.bench_function(name, |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                engine
                    .evaluate_now(
                        "api",
                        black_box(&clients[i % 1024]),
                        1,
                        Apply::Commit,
                        &mut response,
                    )
                    .unwrap()
                    .unwrap();
                black_box(response.overall)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    if let Some(n) = std::env::var("FLOODGATE_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        count_instructions(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
