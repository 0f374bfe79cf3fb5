//! The synchronisation modes end to end: four real `floodgate serve`
//! processes on one real `redis-server` (and on a real Redis Cluster),
//! driven at once over HTTP (`/v1/check`), one hot key and 10 000 keys;
//! every window of every key checked — `lease` never admits past the
//! limit, `sync` never past the limit plus the bound `floodgate config
//! check` prints. On one server also: an instance killed (SIGKILL) while it
//! holds a lease, and a new one started in its place; Redis frozen
//! (SIGSTOP) under load; Redis crashed (SIGKILL) and restarted from its
//! append-only file under load; the limit lowered by a reload while leases
//! are out; an instance killed holding in-flight units under a lease (the
//! others never get them while its lease lasts, and all come back when it
//! ends).
//!
//! Every answer is counted in the window it was decided in, as the answer
//! itself says: a fixed window's `reset_after_ms` is the time from the
//! decision to the window's end, so the decision instant (between the
//! request leaving and the answer arriving) plus it lands on the window's
//! end. An answer whose round trip is too long to say which window it
//! belongs to is not counted, which only weakens the check; nothing is
//! asserted on timing.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate_testkit::{Floodgate, Redis, RedisCluster};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const HOT: u64 = 30;
/// The hot key's limit after the reload.
const LOWER: u64 = 12;
const USER: u64 = 2;
const USERS: u32 = 10_000;
/// User keys that get a third of the load (so that they are contended).
const WARM: u32 = 100;
const HOT_KEY: u32 = u32::MAX;

fn config(url: &str, sync: &str, hot: u64) -> String {
    format!(
        "store:
  backend: redis
  url: {url}
  timeout: 200ms
  breaker: {{failures: 1000, cool_down: 50ms}}
  sync: {sync}
domains:
  - domain: fleet
    descriptors:
      - key: hot
        rate_limit: {{name: hot, requests: {hot}, per: 1s, on_failure: fail_closed}}
      - key: user
        rate_limit: {{name: user, requests: {USER}, per: 1s, on_failure: fail_closed}}
"
    )
}

/// The over-admission bound `floodgate config check` prints for the rules
/// `hot` and `user` (0 when it prints none: lease and exact rules).
fn printed_bounds(config: &str) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.yaml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&path)
        .output()
        .expect("config check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bound = |rule: &str| {
        text.lines()
            .find(|l| l.contains(&format!("rule '{rule}'")))
            .and_then(|l| l.split("at most ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .map(|n| n.parse().expect("a number of units"))
            .unwrap_or(0)
    };
    (bound("hot"), bound("user"))
}

/// The bounds of each hot limit a phase may see (`limit → (hot, user)`).
type Bounds = HashMap<u64, (u64, u64)>;

/// One answer.
#[derive(Clone, Copy, Debug)]
struct Answer {
    key: u32,
    /// The end of the window it was decided in (whole seconds since the
    /// epoch).
    window: u64,
    allowed: bool,
    /// The limit it reports.
    limit: u64,
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// The window an answer was decided in, from the instants its request
/// left and its answer arrived (ms since the epoch) and its
/// `reset_after_ms`; `None` when it cannot be told.
fn window_of(sent: f64, got: f64, reset_ms: f64) -> Option<u64> {
    if got - sent > 400.0 {
        return None;
    }
    let end = (sent + got) / 2.0 + reset_ms;
    let second = (end / 1000.0).round();
    ((end - second * 1000.0).abs() < 300.0).then_some(second as u64)
}

/// What to send. Each phase has a hot key of its own (the tag), which
/// the phases before it never charged.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// The hot key only.
    Hot(u32),
    /// A third on the hot key, a third on the warm user keys, a third on
    /// any of the 10 000.
    Mixed(u32),
}

fn body(key: u32, hits: u64, tag: u32) -> String {
    let (k, v) = if key == HOT_KEY {
        ("hot", format!("x{tag}"))
    } else {
        ("user", format!("u{key}"))
    };
    // `hits` per descriptor: 0 is a check that takes nothing.
    format!(
        r#"{{"domain":"fleet","descriptors":[{{"entries":[{{"key":"{k}","value":"{v}"}}],"hits":{hits}}}]}}"#
    )
}

/// Sends one check; its answer, `None` when it failed or cannot be placed
/// in a window.
async fn check_one(
    client: &reqwest::Client,
    port: u16,
    key: u32,
    hits: u64,
    tag: u32,
) -> Option<(Answer, serde_json::Value)> {
    let sent = epoch_ms();
    let r = client
        .post(format!("http://127.0.0.1:{port}/v1/check"))
        .header("content-type", "application/json")
        .body(body(key, hits, tag))
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = r.json().await.ok()?;
    let got = epoch_ms();
    let decision = &v["statuses"][0]["decision"];
    let reset = decision["reset_after_ms"].as_f64()?;
    let answer = Answer {
        key,
        window: window_of(sent, got, reset)?,
        allowed: v["allowed"].as_bool()?,
        limit: decision["limit"].as_u64()?,
    };
    Some((answer, v))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Sends requests for `run` from 32 tasks to the instances at `ports` in
/// turn; every answer that can be placed in a window.
async fn drive(ports: &[u16], run: Duration, load: Load) -> Vec<Answer> {
    let client = client();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + run;
    let mut tasks = Vec::new();
    for w in 0..32u64 {
        let (client, answers, ports) = (client.clone(), answers.clone(), ports.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(w + 1) | 1;
            let mut mine = Vec::new();
            let mut n = w as usize;
            while Instant::now() < stop {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let tag = match load {
                    Load::Hot(t) | Load::Mixed(t) => t,
                };
                let key = match (load, x % 3) {
                    (Load::Hot(_), _) | (Load::Mixed(_), 0) => HOT_KEY,
                    (_, 1) => ((x >> 8) % u64::from(WARM)) as u32,
                    _ => ((x >> 8) % u64::from(USERS)) as u32,
                };
                n += 1;
                if let Some((a, _)) = check_one(&client, ports[n % ports.len()], key, 1, tag).await
                {
                    mine.push(a);
                }
            }
            answers.lock().unwrap().extend(mine);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(answers).unwrap().into_inner().unwrap()
}

/// Admissions per key, window and limit (a rule's counters are keyed by
/// its limits: a reload that changes a limit counts afresh, so a window
/// that straddles it may admit under each).
/// Each with the answers it got.
fn windows(answers: &[Answer]) -> HashMap<(u32, u64, u64), (u64, u64)> {
    let mut w: HashMap<(u32, u64, u64), (u64, u64)> = HashMap::new();
    for a in answers {
        let e = w.entry((a.key, a.window, a.limit)).or_default();
        e.0 += u64::from(a.allowed);
        e.1 += 1;
    }
    w
}

/// Checks every window of every key's counter: at most the limit plus its
/// printed bound. Returns the most the hot key admitted in one window that
/// asked for three times its limit or more (`None`: no window did, the
/// machine was too slow to say).
fn check(what: &str, answers: &[Answer], bounds: &Bounds) -> Option<u64> {
    let mut hot_best = None;
    let mut keys = 0;
    for (&(key, window, limit), &(admitted, asked)) in &windows(answers) {
        let extra = if key == HOT_KEY {
            bounds.get(&limit).map(|b| b.0)
        } else {
            bounds.values().map(|b| b.1).max()
        }
        .unwrap_or_else(|| panic!("{what}: an answer reports limit {limit}"));
        assert!(
            admitted <= limit + extra,
            "{what}: key {key} admitted {admitted} in the window ending at {window} s \
             (limit {limit}, bound {extra})"
        );
        if key == HOT_KEY {
            if asked >= 3 * limit {
                hot_best = hot_best.max(Some(admitted));
            }
        } else if admitted > 0 {
            keys += 1;
        }
    }
    eprintln!(
        "{what}: {} answers, the hot key at most {hot_best:?} per busy window, {keys} user key windows admitted",
        answers.len()
    );
    hot_best
}

fn start(config: &str) -> Floodgate {
    Floodgate::start(bin(), config, &["--log-level", "warn"], &[])
}

fn ports(fleet: &[Floodgate]) -> Vec<u16> {
    fleet.iter().map(|f| f.http).collect()
}

/// The hot key and 10 000 keys at once, over two windows or so.
async fn hot_and_many(what: &str, fleet: &[Floodgate], bounds: &Bounds, tag: u32) {
    let answers = drive(&ports(fleet), Duration::from_millis(1300), Load::Mixed(tag)).await;
    // Leases give the limit out, not a fraction of it (a quarter each for
    // four instances). More than half, not all of it: on a busy machine an
    // instance starved of CPU holds a lease it cannot use until it ends.
    if let Some(best) = check(what, &answers, bounds) {
        assert!(
            best > HOT / 2,
            "{what}: at most {best} of {HOT} admitted in a busy window"
        );
    }
    let keys = answers
        .iter()
        .filter(|a| a.key != HOT_KEY && a.allowed)
        .count();
    assert!(
        keys > 20,
        "{what}: too little load ({keys} user admissions)"
    );
}

async fn on_one_server(lease: bool) {
    let mode = if lease { "lease" } else { "sync" };
    // Every write on disk before Redis answers: a crash loses nothing
    // Redis has acknowledged.
    let mut redis = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    // Five instances over the test: the one killed never pushes its last
    // hits.
    let sync = if lease {
        "{mode: lease, duration: 2s}"
    } else {
        "{mode: sync, interval: 100ms, instances: 5}"
    };
    let text = config(&redis.addr(), sync, HOT);
    let mut bounds = Bounds::from([(HOT, printed_bounds(&text))]);
    assert_eq!(
        bounds[&HOT].0 == 0,
        lease,
        "config check prints sync's bound: {bounds:?}"
    );
    let mut fleet: Vec<Floodgate> = (0..4).map(|_| start(&text)).collect();
    hot_and_many(&format!("{mode}: 4 instances"), &fleet, &bounds, 0).await;

    // An instance dies holding a lease (or hits not pushed): what it
    // admitted counts, what it held is lost to the others until its window
    // ends, and no more.
    let a = fleet[0].http;
    let mut answers = drive(&[a], Duration::from_millis(150), Load::Hot(1)).await;
    let (held_at, held) = check_one(&client(), a, HOT_KEY, 0, 1)
        .await
        .expect("a check");
    let leased = held["statuses"][0]["limits"][0]["sync"]["leased"].as_u64();
    assert_eq!(leased.is_some(), lease, "{held}");
    fleet[0].signal("KILL");
    let others = drive(
        &ports(&fleet[1..]),
        Duration::from_millis(1200),
        Load::Hot(1),
    )
    .await;
    if let Some(leased) = leased {
        let admitted = |list: &[Answer]| {
            list.iter()
                .filter(|x| x.allowed && x.window == held_at.window)
                .count() as u64
        };
        let (by_a, by_others) = (admitted(&answers), admitted(&others));
        assert!(
            by_a + leased + by_others <= HOT,
            "{mode}: the dead instance admitted {by_a} and held {leased}; the others admitted \
             {by_others} more in the same window (limit {HOT})"
        );
    }
    answers.extend(others);
    check(&format!("{mode}: an instance killed"), &answers, &bounds);
    // A new one takes its place and starts from the fleet's counts.
    fleet[0] = start(&text);
    hot_and_many(&format!("{mode}: after the kill"), &fleet, &bounds, 2).await;

    // Redis frozen under load: leases and views run out, then the rules
    // fail closed.
    let load = tokio::spawn({
        let ports = ports(&fleet);
        async move { drive(&ports, Duration::from_millis(1300), Load::Mixed(3)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.pause();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();
    check(
        &format!("{mode}: Redis frozen"),
        &load.await.unwrap(),
        &bounds,
    );
    hot_and_many(&format!("{mode}: after the freeze"), &fleet, &bounds, 4).await;

    // Redis crashes under load and comes back from its file.
    let load = tokio::spawn({
        let ports = ports(&fleet);
        async move { drive(&ports, Duration::from_millis(1500), Load::Mixed(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| redis.restart());
    check(
        &format!("{mode}: Redis restarted"),
        &load.await.unwrap(),
        &bounds,
    );
    hot_and_many(&format!("{mode}: after the restart"), &fleet, &bounds, 6).await;

    // A reload lowers the hot limit while leases are out: every window is
    // within each limit its answers report, and once every instance has
    // the new one, within it.
    let lower = config(&redis.addr(), sync, LOWER);
    bounds.insert(LOWER, printed_bounds(&lower));
    let load = tokio::spawn({
        let ports = ports(&fleet);
        async move { drive(&ports, Duration::from_millis(1200), Load::Mixed(7)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for f in &fleet {
        f.write_config(&lower);
    }
    check(
        &format!("{mode}: a reload to {LOWER}"),
        &load.await.unwrap(),
        &bounds,
    );
    let client = client();
    for f in &fleet {
        let end = Instant::now() + Duration::from_secs(20);
        while check_one(&client, f.http, HOT_KEY, 0, 7)
            .await
            .is_none_or(|(a, _)| a.limit != LOWER)
        {
            assert!(Instant::now() < end, "{mode}: an instance did not reload");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let answers = drive(&ports(&fleet), Duration::from_millis(1300), Load::Mixed(8)).await;
    assert!(answers.iter().all(|a| a.key != HOT_KEY || a.limit == LOWER));
    if let Some(best) = check(
        &format!("{mode}: after a reload to {LOWER}"),
        &answers,
        &bounds,
    ) {
        assert!(
            best > LOWER / 2,
            "{mode}: at most {best} of {LOWER} admitted in a busy window"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_on_one_server() {
    on_one_server(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_on_one_server() {
    on_one_server(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_modes_on_a_cluster() {
    let cluster = RedisCluster::start();
    for (mode, sync) in [
        ("lease", "{mode: lease, duration: 2s}"),
        ("sync", "{mode: sync, interval: 100ms, instances: 4}"),
    ] {
        let text = config(&cluster.url(), sync, HOT);
        let text = text.replace("  backend: redis\n", "  backend: redis\n  mode: cluster\n");
        let bounds = Bounds::from([(HOT, printed_bounds(&text))]);
        let fleet: Vec<Floodgate> = (0..4).map(|_| start(&text)).collect();
        hot_and_many(&format!("cluster, {mode}"), &fleet, &bounds, 0).await;
    }
}

/// `floodgate bench fleet` runs and measures something in every column it
/// fills (its figures are taken on a quiet machine, not here).
#[test]
fn the_fleet_benchmark_prints_its_table() {
    let out = Command::new(bin())
        .args([
            "bench",
            "fleet",
            "--instances",
            "2",
            "--modes",
            "memory,lease,sync",
        ])
        .args([
            "--workloads",
            "hot,keys",
            "--keys",
            "100",
            "--concurrency",
            "8",
        ])
        .args(["--duration", "300ms", "--warmup", "200ms"])
        .output()
        .expect("floodgate bench fleet");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    for row in &rows {
        // case words, then: decisions/s, server µs/d, vs memory, Redis µs/d,
        // calls/d, cmds/d, worst window, windows over, unplaced, fallbacks,
        // errors, p50, p99.
        let n = row.len();
        let num = |i: usize| row[n - 13 + i].parse::<f64>().ok();
        assert!(num(0).is_some_and(|d| d > 0.0), "{text}");
        assert!(num(1).is_some_and(|us| us > 0.0), "{text}");
        let redis = row[0] != "memory,";
        assert_eq!(num(3).is_some(), redis, "{text}");
        assert_eq!(num(4).is_some(), redis, "{text}");
        assert!(row[n - 7].contains('/'), "{text}");
        assert!(num(8).is_some(), "unplaced: {text}");
        assert_eq!(num(9).is_some(), redis, "fallbacks: {text}");
        assert!(num(10).is_some(), "errors: {text}");
    }
}

/// Takes one in-flight unit of `job` on the instance at `port`: its permit
/// when admitted.
async fn acquire(client: &reqwest::Client, port: u16) -> Option<String> {
    let v: serde_json::Value = client
        .post(format!("http://127.0.0.1:{port}/v1/check"))
        .header("content-type", "application/json")
        .body(r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"job","value":"x"}]}]}"#)
        .send()
        .await
        .expect("a check")
        .json()
        .await
        .expect("a JSON answer");
    if !v["allowed"].as_bool().expect("allowed") {
        return None;
    }
    Some(v["permit"].as_str().expect("a permit").to_owned())
}

/// Takes units on the instances in turn until none admits any (each
/// instance's lease spent and Redis granting no more); the permits, with
/// the instance that gave each.
async fn take_all(client: &reqwest::Client, ports: &[u16]) -> Vec<(u16, String)> {
    let mut taken = Vec::new();
    loop {
        let mut any = false;
        for &port in ports {
            for _ in 0..3 {
                if let Some(p) = acquire(client, port).await {
                    taken.push((port, p));
                    any = true;
                }
            }
        }
        if !any {
            return taken;
        }
    }
}

async fn release_all(client: &reqwest::Client, taken: Vec<(u16, String)>) {
    for (port, permit) in taken {
        let body = format!(
            r#"{{"domain":"fleet","descriptors":[{{"entries":[{{"key":"job","value":"x"}}]}}],"permit":"{permit}"}}"#
        );
        let r = client
            .post(format!("http://127.0.0.1:{port}/v1/release"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("a release");
        assert_eq!(r.status().as_u16(), 200);
    }
}

/// An instance killed while holding in-flight units under a lease: the
/// others never get its units while its lease lasts (whatever it had given
/// out or not), get them all back when it ends, and never more than the
/// limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_instances_permits_come_back_when_its_lease_ends() {
    const MAX: usize = 10;
    let redis = Redis::start();
    let text = format!(
        "store:
  backend: redis
  url: {}
  timeout: 500ms
  concurrency_lease: 3s
  sync: {{mode: lease, duration: 500ms}}
domains:
  - domain: fleet
    descriptors:
      - key: job
        rate_limit: {{name: job, algorithm: concurrency, max: {MAX}, on_failure: fail_closed}}
",
        redis.addr()
    );
    let fleet: Vec<Floodgate> = (0..4).map(|_| start(&text)).collect();
    let client = client();
    let a = fleet[0].http;
    for _ in 0..3 {
        assert!(acquire(&client, a).await.is_some(), "the first units");
    }
    let held: serde_json::Value = client
        .post(format!("http://127.0.0.1:{a}/v1/check"))
        .header("content-type", "application/json")
        .body(r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"job","value":"x"}],"hits":0}]}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let leased = held["statuses"][0]["limits"][0]["sync"]["leased"]
        .as_u64()
        .unwrap_or_else(|| panic!("{held}")) as usize;
    fleet[0].signal("KILL");
    let killed = Instant::now();
    let others = ports(&fleet[1..]);
    let lasting = MAX - 3 - leased;
    // While its lease lasts: what it did not hold, and no more.
    let taken = take_all(&client, &others).await;
    if killed.elapsed() < Duration::from_millis(2500) {
        assert_eq!(
            taken.len(),
            lasting,
            "the dead instance held 3 units and {leased} leased of {MAX}"
        );
    }
    assert!(taken.len() <= MAX);
    release_all(&client, taken).await;
    // Its lease ends (its last grant's end plus the permit lease): all
    // units come back, no more.
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let taken = take_all(&client, &others).await;
        let n = taken.len();
        assert!(
            n == lasting || n == MAX,
            "{n} units taken: neither what the dead instance left ({lasting}) nor all ({MAX})"
        );
        release_all(&client, taken).await;
        if n == MAX {
            break;
        }
        assert!(
            Instant::now() < end,
            "the dead instance's units never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
