//! `floodgate replay` against a real nginx: nginx serves timed schedules
//! under `limit_req` and logs each request's `$limit_req_status`; its
//! access log, replayed through the equivalent gateway configuration,
//! must give nginx's decision on every line (pass, delay and its length,
//! reject; dry-run hits), with nothing malformed or late.
//!
//! Requires Debian's `nginx` (scripts/test.sh installs it): the tests fail
//! when it is missing.

use crate::nginx;

use floodgate_replay::{CandidateSpec, LogFormat, LogSource, ReplayOptions};
use nginx::model::{self, Zone};
use nginx::{CLOCKS, HEADERS, Limit, LimitReq, fire};

/// One scenario at a time: nginx's timing needs the machine's two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The access log format of `nginx::LimitReq`, as `--format` takes it.
const FORMAT: &str = r#"nginx:$msec $request_time $http_x_req $limit_req_status $status $remote_addr "$http_x_limit_key" "$http_x_limit_key2""#;

struct Case {
    name: &'static str,
    limits: Vec<Limit>,
    zones: Vec<Zone>,
    rules: Vec<&'static str>,
    dry_run: bool,
    keys: Vec<&'static [&'static str]>,
    n: usize,
    span: u64,
    seed: u64,
}

/// The gateway configuration deciding as nginx does.
fn gateway_config(c: &Case) -> String {
    nginx::gateway_config(&c.rules, c.dry_run, 503)
}

/// Runs the schedule against nginx, replays its log; the differences.
async fn attempt(c: &Case, dir: &tempfile::TempDir) -> Result<String, String> {
    let schedule = model::robust_schedule(&c.zones, c.seed, c.n, c.span, &c.keys);
    let nginx = LimitReq::start(&c.limits, c.dry_run, 503);
    let url = format!("http://127.0.0.1:{}/t/x", nginx.port);
    fire(&url, &schedule, &HEADERS[..c.limits.len()], "").await;
    nginx.logged(schedule.len()).await;
    let delays = nginx.delays(&c.zones);
    let log = nginx.access_log();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), schedule.len(), "nginx logged every request");

    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, gateway_config(c)).unwrap();
    let decisions = dir.path().join("decisions.jsonl");
    let options = ReplayOptions {
        candidates: vec![CandidateSpec::parse(&config.display().to_string()).unwrap()],
        logs: vec![LogSource::File(log.clone())],
        format: FORMAT.parse::<LogFormat>().unwrap(),
        decisions: Some(decisions.clone()),
        sections: floodgate_runtime::host::sections(
            &<floodgate_gateway::Proxying as floodgate_runtime::host::Frontend>::sections(),
        ),
        ..Default::default()
    };
    let r = floodgate_replay::replay(&options).map_err(|e| e.to_string())?;
    assert_eq!(r.input.malformed, 0, "{:?}", r.input.issues);
    assert_eq!(r.input.late, 0, "{:?}", r.input.issues);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let replayed: Vec<serde_json::Value> = std::fs::read_to_string(&decisions)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replayed.len(), lines.len());

    let mut problems = Vec::new();
    let mut table = String::new();
    let mut dry_hits = 0;
    for d in &replayed {
        let n = d["line"].as_u64().unwrap() as usize;
        let fields: Vec<&str> = lines[n - 1].split(' ').collect();
        let status = fields[3];
        let id: usize = fields[2].parse().unwrap();
        let took_ms = (fields[1].parse::<f64>().unwrap() * 1000.0).round() as u64;
        let outcome = d["outcome"].as_str().unwrap();
        let delay = d["delay_ms"].as_f64().unwrap() as u64;
        table.push_str(&format!(
            "line {n}: nginx {status} took {took_ms} ms; replay {outcome} {delay} ms\n"
        ));
        if status.ends_with("_DRY_RUN") && status.starts_with("REJECTED") {
            dry_hits += 1;
        }
        let expected = match status {
            "PASSED" | "DELAYED_DRY_RUN" | "REJECTED_DRY_RUN" => "allowed",
            "DELAYED" => "delayed",
            "REJECTED" => "denied",
            other => {
                problems.push(format!("line {n}: nginx logged `{other}`"));
                continue;
            }
        };
        if outcome != expected {
            problems.push(format!("line {n}: nginx {status}, replay {outcome}"));
        } else if outcome == "delayed" {
            // nginx's delay as it decided it (its error log), not the time
            // it took to release the request (later on a loaded machine).
            match delays.get(&id) {
                Some(&nd) if nd.abs_diff(delay) <= CLOCKS && took_ms + CLOCKS >= nd => {}
                nd => problems.push(format!(
                    "line {n}: replay delays {delay} ms, nginx {nd:?} ms (took {took_ms} ms)"
                )),
            }
        }
    }
    if c.dry_run {
        let hits: u64 = r.candidates[0].rules.iter().map(|r| r.shadow_hits).sum();
        if hits != dry_hits {
            problems.push(format!(
                "{dry_hits} REJECTED_DRY_RUN lines, {hits} shadow-mode hits replayed"
            ));
        }
    }
    if problems.is_empty() {
        Ok(table)
    } else {
        Err(format!("{}\n{table}", problems.join("\n")))
    }
}

/// A loaded machine can disturb a run (a request sent late changes the
/// schedule nginx saw); a real difference is deterministic and fails every
/// attempt.
async fn check(c: Case) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut last = String::new();
    for attempt_no in 1..=3 {
        match attempt(&c, &dir).await {
            Ok(table) => {
                eprintln!("{}: agrees (attempt {attempt_no})\n{table}", c.name);
                return;
            }
            Err(e) => {
                eprintln!("{}: attempt {attempt_no} disagreed:\n{e}", c.name);
                last = e;
            }
        }
    }
    panic!("{}: every attempt disagreed; the last:\n{last}", c.name);
}

fn one(name: &'static str, limit: Limit, zone: Zone, rule: &'static str) -> Case {
    Case {
        name,
        limits: vec![limit],
        zones: vec![zone],
        rules: vec![rule],
        dry_run: false,
        keys: vec![&["a", "b"]],
        n: 30,
        span: 2500,
        seed: 7,
    }
}

fn limit(rate: &'static str, burst: Option<u64>, mode: &'static str) -> Limit {
    Limit {
        header: HEADERS[0],
        rate,
        burst,
        mode,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_delays_and_rejections() {
    check(one(
        "10r/s burst=5",
        limit("10r/s", Some(5), ""),
        Zone::per_second(10, 5, None),
        "rate: 10r/s, burst: 5",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_two_stage_delays_and_nodelay() {
    let mut c = one(
        "20r/s burst=8 delay=3",
        limit("20r/s", Some(8), "delay=3"),
        Zone::per_second(20, 8, Some(3)),
        "rate: 20r/s, burst: 8, delay: 3",
    );
    c.seed = 11;
    check(c).await;
    check(one(
        "30r/m burst=2 nodelay",
        limit("30r/m", Some(2), "nodelay"),
        Zone::per_minute(30, 2, Some(u64::MAX)),
        "rate: 30r/m, burst: 2, nodelay: true",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_two_zones_and_dry_run() {
    check(Case {
        name: "two limit_req: 10r/s burst=4 + 5r/s burst=6 delay=2",
        limits: vec![
            limit("10r/s", Some(4), ""),
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
        keys: vec![&["a", "b", "c"], &["s", "t"]],
        n: 30,
        span: 3000,
        seed: 5,
    })
    .await;
    let mut c = one(
        "10r/s burst=2 dry run",
        limit("10r/s", Some(2), ""),
        Zone::per_second(10, 2, None),
        "rate: 10r/s, burst: 2",
    );
    c.dry_run = true;
    c.n = 24;
    c.span = 1500;
    check(c).await;
}
