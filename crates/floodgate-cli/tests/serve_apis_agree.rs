//! The real `floodgate serve` binary says the same numbers on every API:
//! random Floodgate-format rules of every algorithm, random requests; each
//! request is first sent to `POST /v1/check` as a dry run, then for real,
//! alternately over gRPC (Envoy's generated Python client) and `POST /json`.
//! The dry run must announce exactly what the real call gets — code, limit,
//! remaining, the reset in whole seconds rounded up, and the rate limit
//! headers — and no API may report more remaining than its limit.
//!
//! The binary runs on the real clock; limits refill slowly (minutes), and a
//! step during which a window turned (the real call's reset later than the
//! dry run's) is not compared.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use floodgate_testkit::envoy_reference::Rng;
use floodgate_testkit::{Floodgate, http_request, python, workspace_root};
use serde_json::{Value, json};

const SEQUENCES: u64 = 4;
const STEPS: usize = 40;
const KEYS: usize = 4;

/// Envoy's `RateLimitResponse.RateLimit.Unit` numbers.
const UNITS: [&str; 8] = [
    "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK",
];

fn rule(rng: &mut Rng) -> String {
    let n = 1 + rng.below(12);
    let per = *rng.pick(&["1m", "5m", "7m", "1h", "90m"]);
    let b = 1 + rng.below(15);
    match rng.below(7) {
        0 => format!("{{requests: {n}, per: {per}}}"),
        1 => format!("{{unit: minute, requests_per_unit: {n}}}"),
        2 => format!("{{algorithm: sliding_log, requests: {n}, per: {per}}}"),
        3 => format!("{{algorithm: sliding_window, requests: {n}, per: {per}}}"),
        4 => format!("{{algorithm: token_bucket, requests: {n}, per: 1h, burst: {b}}}"),
        5 => format!("{{algorithm: gcra, requests: {n}, per: 1h, burst: {b}}}"),
        _ => format!(
            "{{algorithm: shaper, rate: 6r/m, burst: {}, nodelay: true}}",
            b - 1
        ),
    }
}

fn config(rng: &mut Rng) -> String {
    let mut text = String::from("domains:\n  - domain: api\n    descriptors:\n");
    for k in 0..KEYS {
        let named = if rng.chance(50) {
            format!("name: r{k}, ")
        } else {
            String::new()
        };
        let r = rule(rng);
        let r = format!("{{{named}{}", &r[1..]);
        text.push_str(&format!("      - key: k{k}\n        rate_limit: {r}\n"));
    }
    text
}

/// A request: its descriptors' entries and hits.
fn request(rng: &mut Rng) -> (Vec<(String, String)>, u64) {
    let n = 1 + rng.below(2);
    let mut entries = Vec::new();
    for _ in 0..n {
        let k = rng.below(KEYS as u64);
        let v = *rng.pick(&["a", "b"]);
        entries.push((format!("k{k}"), v.to_owned()));
    }
    let hits = if rng.chance(80) { 1 } else { 2 + rng.below(2) };
    (entries, hits)
}

fn post(port: u16, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http_request(
        port,
        "POST",
        path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .unwrap_or_else(|| panic!("no answer from {path}"));
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {text}: {e}"));
    (status, value)
}

/// The dry run's reset of status `s`, in whole seconds rounded up, as the
/// range the real call may report `elapsed_ms` later.
fn reset_range(s: &Value, elapsed_ms: u64) -> (u64, u64) {
    let ms = s["duration_until_reset_ms"].as_u64().unwrap();
    (
        ms.saturating_sub(elapsed_ms).div_ceil(1000),
        ms.div_ceil(1000),
    )
}

/// A status: over the limit, (requests per unit, unit, name), remaining,
/// reset in seconds.
type StatusNumbers = (bool, Option<(u64, String, String)>, u64, Option<u64>);

/// What one real call reported, in the terms the APIs share.
#[derive(Debug)]
struct Real {
    over: bool,
    statuses: Vec<StatusNumbers>,
    headers: Vec<(String, String)>,
}

fn from_grpc(r: &Value) -> Real {
    let r = &r["response"];
    Real {
        over: r["overall_code"] == 2,
        statuses: r["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["code"] == 2,
                    s["current_limit"].as_array().map(|l| {
                        (
                            l[0].as_u64().unwrap(),
                            UNITS[l[1].as_u64().unwrap() as usize].to_owned(),
                            l[2].as_str().unwrap().to_owned(),
                        )
                    }),
                    s["limit_remaining"].as_u64().unwrap(),
                    s["duration_until_reset"].as_array().map(|d| {
                        assert_eq!(d[1], 0, "whole seconds: {s}");
                        d[0].as_u64().unwrap()
                    }),
                )
            })
            .collect(),
        headers: r["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().into()))
            .collect(),
    }
}

fn from_json(r: &Value) -> Real {
    Real {
        over: r["overallCode"] == "OVER_LIMIT",
        statuses: r["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["code"] == "OVER_LIMIT",
                    s.get("currentLimit").map(|l| {
                        (
                            l["requestsPerUnit"].as_u64().unwrap_or(0),
                            l["unit"].as_str().unwrap().to_owned(),
                            l["name"].as_str().unwrap_or("").to_owned(),
                        )
                    }),
                    s["limitRemaining"].as_u64().unwrap_or(0),
                    s.get("durationUntilReset").map(|d| {
                        let d = d.as_str().unwrap();
                        d.strip_suffix('s')
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_else(|| panic!("not whole seconds: {d}"))
                    }),
                )
            })
            .collect(),
        headers: r["responseHeadersToAdd"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h["key"].as_str().unwrap().into(),
                            h["value"].as_str().unwrap().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Compares the dry run `dry` with the real call `real`; `Ok(false)` when a
/// window turned between them.
fn compare(dry: &Value, real: &Real, elapsed_ms: u64) -> Result<bool, String> {
    let statuses = dry["statuses"].as_array().unwrap();
    if statuses.len() != real.statuses.len() {
        return Err("a different number of statuses".into());
    }
    for (d, (over, limit, remaining, reset)) in statuses.iter().zip(&real.statuses) {
        let want_limit = d["current_limit"].as_object().map(|l| {
            (
                l["requests_per_unit"].as_u64().unwrap(),
                l["unit"].as_str().unwrap().to_owned(),
                l["name"].as_str().unwrap_or("").to_owned(),
            )
        });
        if let Some(r) = reset {
            let (lo, hi) = reset_range(d, elapsed_ms);
            if *r > hi {
                return Ok(false);
            }
            if *r < lo {
                return Err(format!("reset {r} s, the dry run said {lo}..={hi}"));
            }
        } else if d["duration_until_reset_ms"].as_u64().unwrap() >= 1000 && want_limit.is_some() {
            return Err("no reset where the dry run has one".into());
        }
        if (d["code"] == "OVER_LIMIT") != *over
            || want_limit != *limit
            || d["limit_remaining"].as_u64().unwrap() != *remaining
        {
            return Err(format!("status differs: dry run {d}"));
        }
        if let Some((rpu, _, _)) = limit
            && remaining > rpu
        {
            return Err(format!("remaining {remaining} above the limit {rpu}"));
        }
    }
    if (dry["code"] == "OVER_LIMIT") != real.over {
        return Err("the overall code differs".into());
    }
    // The headers describe the status with the least remaining.
    let header = |name: &str| {
        real.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if let Some(remaining) = header("RateLimit-Remaining") {
        let remaining: u64 = remaining.parse().map_err(|e| format!("{remaining}: {e}"))?;
        let limit = header("RateLimit-Limit").ok_or("no RateLimit-Limit")?;
        let first: u64 = limit
            .split(',')
            .next()
            .unwrap()
            .trim()
            .parse()
            .map_err(|e| format!("{limit}: {e}"))?;
        if remaining > first {
            return Err(format!(
                "RateLimit-Remaining {remaining} above RateLimit-Limit {limit}"
            ));
        }
        let least = real
            .statuses
            .iter()
            .filter(|s| s.1.is_some())
            .map(|s| s.2)
            .min();
        if Some(remaining) != least {
            return Err(format!(
                "RateLimit-Remaining {remaining}, statuses' least {least:?}"
            ));
        }
    }
    Ok(true)
}

fn run_sequence(seed: u64) -> Result<usize, String> {
    let mut rng = Rng::new(seed);
    let text = config(&mut rng);
    let server = Floodgate::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &text,
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut driver = Command::new(python())
        .arg(workspace_root().join("crates/floodgate-cli/tests/python/rls_replay.py"))
        .arg(server.grpc_addr())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python");
    let mut input = driver.stdin.take().unwrap();
    let mut output = BufReader::new(driver.stdout.take().unwrap());
    let mut compared = 0;
    let mut log = String::new();
    let result = (|| {
        for step in 0..STEPS {
            let (entries, hits) = request(&mut rng);
            log.push_str(&format!("  {step}: {entries:?} hits {hits}\n"));
            let fail = |what: String| {
                format!("seed {seed} step {step}: {what}\nconfiguration:\n{text}requests:\n{log}")
            };
            let check = json!({
                "domain": "api",
                "descriptors": entries.iter().map(|(k, v)| json!({"entries": [{"key": k, "value": v}]})).collect::<Vec<_>>(),
                "hits": hits,
                "dry_run": true,
            });
            let started = Instant::now();
            let (_, dry) = post(server.http, "/v1/check", &check);
            let real = if step % 2 == 0 {
                let req = json!({
                    "domain": "api",
                    "hits_addend": hits,
                    "descriptors": entries.iter().map(|(k, v)| json!({"entries": [[k, v]], "limit": null, "hits_addend": null})).collect::<Vec<_>>(),
                });
                writeln!(input, "{req}").unwrap();
                input.flush().unwrap();
                let mut line = String::new();
                output.read_line(&mut line).unwrap();
                let v: Value =
                    serde_json::from_str(&line).map_err(|e| fail(format!("{line}: {e}")))?;
                if v.get("error").is_some() {
                    return Err(fail(format!("gRPC failed: {v}")));
                }
                from_grpc(&v)
            } else {
                let req = json!({
                    "domain": "api",
                    "hitsAddend": hits,
                    "descriptors": entries.iter().map(|(k, v)| json!({"entries": [{"key": k, "value": v}]})).collect::<Vec<_>>(),
                });
                let (status, v) = post(server.http, "/json", &req);
                let r = from_json(&v);
                if (status == 429) != r.over {
                    return Err(fail(format!("status {status} for {v}")));
                }
                r
            };
            let elapsed = started.elapsed().as_millis() as u64 + 1;
            match compare(&dry, &real, elapsed) {
                Ok(true) => compared += 1,
                Ok(false) => {}
                Err(e) => {
                    return Err(fail(format!("{e}\ndry run: {dry}\nreal: {real:?}")));
                }
            }
        }
        Ok(compared)
    })();
    let _ = driver.kill();
    let _ = driver.wait();
    result
}

#[test]
fn dry_runs_grpc_and_json_say_the_same_numbers() {
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut compared = 0;
    for i in 0..SEQUENCES {
        let seed = base.wrapping_mul(6_151).wrapping_add(i);
        compared += run_sequence(seed).unwrap_or_else(|e| panic!("{e}"));
    }
    // Only a turning window may leave a step out.
    assert!(
        compared as u64 >= SEQUENCES * STEPS as u64 * 9 / 10,
        "{compared} steps compared"
    );
}
