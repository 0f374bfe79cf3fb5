//! Differential tests against a real nginx: the same `limit_req`
//! configuration, the same timed request schedules, the same per-request
//! decisions (pass, delay and its length, reject with the configured
//! status). nginx's decisions, as its logs give them (its delays exactly,
//! from its error log), are compared at nginx's own logged arrival times
//! with the reference model's and the gateway's decision function's: a
//! jitter-free check, which a loaded machine cannot disturb. The gateway
//! then answers the schedule over HTTP as the model decides it.
//!
//! Requires Debian's `nginx` (scripts/test.sh installs it): the tests fail
//! when it is missing.

use crate::nginx;
use crate::support;

use std::collections::HashMap;

use floodgate::{ManualClock, Timestamp};
use floodgate_http::contract::{Report, Verdict};
use floodgate_http::{Contract, HttpIdentity, HttpSection};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet};
use nginx::model::{self, Class, Req, Zone};
use nginx::{CLOCKS, HEADERS, Limit, LimitReq, fire, handling_orders};
use support::{ConfigFile, gateway, upstream};

/// One scenario at a time: timing needs the machine's two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How much later than decided a response may come, in ms, beyond what
/// the machine's load delays a timer beside it (both sides share a loaded
/// two-core machine with the client).
const TOLERANCE: f64 = 15.0;

/// Runs of nginx that may be tried for a scenario (a run whose requests
/// nginx logged within a clock tick of a boundary settles nothing).
const NGINX_RUNS: usize = 3;

/// Runs of the gateway that may be tried for a scenario: each is judged
/// against the schedule's own times, which a loaded machine can move (a
/// client timer firing late sends two requests together, in either
/// order).
const GATEWAY_RUNS: usize = 8;

/// Orders of the requests nginx logged in the same millisecond tried at
/// most.
const ORDERS: usize = 500;

struct Scenario {
    name: &'static str,
    limits: Vec<Limit>,
    zones: Vec<Zone>,
    /// Floodgate `rate_limit` bodies, one per limit.
    rules: Vec<&'static str>,
    dry_run: bool,
    status: u16,
    keys: Vec<&'static [&'static str]>,
    n: usize,
    span: u64,
    seed: u64,
}

/// The gateway's configuration for `s`, never polled.
fn gateway_config(s: &Scenario) -> String {
    nginx::gateway_config(&s.rules, s.dry_run, s.status) + "server: {reload_interval: 0}\n"
}

fn nginx_status(class: Option<Class>, dry_run: bool) -> &'static str {
    match (class, dry_run) {
        (None, _) => "-",
        (Some(Class::Pass), _) => "PASSED",
        (Some(Class::Delay(_)), false) => "DELAYED",
        (Some(Class::Delay(_)), true) => "DELAYED_DRY_RUN",
        (Some(Class::Reject), false) => "REJECTED",
        (Some(Class::Reject), true) => "REJECTED_DRY_RUN",
    }
}

/// The gateway's decision function, fed nginx's logged arrival times.
struct Replay {
    engine: Engine<MemoryBackend, std::sync::Arc<ManualClock>>,
    clock: std::sync::Arc<ManualClock>,
    identity: HttpIdentity,
    contract: Contract,
}

impl Replay {
    fn new(text: &str) -> Self {
        let options = LoadOptions {
            other_sections: floodgate_runtime::host::sections(
                &<floodgate_gateway::Proxying as floodgate_runtime::host::Frontend>::sections(),
            ),
            ..Default::default()
        };
        let spec = load_str("g.yaml", text, &options).unwrap();
        let policy = PolicySet::compile(&spec).unwrap();
        let clock = std::sync::Arc::new(ManualClock::new(Timestamp::from_secs(1)));
        let http = HttpSection::from_yaml_str("g.yaml", text).unwrap();
        Replay {
            engine: Engine::with_clock(
                policy,
                MemoryBackend::new(Default::default()).unwrap(),
                clock.clone(),
            ),
            clock,
            identity: http.identity,
            contract: http.contract,
        }
    }

    async fn decide(&self, at_ms: u64, req: &Req, dry_run: bool) -> (&'static str, u64) {
        self.clock.set(Timestamp::from_millis(at_ms));
        let mut head = http::Request::get("/t/x").body(()).unwrap();
        for (h, k) in HEADERS.iter().zip(&req.keys) {
            if let Some(k) = k {
                head.headers_mut().insert(*h, k.parse().unwrap());
            }
        }
        let mut out = self.identity.new_output();
        let peer = "127.0.0.1".parse().unwrap();
        self.identity
            .build(&head, peer, head.extensions(), &mut out);
        let mut response = floodgate_policy::Response::default();
        self.engine
            .evaluate(
                self.identity.domain(),
                &out,
                out.hits_addend(),
                &mut response,
            )
            .await
            .unwrap();
        if dry_run {
            // Shadow rules: decided and counted, never enforced.
            let mut class = "PASSED";
            for s in &response.statuses {
                match s.decision.map(|d| d.outcome) {
                    Some(floodgate::Outcome::Denied) => return ("REJECTED_DRY_RUN", 0),
                    Some(floodgate::Outcome::Delayed(_)) => class = "DELAYED_DRY_RUN",
                    _ => {}
                }
            }
            return (class, 0);
        }
        let mut report = Report::new();
        report.fill(&response, &self.engine.policy(), &self.contract);
        match report.verdict() {
            Verdict::Allowed => ("PASSED", 0),
            Verdict::Delayed(d) => ("DELAYED", d.as_millis() as u64),
            Verdict::Denied => ("REJECTED", 0),
        }
    }
}

/// Runs a scenario: nginx's decisions against the model's and the
/// gateway's decision function's at nginx's own arrival times, then the
/// gateway's answers over HTTP against the model's at the schedule's.
async fn check(s: Scenario) {
    let _serial = SERIAL.lock().await;
    let schedule = model::robust_schedule(&s.zones, s.seed, s.n, s.span, &s.keys);
    let expected = model::run(&s.zones, &schedule, 1_000_000);
    let text = gateway_config(&s);
    let mut table = String::new();
    let mut agreed = false;
    for run in 1..=NGINX_RUNS {
        match nginx_run(&s, &schedule, &text).await {
            Ok(t) => {
                eprintln!("{}: nginx agrees (run {run})", s.name);
                table = t;
                agreed = true;
                break;
            }
            Err(Judged::Unsettled(why)) => {
                eprintln!("{}: nginx run {run} settles nothing: {why}", s.name);
                table = why;
            }
            Err(Judged::Differs(why)) => {
                eprintln!("{}: nginx run {run} disagrees:\n{why}", s.name);
                table = why;
            }
        }
    }
    assert!(
        agreed,
        "{}: no nginx run agreed; the last:\n{table}",
        s.name
    );

    let mut report = String::new();
    for run in 1..=GATEWAY_RUNS {
        match gateway_run(&s, &schedule, &expected, &text).await {
            Ok(t) => {
                eprintln!(
                    "{}: {} requests agree (gateway run {run})\n{table}{t}",
                    s.name,
                    schedule.len()
                );
                return;
            }
            Err(problems) => {
                eprintln!("{}: gateway run {run} disagreed:\n{problems}", s.name);
                report = problems;
            }
        }
    }
    panic!(
        "{}: every gateway run disagreed; the last:\n{report}",
        s.name
    );
}

/// Why a run of nginx did not agree.
enum Judged {
    /// Nothing the model or the gateway can be blamed for: a request
    /// logged within nginx's clock tick of a boundary.
    Unsettled(String),
    Differs(String),
}

/// One run of the schedule against nginx, judged at the times nginx
/// logged (whatever the load made of the schedule): each request's
/// decision and delay (from nginx's error log, exact) as the model and the
/// gateway's decision function give them at those times, in some order
/// nginx may have handled them in; and each answer as nginx logged it,
/// never released before its delay.
async fn nginx_run(s: &Scenario, schedule: &[Req], text: &str) -> Result<String, Judged> {
    let nginx = LimitReq::start(&s.limits, s.dry_run, s.status);
    let url = format!("http://127.0.0.1:{}/t/x", nginx.port);
    let fired = fire(&url, schedule, &HEADERS[..s.limits.len()], "").await;
    let logged = nginx.logged(schedule.len()).await;
    let delays = nginx.delays(&s.zones);
    let mut ids: Vec<usize> = logged.iter().map(|l| l.2).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..schedule.len()).collect::<Vec<_>>(),
        "nginx logged every request once"
    );
    let by_id: HashMap<usize, (u64, u64, String, u16)> = logged
        .iter()
        .map(|(at, took, id, status, code)| (*id, (*at, *took, status.clone(), *code)))
        .collect();
    let first = logged.iter().map(|l| l.0).min().unwrap_or(0);

    // What the client saw is what nginx logged.
    let mut problems = Vec::new();
    let mut table = String::new();
    for (i, n) in fired.seen.iter().enumerate() {
        let (at, took, status, code) = &by_id[&i];
        let delay = match status.as_str() {
            "DELAYED" => delays.get(&i).copied(),
            _ => Some(0),
        };
        table.push_str(&format!(
            "#{i:<3} t={:<5} logged +{:<5} keys={:?} nginx={} {} delay {} ms, took {took} ms, answered in {:.1} ms\n",
            schedule[i].at,
            at - first,
            schedule[i].keys,
            status,
            code,
            delays.get(&i).map_or("-".to_owned(), std::string::ToString::to_string),
            n.latency,
        ));
        if n.limit_status != *status || n.status != *code {
            problems.push(format!(
                "#{i}: nginx answered {} {}, logged {status} {code}",
                n.limit_status, n.status
            ));
        }
        match delay {
            None => problems.push(format!("#{i}: nginx logged no delay for it")),
            // Never released early.
            Some(d) if n.since_due + (CLOCKS as f64) < (d as f64) => problems.push(format!(
                "#{i}: nginx delays {d} ms, answered {:.1} ms after its time",
                n.since_due
            )),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        return Err(Judged::Differs(format!("{}\n{table}", problems.join("\n"))));
    }

    let arrivals: Vec<(u64, usize)> = logged.iter().map(|l| (l.0, l.2)).collect();
    let orders = handling_orders(&arrivals, ORDERS);
    let mut first_problems = None;
    for order in &orders {
        let problems = judge(s, schedule, text, order, &by_id, &delays).await;
        if problems.is_empty() {
            return Ok(table);
        }
        first_problems.get_or_insert(problems);
    }
    let problems = first_problems.unwrap_or_default().join("\n");
    // A request within a tick of a boundary: nginx's two clocks may
    // disagree with the logged one on which side it fell.
    let as_logged: Vec<Req> = orders[0]
        .iter()
        .map(|&i| Req {
            at: by_id[&i].0 - first,
            keys: schedule[i].keys.clone(),
        })
        .collect();
    if !model::robust(&s.zones, &as_logged, CLOCKS, 0) {
        return Err(Judged::Unsettled(format!(
            "a request logged within {CLOCKS} ms of a boundary:\n{problems}\n{table}"
        )));
    }
    Err(Judged::Differs(format!(
        "in {} order(s) of the requests nginx logged together:\n{problems}\n{table}",
        orders.len()
    )))
}

/// The differences, with the requests handled in `order` at nginx's
/// logged times, between nginx's decisions and delays and the model's
/// and the gateway's decision function's.
async fn judge(
    s: &Scenario,
    schedule: &[Req],
    text: &str,
    order: &[usize],
    by_id: &HashMap<usize, (u64, u64, String, u16)>,
    delays: &HashMap<usize, u64>,
) -> Vec<String> {
    let mut model = model::Model::new(&s.zones);
    let replay = Replay::new(text);
    let mut problems = Vec::new();
    let near = |a: u64, b: u64| a.abs_diff(b) <= CLOCKS;
    for &i in order {
        let (at, _, status, _) = &by_id[&i];
        let class = model.decide(*at, &schedule[i].keys);
        let (gw, d) = replay.decide(*at, &schedule[i], s.dry_run).await;
        if nginx_status(class, s.dry_run) != status {
            problems.push(format!("#{i}: model {class:?}, nginx {status}"));
        }
        if gw != status {
            problems.push(format!("#{i}: gateway {gw}, nginx {status}"));
        }
        if let Some(&nd) = delays.get(&i) {
            if let Some(Class::Delay(md)) = class
                && !near(md, nd)
            {
                problems.push(format!("#{i}: model delays {md} ms, nginx {nd} ms"));
            }
            if gw == "DELAYED" && !near(d, nd) {
                problems.push(format!("#{i}: gateway delays {d} ms, nginx {nd} ms"));
            }
        }
    }
    problems
}

/// One run of the schedule against the gateway over HTTP: each answer as
/// the model decides at the schedule's times (the status, and a delay
/// neither shorter than decided nor longer by more than [`TOLERANCE`] and
/// the machine's lateness).
async fn gateway_run(
    s: &Scenario,
    schedule: &[Req],
    expected: &[Option<Class>],
    text: &str,
) -> Result<String, String> {
    let up = upstream().await;
    let file = ConfigFile::new(text);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let url = format!("http://{}/t/x", gw.addr());
    let fired = fire(&url, schedule, &HEADERS[..s.limits.len()], "").await;
    gw.shutdown().await;

    let mut problems = Vec::new();
    let mut table = format!("timer woken up to {:.1} ms late\n", fired.late);
    for (i, (want, g)) in expected.iter().zip(&fired.seen).enumerate() {
        let delay = match want {
            Some(Class::Delay(d)) if !s.dry_run => *d as f64,
            _ => 0.0,
        };
        let status = if *want == Some(Class::Reject) && !s.dry_run {
            s.status
        } else {
            200
        };
        table.push_str(&format!(
            "#{i:<3} t={:<5} keys={:?} model={want:?} gateway={} {:.1} ms ({:.1} ms after its time)\n",
            schedule[i].at, schedule[i].keys, g.status, g.latency, g.since_due
        ));
        if g.status != status {
            problems.push(format!(
                "#{i}: gateway answered {}, expected {status}",
                g.status
            ));
        }
        if g.since_due + (CLOCKS as f64) < delay || g.latency > delay + TOLERANCE + fired.late {
            problems.push(format!(
                "#{i}: delay {delay} ms, gateway answered in {:.1} ms, {:.1} ms after its time",
                g.latency, g.since_due
            ));
        }
    }
    if problems.is_empty() {
        Ok(table)
    } else {
        Err(format!(
            "{} difference(s):\n{}\n{table}",
            problems.len(),
            problems.join("\n")
        ))
    }
}

fn one(
    name: &'static str,
    rate: &'static str,
    burst: Option<u64>,
    mode: &'static str,
    zone: Zone,
    rule: &'static str,
) -> Scenario {
    Scenario {
        name,
        limits: vec![Limit {
            header: HEADERS[0],
            rate,
            burst,
            mode,
        }],
        zones: vec![zone],
        rules: vec![rule],
        dry_run: false,
        status: 503,
        keys: vec![&["a", "b"]],
        n: 30,
        span: 2500,
        seed: 7,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_per_second_with_burst() {
    check(one(
        "10r/s burst=5",
        "10r/s",
        Some(5),
        "",
        Zone::per_second(10, 5, None),
        "rate: 10r/s, burst: 5",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_nodelay() {
    let mut s = one(
        "10r/s burst=5 nodelay",
        "10r/s",
        Some(5),
        "nodelay",
        Zone::per_second(10, 5, Some(u64::MAX)),
        "rate: 10r/s, burst: 5, nodelay: true",
    );
    s.status = 429;
    check(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stage_delay() {
    let mut s = one(
        "20r/s burst=8 delay=3",
        "20r/s",
        Some(8),
        "delay=3",
        Zone::per_second(20, 8, Some(3)),
        "rate: 20r/s, burst: 8, delay: 3",
    );
    s.seed = 11;
    check(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_per_minute() {
    let mut s = one(
        "30r/m burst=2 nodelay",
        "30r/m",
        Some(2),
        "nodelay",
        Zone::per_minute(30, 2, Some(u64::MAX)),
        "rate: 30r/m, burst: 2, nodelay: true",
    );
    s.n = 14;
    s.span = 6000;
    s.keys = vec![&["a"]];
    check(s).await;
    // 1r/m drains 16 units a second (62.5 s a request): within seconds,
    // only the burst passes.
    let mut s = one(
        "1r/m burst=1 nodelay",
        "1r/m",
        Some(1),
        "nodelay",
        Zone::per_minute(1, 1, Some(u64::MAX)),
        "rate: 1r/m, burst: 1, nodelay: true",
    );
    s.n = 8;
    s.span = 1500;
    check(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_zones_on_one_location() {
    check(Scenario {
        name: "two limit_req: 10r/s burst=4 + 5r/s burst=6 delay=2",
        limits: vec![
            Limit {
                header: HEADERS[0],
                rate: "10r/s",
                burst: Some(4),
                mode: "",
            },
            Limit {
                header: HEADERS[1],
                rate: "5r/s",
                burst: Some(6),
                mode: "delay=2",
            },
        ],
        zones: vec![
            Zone::per_second(10, 4, None),
            Zone::per_second(5, 6, Some(2)),
        ],
        rules: vec!["rate: 10r/s, burst: 4", "rate: 5r/s, burst: 6, delay: 2"],
        dry_run: false,
        status: 503,
        keys: vec![&["a", "b", "c"], &["s", "t"]],
        n: 30,
        span: 3000,
        seed: 5,
    })
    .await;
}

/// Dry run with two zones: shadow rules are decided together, so a
/// request the second zone would reject charges neither (as nginx does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_with_two_zones() {
    check(Scenario {
        name: "dry run, two limit_req: 10r/s burst=2 + 5r/s burst=1",
        limits: vec![
            Limit {
                header: HEADERS[0],
                rate: "10r/s",
                burst: Some(2),
                mode: "",
            },
            Limit {
                header: HEADERS[1],
                rate: "5r/s",
                burst: Some(1),
                mode: "nodelay",
            },
        ],
        zones: vec![
            Zone::per_second(10, 2, None),
            Zone::per_second(5, 1, Some(u64::MAX)),
        ],
        rules: vec![
            "rate: 10r/s, burst: 2",
            "rate: 5r/s, burst: 1, nodelay: true",
        ],
        dry_run: true,
        status: 503,
        keys: vec![&["a", "b"], &["s", "t"]],
        n: 20,
        span: 3000,
        seed: 3,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run() {
    let mut s = one(
        "10r/s burst=2 dry run",
        "10r/s",
        Some(2),
        "",
        Zone::per_second(10, 2, None),
        "rate: 10r/s, burst: 2",
    );
    s.dry_run = true;
    s.n = 24;
    s.span = 1500;
    check(s).await;
}

/// nginx's node expiry at `rate=1r/m` without a burst: a zone deletes a
/// node idle a minute and drained only when another key is given a node.
/// Two zones, one scenario each, side by side (a request carries one key,
/// so the other zone skips it):
///
/// * `z0`, one key alone: "a" passes, is still rejected about 61 and 62 s
///   later (its node kept: the drain takes 62.5 s), passes after 62.5 s;
/// * `z1`, another key in between: "a" passes, "b" arrives after the
///   minute (deleting "a"'s node), "a" passes before 62.5 s.
///
/// The minute is nginx's: its clocks run ten times as fast (libfaketime),
/// so the case takes seven seconds. Each request's decision is compared at
/// the time nginx logged for it: nginx's own, the model's, and the
/// gateway's decision function's (the replay). The gateway is not run
/// live: its clock is the real one, and a live run would take the real
/// minute; the live scenarios above cover its HTTP path with the same
/// decision function. A run whose requests land too near a boundary
/// (within a few tenths of a second of nginx's time) is run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_expiry_one_key_and_another_in_between() {
    const SPEED: u64 = 10;
    let _serial = SERIAL.lock().await;
    let s = Scenario {
        name: "node expiry, 1r/m",
        limits: vec![
            Limit {
                header: HEADERS[0],
                rate: "1r/m",
                burst: None,
                mode: "",
            },
            Limit {
                header: HEADERS[1],
                rate: "1r/m",
                burst: None,
                mode: "",
            },
        ],
        zones: vec![Zone::per_minute(1, 0, None), Zone::per_minute(1, 0, None)],
        rules: vec!["rate: 1r/m", "rate: 1r/m"],
        dry_run: false,
        status: 503,
        keys: vec![],
        n: 0,
        span: 0,
        seed: 0,
    };
    let key = |z: usize, k: &str| {
        let mut keys = vec![None, None];
        keys[z] = Some(k.to_owned());
        keys
    };
    // nginx's ms after the start, zone, key, nginx's decision.
    let plan: [(u64, usize, &str, &str); 7] = [
        (0, 0, "a", "PASSED"),
        (0, 1, "a", "PASSED"),
        (60_400, 1, "b", "PASSED"),
        (60_800, 0, "a", "REJECTED"),
        (61_200, 1, "a", "PASSED"),
        (61_800, 0, "a", "REJECTED"),
        (63_500, 0, "a", "PASSED"),
    ];
    // Where each request must land after its zone's first (nginx's ms)
    // for the run to show what it is about, 10 ms clear of the boundaries
    // (the logged arrival is on nginx's wall clock, its decision on its
    // monotonic one: ±1 ms apart).
    let first = |z: usize| if z == 0 { 0 } else { 1 };
    let windows: [std::ops::Range<u64>; 7] = [
        0..1,
        0..1,
        60_010..61_000,
        60_010..62_490,
        60_400..62_490,
        60_010..62_490,
        62_510..70_000,
    ];
    let schedule: Vec<Req> = plan
        .iter()
        .map(|&(ms, z, k, _)| Req {
            at: ms / SPEED,
            keys: key(z, k),
        })
        .collect();
    let text = gateway_config(&s);
    let mut report = String::new();
    for attempt in 1..=3 {
        let nginx = LimitReq::start_with_clock(&s.limits, false, s.status, SPEED as u32);
        let url = format!("http://127.0.0.1:{}/t/x", nginx.port);
        fire(&url, &schedule, &HEADERS, "").await;
        let mut logged = nginx.logged(plan.len()).await;
        logged.sort_by_key(|(at, _, idx, _, _)| (*at, *idx));
        assert_eq!(logged.len(), plan.len(), "nginx logged every request");
        let start = logged[0].0;
        let mut at_of = vec![0u64; plan.len()];
        for (at, _, idx, _, _) in &logged {
            at_of[*idx] = *at;
        }
        let landed: Vec<u64> = (0..plan.len())
            .map(|i| at_of[i] - at_of[first(plan[i].1)])
            .collect();
        if let Some(i) = (0..plan.len()).find(|&i| !windows[i].contains(&landed[i])) {
            report = format!(
                "request {i} landed at {} ms of nginx's time, outside {:?}",
                landed[i], windows[i]
            );
            eprintln!("{}: attempt {attempt}: {report}; again", s.name);
            continue;
        }
        let mut model = model::Model::new(&s.zones);
        let replay = Replay::new(&text);
        let mut problems = Vec::new();
        for (at, _, idx, status, _) in &logged {
            let (_, _, _, want) = plan[*idx];
            let class = model.decide(*at, &schedule[*idx].keys);
            let (gw, _) = replay.decide(*at, &schedule[*idx], false).await;
            eprintln!(
                "#{idx} at +{} ms: nginx {status}, model {class:?}, gateway {gw}",
                at - start
            );
            if status != want {
                problems.push(format!("#{idx}: nginx {status}, expected {want}"));
            }
            if nginx_status(class, false) != status {
                problems.push(format!("#{idx}: model {class:?}, nginx {status}"));
            }
            if gw != status {
                problems.push(format!("#{idx}: gateway {gw}, nginx {status}"));
            }
        }
        if problems.is_empty() {
            // "a" in z0 kept its node throughout; in z1, "b" replaced it
            // and "a" was given a new one.
            assert_eq!((model.nodes(0), model.nodes(1)), (1, 2));
            return;
        }
        // A loaded machine can hold a request between nginx's two clock
        // reads; a real difference fails every attempt.
        report = problems.join("\n");
        eprintln!("{}: attempt {attempt} disagreed:\n{report}", s.name);
    }
    panic!("{}: no run agreed; the last: {report}", s.name);
}
