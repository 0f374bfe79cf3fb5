//! The simulated world: an upstream of `servers` workers with a FIFO
//! queue, whose capacity, service time and failures change by phase; an
//! open-loop (Poisson, seeded) arrival process of three classes and
//! tenants, whose rate may burst for a while; a client timeout. Time is
//! virtual (nanoseconds), events in a heap; the admission is the layer's
//! own [`AdaptiveLimit`], with its queue when configured.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use floodgate::Timestamp;
use floodgate_http::layer::Adaptive;
use floodgate_http::layer::adaptive::{
    AdaptiveLimit, Admission, Completion, Priority, Ticket, Waited, Waiter,
};

/// A service-time distribution, in seconds.
#[derive(Clone, Copy, Debug)]
pub(super) enum Service {
    Fixed(f64),
    Exp(f64),
    /// `fast` or, with probability `p_slow`, `slow` (both exponential).
    Bimodal {
        fast: f64,
        slow: f64,
        p_slow: f64,
    },
}

impl Service {
    fn draw(self, rng: &mut fastrand::Rng) -> f64 {
        match self {
            Service::Fixed(s) => s,
            Service::Exp(m) => exp(rng, m),
            Service::Bimodal { fast, slow, p_slow } => {
                let mean = if rng.f64() < p_slow { slow } else { fast };
                exp(rng, mean)
            }
        }
    }

    fn mean(self) -> f64 {
        match self {
            Service::Fixed(m) | Service::Exp(m) => m,
            Service::Bimodal { fast, slow, p_slow } => fast * (1.0 - p_slow) + slow * p_slow,
        }
    }
}

fn exp(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

/// The upstream from `at` seconds on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Phase {
    pub(super) at: f64,
    pub(super) servers: usize,
    pub(super) service: Service,
    /// Probability that a request fails (fast: a tenth of its service).
    pub(super) fail: f64,
}

impl Phase {
    /// Requests a second the upstream completes at most.
    pub(super) fn capacity(&self) -> f64 {
        self.servers as f64 / self.service.mean()
    }
}

/// One simulated run.
#[derive(Clone, Debug)]
pub(super) struct Scenario {
    pub(super) seed: u64,
    pub(super) duration: f64,
    /// Measured from here (seconds): the warm-up is left out.
    pub(super) measure_from: f64,
    pub(super) phases: Vec<Phase>,
    /// Offered load, as a multiple of the first phase's capacity.
    pub(super) offered: f64,
    /// A burst: from, to (seconds), and the offered load meanwhile.
    pub(super) burst: Option<(f64, f64, f64)>,
    /// Shares of arrivals: critical, default, sheddable.
    pub(super) mix: [f64; 3],
    /// Share of arrivals from the hot tenant (tenant 0), and its keyed
    /// concurrency limit (requests in flight).
    pub(super) hot: Option<(f64, usize)>,
    pub(super) timeout: f64,
    /// None: every request goes through (no limiter).
    pub(super) adaptive: Option<Adaptive>,
}

/// What a run measured (over the measured span).
#[derive(Debug, Default)]
pub(super) struct Report {
    /// Per class: arrivals, admissions.
    pub(super) arrived: [u64; 3],
    pub(super) admitted: [u64; 3],
    /// Successes within the timeout (and of tenants other than 0).
    pub(super) good: u64,
    pub(super) good_others: u64,
    /// What the upstream could have completed over the span.
    pub(super) capacity: f64,
    /// Latencies of successes, seconds.
    pub(super) latencies: Vec<f64>,
    /// Each control interval's end (seconds) and limit after it.
    pub(super) limits: Vec<(f64, usize)>,
}

impl Report {
    pub(super) fn goodput(&self) -> f64 {
        self.good as f64 / self.capacity
    }

    pub(super) fn admitted_share(&self, p: Priority) -> f64 {
        let i = p as usize;
        self.admitted[i] as f64 / self.arrived[i].max(1) as f64
    }

    pub(super) fn p99(&mut self) -> f64 {
        quantile(&mut self.latencies, 0.99)
    }

    /// The limits of intervals ending in `[from, to)`.
    pub(super) fn limits_between(&self, from: f64, to: f64) -> Vec<usize> {
        let within = |t: &f64| (from..to).contains(t);
        self.limits
            .iter()
            .filter(|(t, _)| within(t))
            .map(|l| l.1)
            .collect()
    }
}

pub(super) fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// The p99 of a phase's service time alone (no queue): the unloaded p99.
pub(super) fn unloaded_p99(phase: &Phase, seed: u64) -> f64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v: Vec<f64> = (0..20_000).map(|_| phase.service.draw(&mut rng)).collect();
    quantile(&mut v, 0.99)
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Phase(usize),
    Arrival,
    Done(usize),
    Timeout(usize),
    /// A waiting request's bound passes.
    Deadline(usize),
}

/// A request waiting in the adaptive limit's queue.
struct Pending {
    waiter: Waiter,
    class: usize,
    tenant: bool,
    arrived: f64,
}

struct Request {
    start: f64,
    tenant: bool,
    /// Admitted and not yet completed nor timed out.
    open: bool,
    ticket: Option<Ticket>,
    failed: bool,
}

const NS: f64 = 1e9;

fn ts(seconds: f64) -> Timestamp {
    Timestamp::from_nanos((seconds * NS) as u64)
}

/// The world's state while it runs.
struct World<'s> {
    s: &'s Scenario,
    rng: fastrand::Rng,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    phase: Phase,
    busy: usize,
    queue: VecDeque<usize>,
    requests: Vec<Request>,
    hot_in_flight: usize,
    limit: Option<AdaptiveLimit>,
    /// Requests waiting in the limit's queue (by arrival), and which.
    pending: Vec<Option<Pending>>,
    live: Vec<usize>,
    seen_updates: u64,
    report: Report,
}

/// Runs `s` to its end.
pub(super) fn run(s: &Scenario) -> Report {
    let mut w = World {
        s,
        rng: fastrand::Rng::with_seed(s.seed),
        events: BinaryHeap::new(),
        seq: 0,
        phase: s.phases[0],
        busy: 0,
        queue: VecDeque::new(),
        requests: Vec::new(),
        hot_in_flight: 0,
        limit: s.adaptive.map(|a| AdaptiveLimit::new(a, Timestamp::ZERO)),
        pending: Vec::new(),
        live: Vec::new(),
        seen_updates: 0,
        report: Report::default(),
    };
    for i in 1..s.phases.len() {
        w.at(s.phases[i].at, Event::Phase(i));
    }
    w.at(0.0, Event::Arrival);
    w.report.capacity = capacity_over(s, s.measure_from, s.duration);
    while let Some(Reverse((t, _, e))) = w.events.pop() {
        let now = t as f64 / NS;
        if now >= s.duration {
            break;
        }
        w.handle(now, e);
    }
    w.report
}

/// ∫ capacity dt over `[from, to)`.
fn capacity_over(s: &Scenario, from: f64, to: f64) -> f64 {
    let mut total = 0.0;
    for (i, p) in s.phases.iter().enumerate() {
        let end = s.phases.get(i + 1).map_or(to, |n| n.at.min(to));
        let start = p.at.max(from);
        if end > start {
            total += (end - start) * p.capacity();
        }
    }
    total
}

impl World<'_> {
    fn at(&mut self, t: f64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse(((t * NS) as u64, self.seq, e)));
    }

    fn measured(&self, t: f64) -> bool {
        t >= self.s.measure_from
    }

    fn handle(&mut self, now: f64, e: Event) {
        match e {
            Event::Phase(i) => {
                self.phase = self.s.phases[i];
                self.start_queued(now);
            }
            Event::Arrival => self.arrive(now),
            Event::Done(id) => self.done(now, id),
            Event::Timeout(id) => {
                if self.requests[id].open {
                    self.release(now, id, Completion::Overloaded);
                }
            }
            Event::Deadline(k) => self.deadline(now, k),
        }
    }

    /// The offered load at `now`.
    fn offered(&self, now: f64) -> f64 {
        match self.s.burst {
            Some((from, to, offered)) if (from..to).contains(&now) => offered,
            _ => self.s.offered,
        }
    }

    /// A waiting request's bound passed: it leaves the queue (admitted if
    /// it was handed a slot meanwhile).
    fn deadline(&mut self, now: f64, k: usize) {
        let (Some(p), Some(l)) = (self.pending[k].take(), &self.limit) else {
            return;
        };
        self.live.retain(|i| *i != k);
        if let Some(t) = l.leave(p.waiter, ts(now)) {
            self.admit(now, p.arrived, p.class, p.tenant, Some(t));
        }
    }

    /// Admits the waiting requests handed a slot; forgets those shed.
    fn serve_pending(&mut self, now: f64) {
        let mut i = 0;
        while i < self.live.len() {
            let k = self.live[i];
            let p = self.pending[k].as_mut().expect("live");
            match p.waiter.try_granted() {
                Waited::Waiting => i += 1,
                Waited::Shed => {
                    self.pending[k] = None;
                    self.live.swap_remove(i);
                }
                Waited::Granted(t) => {
                    let p = self.pending[k].take().expect("live");
                    self.live.swap_remove(i);
                    self.admit(now, p.arrived, p.class, p.tenant, Some(t));
                }
            }
        }
    }

    /// A request over its class's limit waits in the queue.
    fn wait(&mut self, waiter: Waiter, class: usize, tenant: bool, now: f64) {
        let k = self.pending.len();
        let deadline = waiter.deadline().as_nanos() as f64 / NS;
        self.pending.push(Some(Pending {
            waiter,
            class,
            tenant,
            arrived: now,
        }));
        self.live.push(k);
        self.at(deadline, Event::Deadline(k));
    }

    fn arrive(&mut self, now: f64) {
        let rate = self.offered(now) * self.s.phases[0].capacity();
        let next = now + exp(&mut self.rng, 1.0 / rate);
        self.at(next, Event::Arrival);
        let u = self.rng.f64();
        let mix = self.s.mix;
        let class = if u < mix[0] {
            0
        } else if u < mix[0] + mix[1] {
            1
        } else {
            2
        };
        let tenant = self.s.hot.is_some_and(|(share, _)| self.rng.f64() < share);
        if self.measured(now) {
            self.report.arrived[class] += 1;
        }
        if let Some((_, cap)) = self.s.hot
            && tenant
            && self.hot_in_flight >= cap
        {
            return;
        }
        let priority = [Priority::Critical, Priority::Default, Priority::Sheddable][class];
        let ticket = match &self.limit {
            Some(l) => match l.admit(priority, ts(now)) {
                Admission::Admitted(t) => Some(t),
                Admission::Waiting(w) => return self.wait(w, class, tenant, now),
                Admission::Shed => return,
            },
            None => None,
        };
        self.admit(now, now, class, tenant, ticket);
    }

    /// Admits at `now` a request that arrived at `arrived`.
    fn admit(
        &mut self,
        now: f64,
        arrived: f64,
        class: usize,
        tenant: bool,
        ticket: Option<Ticket>,
    ) {
        // `class` counted; the upstream treats every class alike.
        if self.measured(now) {
            self.report.admitted[class] += 1;
        }
        self.hot_in_flight += usize::from(tenant);
        let id = self.requests.len();
        let failed = self.rng.f64() < self.phase.fail;
        let open = true;
        self.requests.push(Request {
            start: arrived,
            tenant,
            open,
            ticket,
            failed,
        });
        self.at(arrived + self.s.timeout, Event::Timeout(id));
        self.queue.push_back(id);
        self.start_queued(now);
    }

    fn start_queued(&mut self, now: f64) {
        while self.busy < self.phase.servers {
            let Some(id) = self.queue.pop_front() else {
                return;
            };
            self.busy += 1;
            let mut service = self.phase.service.draw(&mut self.rng);
            if self.requests[id].failed {
                service /= 10.0;
            }
            self.at(now + service, Event::Done(id));
        }
    }

    fn done(&mut self, now: f64, id: usize) {
        self.busy -= 1;
        self.start_queued(now);
        if !self.requests[id].open {
            return; // timed out: its client is gone
        }
        let failed = self.requests[id].failed;
        if !failed && self.measured(now) {
            let r = &self.requests[id];
            self.report.good += 1;
            self.report.good_others += u64::from(!r.tenant);
            self.report.latencies.push(now - r.start);
        }
        let how = if failed {
            Completion::Overloaded
        } else {
            Completion::Ok
        };
        self.release(now, id, how);
    }

    fn release(&mut self, now: f64, id: usize, how: Completion) {
        let r = &mut self.requests[id];
        r.open = false;
        self.hot_in_flight -= usize::from(r.tenant);
        let (Some(l), Some(ticket)) = (&self.limit, r.ticket.take()) else {
            return;
        };
        l.release(ticket, ts(now), how);
        if l.updates() != self.seen_updates {
            self.seen_updates = l.updates();
            self.report.limits.push((now, l.limit()));
        }
        if !self.live.is_empty() {
            self.serve_pending(now);
        }
    }
}
