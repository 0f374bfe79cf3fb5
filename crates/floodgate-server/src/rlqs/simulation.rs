//! A long simulated run, on a virtual clock (no sleeps): several Envoy
//! instances, each one stream, enforcing the assignments the real shares,
//! weights and assignment code give them while a real engine counts their
//! reports, through joins, a leave, an idle instance and a liar; the
//! fleet's admitted requests per window of the rule against the bound
//! docs/service.md states.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet, Response};
use tokio::sync::mpsc;

use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};

use super::assignment;
use super::mapping::BucketKey;
use super::shares::Shares;
use super::weights::{self, Peers};

/// The rule's limit per minute.
const LIMIT: u64 = 100;
/// Seconds between an instance's reports (Envoy's `reporting_interval`).
const REPORT: u64 = 5;
/// The assignments' time to live.
const TTL: Duration = Duration::from_secs(10);
/// Seconds simulated: 30 windows of the rule.
const RUN: u64 = 1800;

/// One Envoy instance: its demand, its assignment enforced as Envoy does
/// (`requests_per_time_unit` as a token bucket of the share per minute,
/// full when the assignment changes), what it admitted since its last
/// report, and whether it reports honestly.
struct Envoy {
    id: u64,
    /// Requests offered every `every` seconds.
    demand: (u64, u64),
    honest: bool,
    /// The share per minute (`None`: deny all), in 1/60 request tokens.
    share: Option<u64>,
    tokens: u64,
    admitted: u64,
    denied: u64,
    usage: Option<u64>,
    nudges: mpsc::Receiver<BucketKey>,
    nudge: mpsc::Sender<BucketKey>,
}

impl Envoy {
    fn new(id: u64, demand: (u64, u64), honest: bool) -> Self {
        let (nudge, nudges) = mpsc::channel(64);
        Envoy {
            id,
            demand,
            honest,
            share: None,
            tokens: 0,
            admitted: 0,
            denied: 0,
            usage: None,
            nudges,
            nudge,
        }
    }

    /// One second: refills, and admits what the demand asks and the
    /// tokens allow.
    fn second(&mut self, t: u64) -> u64 {
        let asked = if t.is_multiple_of(self.demand.1) {
            self.demand.0
        } else {
            0
        };
        let admitted = match self.share {
            Some(share) => {
                self.tokens = (self.tokens + share).min(share * 60);
                asked.min(self.tokens / 60)
            }
            None => 0,
        };
        self.tokens -= admitted * 60;
        self.admitted += admitted;
        self.denied += asked - admitted;
        admitted
    }

    /// Takes an assignment: a new one starts a full bucket.
    fn assigned(&mut self, strategy: Strategy) {
        let share = match strategy {
            Strategy::RequestsPerTimeUnit(r) => Some(r.requests_per_time_unit),
            Strategy::BlanketRule(r) if r == BlanketRule::AllowAll as i32 => Some(u64::MAX / 120),
            _ => None,
        };
        if share != self.share {
            self.share = share;
            self.tokens = share.map_or(0, |s| s * 60);
        }
    }
}

/// The service side: the real engine (fixed window of `LIMIT` a minute)
/// on a manual clock, and the real shares.
struct Service {
    engine: Engine<MemoryBackend, Arc<ManualClock>>,
    clock: Arc<ManualClock>,
    shares: Shares,
    start: Instant,
    key: BucketKey,
    response: Response,
}

impl Service {
    fn new() -> Self {
        let yaml = format!(
            "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {{requests_per_unit: {LIMIT}, unit: minute}}\n"
        );
        let spec = load_str("sim.yaml", &yaml, &LoadOptions::default()).unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_040)));
        let backend = MemoryBackend::new(StoreConfig::default()).unwrap();
        let engine = Engine::with_clock(PolicySet::compile(&spec).unwrap(), backend, clock.clone());
        let key = BucketKey {
            domain: "api".into(),
            entries: vec![("user".into(), "a".into())],
        };
        Service {
            engine,
            clock,
            shares: Shares::new(10),
            start: Instant::now(),
            key,
            response: Response::default(),
        }
    }

    /// `envoy`'s report at second `t` (charging `allowed`, or looking only
    /// for a push), and its new assignment.
    fn answer(&mut self, envoy: &Envoy, t: u64, allowed: Option<u64>) -> Strategy {
        let now = self.start + Duration::from_secs(t);
        let peers = match allowed {
            Some(_) => self
                .shares
                .report(&self.key, (envoy.id, envoy.usage), &envoy.nudge, now, TTL)
                .unwrap(),
            None => self.shares.usages(&self.key, now, TTL),
        };
        let hits = allowed.unwrap_or(0);
        let apply = if hits > 0 { Apply::Force } else { Apply::Check };
        let descriptor = [self.key.descriptor(hits.max(1))];
        self.engine
            .evaluate_now("api", &descriptor, 0, apply, &mut self.response)
            .unwrap()
            .unwrap();
        let peers = Peers {
            usages: peers,
            times: 1,
        };
        assignment::strategy(&self.response.statuses[0], &peers, envoy.usage, None).1
    }
}

/// The fleet over the run: who is there when, who reports and how.
fn fleet() -> Vec<(Envoy, u64, u64)> {
    vec![
        // (instance, joins at, leaves at)
        (Envoy::new(0, (1, 10), true), 0, RUN), // idle: 6 a minute
        (Envoy::new(1, (3, 1), true), 0, 900),  // busy, leaves
        (Envoy::new(2, (3, 1), false), 0, RUN), // busy, reports nothing
        (Envoy::new(3, (2, 1), true), 0, RUN),  // busy
        (Envoy::new(4, (3, 1), true), 300, RUN), // busy, joins late
    ]
}

/// Requests admitted per window of the rule: by the honest, by the liar.
fn run() -> Vec<(u64, u64)> {
    let mut service = Service::new();
    let mut fleet = fleet();
    let mut windows = vec![(0, 0); (RUN / 60) as usize];
    for t in 0..RUN {
        service.clock.set(Timestamp::from_secs(1_700_000_040 + t));
        for (envoy, joins, leaves) in &mut fleet {
            if t == *leaves {
                service.shares.leave([&service.key], envoy.id);
                envoy.share = None;
            }
            if t < *joins || t >= *leaves {
                continue;
            }
            let admitted = envoy.second(t);
            let w = &mut windows[(t / 60) as usize];
            if envoy.honest {
                w.0 += admitted;
            } else {
                w.1 += admitted;
            }
            if (t + envoy.id) % REPORT == 0 || t == *joins {
                let admitted = std::mem::take(&mut envoy.admitted);
                let asked = admitted + std::mem::take(&mut envoy.denied);
                let allowed = if envoy.honest { admitted } else { 0 };
                let reported = if envoy.honest { asked } else { 0 };
                envoy.usage = weights::usage(reported, Some(Duration::from_secs(REPORT)));
                let strategy = service.answer(envoy, t, Some(allowed));
                envoy.assigned(strategy);
            }
        }
        push(&mut service, &mut fleet, t);
        let now = service.start + Duration::from_secs(t);
        service.shares.expire([&service.key], now, TTL);
    }
    windows
}

/// The pushes the shares asked for this second.
fn push(service: &mut Service, fleet: &mut [(Envoy, u64, u64)], t: u64) {
    let mut nudged = HashSet::new();
    for (envoy, ..) in fleet.iter_mut() {
        while envoy.nudges.try_recv().is_ok() {
            nudged.insert(envoy.id);
        }
    }
    for (envoy, joins, leaves) in fleet.iter_mut() {
        if nudged.contains(&envoy.id) && t >= *joins && t < *leaves {
            let strategy = service.answer(envoy, t, None);
            envoy.assigned(strategy);
        }
    }
}

/// The fleet's offered rate, requests per second (every instance at
/// once: a bound on what it can admit in a second).
fn offered() -> f64 {
    fleet()
        .iter()
        .map(|(e, ..)| e.demand.0 as f64 / e.demand.1 as f64)
        .sum()
}

#[test]
fn the_fleet_admits_within_the_stated_bound_over_a_long_run() {
    let windows = run();
    // docs/service.md, "The bound": per window of the rule, the limit plus
    // what the streams admit in one reporting interval after it is spent,
    // twice (a report charges the window it arrives in, so the last
    // interval of a window counts in the next); over many windows, once.
    let interval = offered() * REPORT as f64;
    let per_window = LIMIT as f64 + 2.0 * interval;
    // The liar reports nothing: it keeps a quarter of its equal share (4
    // streams at least), a full bucket of it and a window's refill.
    let liar_bound = 2 * (LIMIT / 4 / 4);
    for (i, (honest, liar)) in windows.iter().enumerate() {
        assert!(*liar <= liar_bound, "window {i}: the liar admitted {liar}");
        assert!(
            *honest as f64 <= per_window,
            "window {i}: {honest} admitted"
        );
        // Every window is enforced: the limit is reached, not ignored.
        assert!(*honest >= LIMIT * 9 / 10, "window {i}: {honest} admitted");
    }
    let honest: u64 = windows.iter().map(|w| w.0).sum();
    let average = honest as f64 / windows.len() as f64;
    assert!(
        average <= LIMIT as f64 + interval,
        "{average} a window: {windows:?}"
    );
}
