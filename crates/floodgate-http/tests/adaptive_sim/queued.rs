//! Scenarios with the adaptive limit's queue: a short burst above the
//! limit waits instead of being shed; under sustained overload the waits
//! stay bounded (the p99 of admitted requests as without the queue).

use floodgate_http::layer::adaptive::Priority;
use floodgate_http::layer::{Adaptive, AdaptiveQueue, QueueOrder};

use super::model::{Report, Scenario, run};
use super::scenarios::{check, check_p99, steady};

fn with_queue(mut s: Scenario, order: QueueOrder) -> Scenario {
    let queue = AdaptiveQueue {
        order,
        ..AdaptiveQueue::default()
    };
    s.adaptive = s.adaptive.map(|a| Adaptive {
        queue: Some(queue),
        ..a
    });
    s
}

/// 0.6× the capacity, with a burst of 3× for 30 ms, the limit at most
/// twice the upstream's workers (at this load it grows with the peaks
/// otherwise, and takes the burst whole).
fn bursty() -> Scenario {
    let mut s = steady(0.6);
    s.burst = Some((6.0, 6.03, 3.0));
    s.adaptive = s.adaptive.map(|a| Adaptive { max: 40, ..a });
    s
}

fn shed(r: &Report) -> u64 {
    let i = Priority::Default as usize;
    r.arrived[i] - r.admitted[i]
}

#[test]
fn a_short_burst_above_the_limit_waits_instead_of_being_shed() {
    let without = run(&bursty());
    let with = check(
        "burst, queued",
        &with_queue(bursty(), QueueOrder::Codel),
        0.59,
    );
    eprintln!(
        "shed without the queue {}, with {}; goodput {:.4} → {:.4}",
        shed(&without),
        shed(&with),
        without.goodput(),
        with.goodput()
    );
    assert!(shed(&without) > 0);
    assert_eq!(shed(&with), 0);
    assert!(with.goodput() > without.goodput());
}

#[test]
fn with_the_queue_overload_waits_are_bounded_at_2x_and_10x() {
    for order in [QueueOrder::Codel, QueueOrder::Lifo] {
        check(
            &format!("2x {order:?}"),
            &with_queue(steady(2.0), order),
            0.95,
        );
        check(
            &format!("10x {order:?}"),
            &with_queue(steady(10.0), order),
            0.90,
        );
    }
}

#[test]
fn a_fifo_queue_under_overload_holds_requests_to_their_timeout() {
    // Oldest first, a standing queue makes every request wait about its
    // timeout: the p99 grows by it.
    let mut codel = check(
        "2x codel",
        &with_queue(steady(2.0), QueueOrder::Codel),
        0.95,
    );
    let mut fifo = check_p99(
        "2x fifo",
        &with_queue(steady(2.0), QueueOrder::Fifo),
        0.95,
        3.0,
    );
    assert!(
        fifo.p99() > codel.p99() + 0.05,
        "{} {}",
        fifo.p99(),
        codel.p99()
    );
}
