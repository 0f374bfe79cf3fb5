//! The scenarios: each runs the simulation and asserts ranges for the
//! limit, the goodput and the latency of admitted requests, per the goals
//! (goodput ≥ 95 % of capacity at 2×, ≥ 90 % at 10×; p99 of admitted
//! requests ≤ 2× the unloaded p99; the limit within its band 10 control
//! intervals after the capacity halves or doubles; critical requests
//! ≥ 99.5 % admitted at 3×; never a limit of zero).

use floodgate_http::layer::Adaptive;
use floodgate_http::layer::adaptive::Priority;

use super::model::{Phase, Report, Scenario, Service, run, unloaded_p99};

/// The upstream's workers in most scenarios, and their mean service time:
/// 1 000 requests a second.
pub(super) const SERVERS: usize = 20;
pub(super) const SERVICE: Service = Service::Exp(0.02);

pub(super) fn phase(at: f64, servers: usize, service: Service) -> Phase {
    Phase {
        at,
        servers,
        service,
        fail: 0.0,
    }
}

pub(super) fn scenario(offered: f64, phases: Vec<Phase>) -> Scenario {
    Scenario {
        seed: 2,
        duration: 14.0,
        measure_from: 3.0,
        phases,
        offered,
        burst: None,
        mix: [0.0, 1.0, 0.0],
        hot: None,
        timeout: 1.0,
        adaptive: Some(Adaptive {
            min: 1,
            max: 10_000,
            initial: 10,
            ..Adaptive::default()
        }),
    }
}

pub(super) fn steady(offered: f64) -> Scenario {
    scenario(offered, vec![phase(0.0, SERVERS, SERVICE)])
}

/// Runs `s`; asserts its goodput at least `goodput` and the p99 of its
/// admitted requests at most twice the unloaded p99 of the first phase.
pub(super) fn check(name: &str, s: &Scenario, goodput: f64) -> Report {
    check_p99(name, s, goodput, 2.0)
}

/// [`check`] with the p99 of admitted requests at most `p99` times the
/// unloaded one.
pub(super) fn check_p99(name: &str, s: &Scenario, goodput: f64, p99_bound: f64) -> Report {
    let mut r = run(s);
    let (p99, unloaded) = (r.p99(), unloaded_p99(&s.phases[0], 1));
    let limits: Vec<usize> = r.limits.iter().map(|l| l.1).collect();
    let shares =
        [Priority::Critical, Priority::Default, Priority::Sheddable].map(|p| r.admitted_share(p));
    let seen = format!(
        "{name}: goodput {:.3}, p99 {:.1} ms ({:.2}× unloaded), admitted {shares:.3?}, limits {limits:?}",
        r.goodput(),
        p99 * 1e3,
        p99 / unloaded,
    );
    assert!(r.goodput() >= goodput, "{seen}");
    eprintln!("{seen}");
    assert!(p99 <= p99_bound * unloaded, "{seen}");
    assert!(limits.iter().all(|l| *l >= 1), "{seen}");
    r
}

/// Every limit from the 10th interval after `at` on is within
/// `[lo, hi]`.
fn converged(r: &Report, at: f64, band: (usize, usize)) {
    converged_after(r, at, 10, band);
}

/// Every limit from the `n`th interval after `at` on is within `[lo, hi]`.
fn converged_after(r: &Report, at: f64, n: usize, (lo, hi): (usize, usize)) {
    let after = r.limits_between(at, f64::MAX);
    let settled = &after[n.min(after.len())..];
    assert!(after.len() > n + 5, "{after:?}");
    // How long the n intervals took (shown with --nocapture).
    if let Some(end) = r.limits.iter().map(|l| l.0).filter(|t| *t >= at).nth(n) {
        eprintln!("interval {n} after {at} s ends {:.2} s later", end - at);
    }
    assert!(
        settled.iter().all(|l| (lo..=hi).contains(l)),
        "{lo}..={hi}: {after:?}"
    );
}

#[test]
fn steady_state_at_twice_the_capacity() {
    let r = check("2x", &steady(2.0), 0.95);
    converged(&r, 3.0, (SERVERS, SERVERS * 3));
}

#[test]
fn ten_times_the_capacity() {
    check("10x", &steady(10.0), 0.90);
}

#[test]
fn without_the_limit_ten_times_the_capacity_collapses() {
    let mut s = steady(10.0);
    s.adaptive = None;
    let r = run(&s);
    assert!(r.goodput() < 0.1, "{}", r.goodput());
}

#[test]
fn below_capacity_everything_is_admitted_and_the_limit_stays_bounded() {
    let r = check("0.5x", &steady(0.5), 0.49);
    assert!(r.admitted_share(Priority::Default) >= 0.999);
    assert!(r.limits.iter().all(|l| l.1 <= 200), "{:?}", r.limits);
}

#[test]
fn capacity_halves() {
    let s = scenario(
        2.0,
        vec![
            phase(0.0, SERVERS, SERVICE),
            phase(6.0, SERVERS / 2, SERVICE),
        ],
    );
    let r = check("halves", &s, 0.95);
    converged(&r, 6.0, (SERVERS / 2, SERVERS * 3 / 2));
}

#[test]
fn capacity_doubles() {
    let s = scenario(
        4.0,
        vec![
            phase(0.0, SERVERS, SERVICE),
            phase(6.0, SERVERS * 2, SERVICE),
        ],
    );
    let r = check("doubles", &s, 0.95);
    converged(&r, 6.0, (SERVERS * 2, SERVERS * 6));
}

#[test]
fn a_latency_spike_lowers_the_limit_which_recovers_after() {
    let slow = Service::Exp(0.08);
    let phases = vec![
        phase(0.0, SERVERS, SERVICE),
        phase(5.0, SERVERS, slow),
        phase(6.0, SERVERS, SERVICE),
    ];
    // The spike costs goodput while the limit recovers; the no-load
    // latency measured during the spike is relearned by deep drains.
    let r = check("spike", &scenario(2.0, phases), 0.85);
    converged_after(&r, 6.0, 40, (SERVERS, SERVERS * 3));
}

#[test]
fn an_error_burst_lowers_the_limit_which_recovers_after() {
    let mut failing = phase(5.0, SERVERS, SERVICE);
    failing.fail = 0.5;
    let phases = vec![
        phase(0.0, SERVERS, SERVICE),
        failing,
        phase(6.0, SERVERS, SERVICE),
    ];
    let r = run(&scenario(2.0, phases));
    let during = r.limits_between(5.0, 6.0);
    assert!(during.last() < Some(&SERVERS), "{during:?}");
    converged(&r, 6.0, (SERVERS, SERVERS * 3));
}

#[test]
fn a_steady_share_of_failures_is_not_taken_for_overload() {
    // One request in ten fails whatever the load (a broken replica behind
    // the upstream's balancer): below capacity, nothing is shed for it.
    let mut failing = phase(0.0, SERVERS, SERVICE);
    failing.fail = 0.1;
    let r = run(&scenario(0.8, vec![failing]));
    let admitted = r.admitted_share(Priority::Default);
    assert!(
        admitted >= 0.99,
        "admitted {admitted:.3}, limits {:?}",
        r.limits
    );
    assert!(
        r.goodput() >= 0.8 * 0.9 * 0.97,
        "goodput {:.3}",
        r.goodput()
    );
}

#[test]
fn an_outage_lowers_the_limit_never_to_zero_and_it_recovers() {
    // Nothing completes for two seconds: requests time out (overload).
    let phases = vec![
        phase(0.0, SERVERS, SERVICE),
        phase(4.0, 0, SERVICE),
        phase(8.0, SERVERS, SERVICE),
    ];
    let mut s = scenario(2.0, phases);
    (s.timeout, s.duration) = (0.2, 14.0);
    let r = run(&s);
    let during = r.limits_between(4.0, 8.0);
    assert!(during.iter().all(|l| *l >= 1), "{during:?}");
    assert!(during.last() < Some(&(during[0] * 3 / 4)), "{during:?}");
    converged(&r, 8.2, (SERVERS, SERVERS * 3));
}

#[test]
fn a_slow_drift_of_the_service_time_is_followed() {
    // From 20 to 40 ms over the run: the limit keeps the workers busy.
    let phases = (0..28)
        .map(f64::from)
        .map(|i| phase(i * 0.5, SERVERS, Service::Exp(0.02 * (1.0 + i / 27.0))))
        .collect();
    let mut s = scenario(2.0, phases);
    s.measure_from = 3.0;
    let mut r = run(&s);
    assert!(r.goodput() >= 0.93, "{}", r.goodput());
    let late = r.limits_between(10.0, 14.0);
    assert!(
        late.iter().all(|l| (SERVERS..=SERVERS * 3).contains(l)),
        "{late:?}"
    );
    let p99 = r.p99();
    assert!(p99 <= 2.0 * unloaded_p99(&s.phases[27], 1), "{p99}");
}

#[test]
fn bimodal_service_times() {
    // A heavy tail: a window's mean is noisy (more samples an interval),
    // and the workers stay busy with a longer queue (a larger tolerance;
    // the p99 is the tail's anyway).
    let service = Service::Bimodal {
        fast: 0.01,
        slow: 0.1,
        p_slow: 0.1,
    };
    let mut s = scenario(2.0, vec![phase(0.0, SERVERS, service)]);
    s.adaptive = s.adaptive.map(|a| Adaptive {
        min_samples: 200,
        tolerance: 1.0,
        ..a
    });
    s.measure_from = 5.0;
    check("bimodal", &s, 0.85);
}

#[test]
fn one_hot_tenant_under_a_keyed_limit_costs_the_others_little() {
    // Tenant 0 offers 10× the capacity, the others 0.8× together.
    let mut alone = steady(0.8);
    let mut with_hot = steady(10.8);
    with_hot.hot = Some((10.0 / 10.8, 4));
    alone.hot = Some((0.0, 4));
    let (a, h) = (run(&alone), run(&with_hot));
    let kept = h.good_others as f64 / a.good_others as f64;
    assert!(kept >= 0.95, "{kept}");
}

#[test]
fn priorities_critical_is_admitted_while_sheddable_absorbs_3x() {
    let mut s = scenario(3.0, vec![phase(0.0, 100, SERVICE)]);
    s.mix = [0.2, 0.4, 0.4];
    let r = check("priorities", &s, 0.95);
    assert!(r.admitted_share(Priority::Critical) >= 0.995);
    assert!(r.admitted_share(Priority::Sheddable) < r.admitted_share(Priority::Default) / 2.0);
}

#[test]
fn a_tiny_capacity() {
    // 20 requests a second: intervals of 10 completions.
    let mut s = scenario(2.0, vec![phase(0.0, 1, Service::Fixed(0.05))]);
    s.adaptive = s.adaptive.map(|a| Adaptive {
        min_samples: 10,
        initial: 1,
        ..a
    });
    (s.measure_from, s.duration) = (8.0, 30.0);
    // Whole requests: one waiting doubles the latency (the p99 bound is
    // 3×), and a drain from 2 to 1 leaves the one worker idle between
    // arrivals.
    let r = check_p99("tiny", &s, 0.85, 3.0);
    let settled = r.limits_between(8.0, 30.0);
    assert!(settled.iter().all(|l| (1..=4).contains(l)), "{settled:?}");
}

#[test]
fn a_huge_capacity() {
    let mut s = scenario(2.0, vec![phase(0.0, 1_000, Service::Fixed(0.1))]);
    s.adaptive = s.adaptive.map(|a| Adaptive { initial: 100, ..a });
    (s.measure_from, s.duration) = (5.0, 10.0);
    let r = check("huge", &s, 0.95);
    converged(&r, 4.0, (1_000, 2_500));
}
