//! The adaptive concurrency limit's cost on the request path, in process:
//! one admission and its release (the controller's update included, as
//! often as its intervals close), for one thread and for two contending.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::Timestamp;
use floodgate_http::layer::Adaptive;
use floodgate_http::layer::adaptive::{AdaptiveLimit, Admission, Completion, Priority};

fn limit() -> AdaptiveLimit {
    let cfg = Adaptive {
        initial: 1000,
        interval: Duration::from_millis(1),
        ..Adaptive::default()
    };
    AdaptiveLimit::new(cfg, Timestamp::ZERO)
}

/// One admission and release at virtual time `t` (1 µs apart: an interval
/// closes every 1 000 requests).
fn once(l: &AdaptiveLimit, t: &mut u64) {
    *t += 1_000;
    let now = Timestamp::from_nanos(*t);
    let Admission::Admitted(ticket) = l.admit(black_box(Priority::Default), now) else {
        panic!("under the limit");
    };
    let done = Timestamp::from_nanos(*t + 500_000);
    l.release(ticket, done, black_box(Completion::Ok));
}

fn bench(c: &mut Criterion) {
    let l = limit();
    let mut t = 0;
    c.bench_function("adaptive/admit_release", |b| b.iter(|| once(&l, &mut t)));
    c.bench_function("adaptive/rejected", |b| {
        let full = AdaptiveLimit::new(
            Adaptive {
                min: 1,
                initial: 1,
                ..Adaptive::default()
            },
            Timestamp::ZERO,
        );
        let _held = full.try_acquire(Priority::Critical, Timestamp::ZERO);
        b.iter(|| {
            let admitted = full.admit(black_box(Priority::Sheddable), Timestamp::ZERO);
            black_box(matches!(admitted, Admission::Shed));
        });
    });
    let shared = Arc::new(limit());
    c.bench_function("adaptive/admit_release_two_threads", |b| {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = {
            let (l, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut t = 1 << 40;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    once(&l, &mut t);
                }
            })
        };
        let mut t = 0;
        b.iter(|| once(&shared, &mut t));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        other.join().unwrap();
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
