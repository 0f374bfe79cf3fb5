//! Policy lookup plus decision: a request of 3 descriptors against a
//! configuration of 1 000 rules, in process, on the in-memory store; and
//! one descriptor decided the general way and by a direct plan.
//!
//! `cargo bench -p floodgate-policy --bench policy`
//!
//! Before the timed runs it counts heap allocations per request in steady
//! state (a counting global allocator) and prints them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::{Apply, StoreConfig};
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

fn bench(c: &mut Criterion) {
    let spec = load_str("bench.yaml", &config(), &LoadOptions::default()).unwrap();
    let policy = PolicySet::compile(&spec).unwrap();
    assert_eq!(policy.rules().len(), 1000);
    let engine = Engine::new(policy, MemoryBackend::new(StoreConfig::default()).unwrap());
    let requests: Vec<[OwnedDescriptor; 3]> = (0..1024)
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
        .collect();
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
        })
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
        })
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
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
