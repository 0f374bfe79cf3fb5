//! The real `floodgate serve` binary against the reference model of
//! envoyproxy/ratelimit (`floodgate_testkit::envoy_reference`), through
//! Envoy's generated Python gRPC client: random envoyproxy/ratelimit files
//! loaded as they are, random request sequences, every field of every
//! answer compared, in reference mode
//! (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`) with the environment
//! variables that service reads.
//!
//! The binary runs on the real clock: limits are of a minute or more, each
//! sequence runs clear of a minute boundary (every longer window's
//! boundaries are minute boundaries), and a `duration_until_reset` is
//! checked against the seconds the call took. The in-process differential
//! test (`floodgate-server`) covers every unit at controlled times.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_testkit::envoy_reference::{
    self as reference, Config, Failure, Request, Requests, Rng, Service, Settings, Shape,
    generate::LONG_UNITS,
};
use floodgate_testkit::{Floodgate, python, workspace_root};
use serde_json::{Value, json};

const SEQUENCES: u64 = 6;
const STEPS: usize = 30;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Returns once at least `margin` seconds are left in the current minute.
fn clear_of_minute(margin: f64) {
    let left = 60.0 - unix_now() % 60.0;
    if left < margin {
        std::thread::sleep(Duration::from_secs_f64(left + 0.05));
    }
}

fn request_json(r: &Request) -> Value {
    json!({
        "domain": r.domain,
        "hits_addend": r.hits_addend,
        "descriptors": r.descriptors.iter().map(|d| json!({
            "entries": d.entries.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "limit": d.limit.map(|(rpu, unit)| json!([rpu, unit])),
            "hits_addend": d.hits_addend,
        })).collect::<Vec<_>>(),
    })
}

/// The model's response as the driver writes Floodgate's, with every
/// `duration_until_reset` (and the reset header) as the range of values the
/// reference takes between the two instants in whole seconds.
fn expected(r: &reference::Response, elapsed: i64) -> Value {
    json!({
        "overall_code": r.overall_code.number(),
        "statuses": r.statuses.iter().map(|s| json!({
            "code": s.code.number(),
            "current_limit": s.current_limit.as_ref().map(|l| json!([l.requests_per_unit, l.unit, l.name])),
            "limit_remaining": s.limit_remaining,
            "duration_until_reset": s.duration_until_reset.map(|d| json!([[d - elapsed, d], 0])),
        })).collect::<Vec<_>>(),
        "headers": r.headers.iter().enumerate().map(|(i, (k, v))| {
            if i == 2 {
                let d: i64 = v.parse().unwrap();
                json!([k, [d - elapsed, d]])
            } else {
                json!([k, v])
            }
        }).collect::<Vec<_>>(),
    })
}

/// Whether `actual` matches `expected`, where a `[lo, hi]` pair in
/// `expected` stands for any number (or numeric string) in that range.
fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Array(range), n)
            if range.len() == 2 && range.iter().all(Value::is_i64) && !n.is_array() =>
        {
            let x = n
                .as_i64()
                .or_else(|| n.as_str().and_then(|s| s.parse().ok()));
            let (lo, hi) = (range[0].as_i64().unwrap(), range[1].as_i64().unwrap());
            x.is_some_and(|x| lo <= x && x <= hi)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| matches(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| matches(v, w)))
        }
        (a, b) => a == b,
    }
}

/// One configuration, served by the binary: `Ok(true)` when every answer
/// was compared, `Ok(false)` when a minute ended during the sequence (or
/// the reference refused the configuration, compared in process);
/// `Err` describes the first difference.
fn run_sequence(seed: u64) -> Result<bool, String> {
    let mut rng = Rng::new(seed);
    let shape = Shape {
        units: LONG_UNITS,
        // The Python `xds-protos` package carries no `is_negative_hits`
        // (serve_negative_hits sends them through the Rust client).
        negative: 0,
        ..Shape::default()
    };
    let files = reference::generate::config(&mut rng, &shape);
    let Ok(config) = Config::load(&files, false) else {
        // Refusals are compared in process (floodgate-server).
        return Ok(false);
    };
    let dir = tempfile::tempdir().unwrap();
    for (i, f) in files.iter().enumerate() {
        std::fs::write(dir.path().join(format!("f{i}.yaml")), f.to_yaml()).unwrap();
    }
    let headers = rng.chance(60);
    let shadow = rng.chance(10);
    let mut env = vec![("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false")];
    if headers {
        env.push(("LIMIT_RESPONSE_HEADERS_ENABLED", "true"));
    }
    if shadow {
        env.push(("SHADOW_MODE", "true"));
    }
    let server = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &crate::serve_support::envoy_directory(dir.path()),
        &[],
        &env,
    );
    let settings = Settings {
        global_shadow_mode: shadow,
        headers: headers.then(|| {
            (
                "RateLimit-Limit".to_owned(),
                "RateLimit-Remaining".to_owned(),
                "RateLimit-Reset".to_owned(),
            )
        }),
        ..Settings::default()
    };
    let mut service = Service::new(config, settings);
    let mut driver = Driver(
        Command::new(python())
            .arg(workspace_root().join("crates/floodgate-cli/tests/python/rls_replay.py"))
            .arg(server.grpc_addr())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python"),
    );
    let mut input = driver.0.stdin.take().unwrap();
    let mut output = BufReader::new(driver.0.stdout.take().unwrap());
    let mut requests = Requests::default();
    let mut log = String::new();
    clear_of_minute(3.0);
    let minute = (unix_now() / 60.0) as i64;
    for step in 0..STEPS {
        let request = requests.next(&mut rng, &files, &shape);
        writeln!(input, "{}", request_json(&request)).unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        let actual: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("driver output {line:?}: {e}\nserver log:\n{}", server.log())
        });
        let before = actual["before"].as_f64().unwrap() as i64;
        let after = actual["after"].as_f64().unwrap() as i64;
        if after / 60 != minute {
            // A window may have ended during the sequence: inconclusive.
            return Ok(false);
        }
        log.push_str(&format!("  {step}: {request:?}\n"));
        let fail = |what: String| {
            Err(format!(
                "seed {seed} step {step}: {what}\nrequests:\n{log}configuration:\n{}",
                files
                    .iter()
                    .map(|f| f.to_yaml() + "---\n")
                    .collect::<String>()
            ))
        };
        match service.should_rate_limit(&request, before) {
            Ok(r) => {
                let want = expected(&r, after - before);
                if !matches(&want, &actual["response"]) {
                    return fail(format!("reference {want}\nfloodgate {actual}"));
                }
            }
            Err(Failure::Service(_) | Failure::Crash(_)) => {
                if actual["error"] != "INVALID_ARGUMENT" {
                    return fail(format!(
                        "the reference refuses it, floodgate answers {actual}"
                    ));
                }
            }
            Err(Failure::Redis(e)) => return fail(format!("the generator met a Redis error: {e}")),
        }
        if let Some(k) = service.shared_keys().first() {
            return fail(format!(
                "the generator met a documented counter collision ({k})"
            ));
        }
    }
    Ok(true)
}

/// The Python driver, stopped and awaited however the sequence ends.
struct Driver(std::process::Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_binary_answers_as_envoyproxy_ratelimit_over_grpc() {
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut compared = 0;
    for i in 0..SEQUENCES * 3 {
        let seed = base.wrapping_mul(7_919).wrapping_add(i);
        match run_sequence(seed) {
            Ok(true) => compared += 1,
            Ok(false) => {}
            Err(e) => panic!("{e}"),
        }
        if compared == SEQUENCES {
            return;
        }
    }
    panic!("only {compared} of {SEQUENCES} sequences could be compared");
}
