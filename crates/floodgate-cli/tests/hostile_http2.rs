//! The gRPC listener of `floodgate serve` under hostile HTTP/2 clients
//! (`python/h2_hostile.py`, raw frames on loopback): a bad preface,
//! oversized frames, CONTINUATION and control frame floods, bad HPACK,
//! rapid resets, flow control overruns, stream id games, too many
//! streams, malformed requests and a body that never ends. Each scenario
//! is held to what RFC 9113 requires of a server — loosely where the RFC
//! lets it choose (a stream error or the whole connection) — and after
//! each a correct call on a new connection is answered and the process
//! lives; at the end its peak resident memory is bounded.
//!
//! [`battery`] takes the server's extra arguments, so that every HTTP/2
//! server `serve` can run meets the same clients.

use std::path::Path;
use std::process::Command;

use floodgate_testkit::{Floodgate, python, workspace_root};
use serde_json::Value;

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1000000, unit: day}\n";

// Error codes (RFC 9113 §7).
const PROTOCOL_ERROR: u64 = 0x1;
const FLOW_CONTROL_ERROR: u64 = 0x3;
const STREAM_CLOSED: u64 = 0x5;
const FRAME_SIZE_ERROR: u64 = 0x6;
const COMPRESSION_ERROR: u64 = 0x9;

/// The codes a GOAWAY for an HPACK decoding error may carry: RFC 9113
/// §4.3 requires COMPRESSION_ERROR; hyper's server (h2 0.4) sends
/// PROTOCOL_ERROR, and closes the connection as it must.
const HPACK_ERROR_CODES: [u64; 2] = [COMPRESSION_ERROR, PROTOCOL_ERROR];

/// The peak resident memory the process may reach over the battery: the
/// floods hold at most a few MiB each when a server bounds what it
/// buffers.
const MOST_RESIDENT: u64 = 200 << 20;

/// `RateLimitResponse.Code.OK`.
const OK: u64 = 1;

/// What the script saw on one connection.
struct Seen<'a>(&'a Value);

impl Seen<'_> {
    fn closed(&self) -> bool {
        self.0["closed"].as_bool().unwrap_or(false)
    }

    fn goaway(&self) -> Option<u64> {
        self.0["goaway"].as_u64()
    }

    fn field(&self, name: &str) -> u64 {
        self.0[name].as_u64().unwrap_or(0)
    }

    /// The value `list` (`[[stream, value], ...]`) holds for `stream`.
    fn of(&self, list: &str, stream: u64) -> Option<u64> {
        self.0[list]
            .as_array()?
            .iter()
            .find_map(|pair| (pair[0].as_u64() == Some(stream)).then(|| pair[1].as_u64())?)
    }

    /// Whether the server reset `stream` with `code`.
    fn reset(&self, stream: u64, code: u64) -> bool {
        self.0["resets"].as_array().is_some_and(|r| {
            r.iter()
                .any(|p| p[0].as_u64() == Some(stream) && p[1].as_u64() == Some(code))
        })
    }

    /// Whether the server reset `stream`, whatever the code.
    fn reset_any(&self, stream: u64) -> bool {
        self.0["resets"]
            .as_array()
            .is_some_and(|r| r.iter().any(|p| p[0].as_u64() == Some(stream)))
    }

    /// Whether `stream` got a decision (grpc-status 0).
    fn decided(&self, stream: u64) -> bool {
        self.of("grpc", stream) == Some(0)
    }

    /// Whether `stream` got an error answer: an HTTP error status, or a
    /// gRPC status other than OK.
    fn error_answer(&self, stream: u64) -> bool {
        self.of("http", stream).is_some_and(|s| s >= 400)
            || self.of("grpc", stream).is_some_and(|s| s != 0)
    }

    /// Whether the connection ended, with a GOAWAY of `code` if any.
    fn closed_with(&self, codes: &[u64]) -> bool {
        self.closed() && self.goaway().is_none_or(|c| codes.contains(&c))
    }
}

/// `Err(what)` unless `holds`.
fn ensure(holds: bool, what: &str) -> Result<(), String> {
    if holds { Ok(()) } else { Err(what.to_owned()) }
}

/// Runs `scenario` of the script with `python` against `port`: what it
/// saw.
fn run(python: &Path, port: u16, scenario: &str) -> Value {
    let script = workspace_root().join("crates/floodgate-cli/tests/python/h2_hostile.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(port.to_string())
        .arg(scenario)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{scenario}: the script failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{scenario}: {e}: {stdout}"))
}

/// Each case of a scenario of several connections, checked by `check`.
fn every_case(v: &Value, check: fn(&Seen) -> Result<(), String>) -> Result<(), String> {
    let cases = v["cases"].as_object().ok_or("no cases")?;
    for (name, case) in cases {
        check(&Seen(case)).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

fn valid_call(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(s.decided(1), "no grpc-status 0")?;
    ensure(s.of("ok", 1) == Some(OK), "not an OK decision")
}

fn bad_preface(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(s.closed(), "the connection stayed open")?;
    ensure(s.field("answered") == 0, "something was answered")
}

fn oversized_frame(v: &Value) -> Result<(), String> {
    ensure(
        Seen(v).closed_with(&[FRAME_SIZE_ERROR]),
        "not closed with FRAME_SIZE_ERROR",
    )
}

fn continuation_flood(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(s.closed(), "the connection stayed open")?;
    ensure(
        s.field("sent") < s.field("total"),
        "every CONTINUATION was taken",
    )
}

/// A header list above the server's limit (RFC 9113 §10.5.1 lets it
/// reset the stream, answer 431, or end the connection).
fn header_list_too_large(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(!s.decided(1), "the call was decided")?;
    ensure(
        s.closed() || s.reset_any(1) || s.error_answer(1),
        "the stream was neither refused nor answered with an error, and the connection stayed open",
    )
}

fn bad_hpack(v: &Value) -> Result<(), String> {
    every_case(v, |s| {
        ensure(!s.decided(1), "the call was decided")?;
        ensure(
            s.closed_with(&HPACK_ERROR_CODES),
            "not closed with COMPRESSION_ERROR",
        )
    })
}

/// 10 000 streams opened and reset on one connection: the server closes
/// it, or handles every stream and answers a call on it after them.
fn rapid_reset(v: &Value) -> Result<(), String> {
    ensure(
        v["closed"] == true || v["after"] == 0,
        "neither closed nor a call answered after the resets",
    )
}

/// 100 000 control frames sent without reading: the server closes the
/// connection, stops reading (the client's writes block), or answers
/// every one once the client reads.
fn control_flood(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    let throttled = v["throttled"].as_bool().unwrap_or(false);
    ensure(
        s.closed() || throttled || s.field("acks") >= s.field("sent"),
        "neither closed, throttled, nor every frame answered",
    )
}

fn window_overflow(v: &Value) -> Result<(), String> {
    let c = Seen(&v["cases"]["connection"]);
    ensure(
        c.goaway() == Some(FLOW_CONTROL_ERROR),
        "connection window: no GOAWAY FLOW_CONTROL_ERROR",
    )?;
    let s = Seen(&v["cases"]["stream"]);
    ensure(
        s.reset(1, FLOW_CONTROL_ERROR) || s.goaway() == Some(FLOW_CONTROL_ERROR),
        "stream window: no FLOW_CONTROL_ERROR",
    )
}

/// DATA beyond the stream's window in one burst: FLOW_CONTROL_ERROR, or
/// the connection closed — or the call refused for its size, by a server
/// that consumed the body and granted window as it came (hyper's, which
/// holds a stream to 65 535 octets until its SETTINGS are acknowledged,
/// always answers FLOW_CONTROL_ERROR).
fn data_beyond_window(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(!s.decided(1), "the call was decided")?;
    ensure(
        s.reset(1, FLOW_CONTROL_ERROR) || s.closed_with(&[FLOW_CONTROL_ERROR]) || s.error_answer(1),
        "neither FLOW_CONTROL_ERROR nor an error answer",
    )
}

fn stream_id_games(v: &Value) -> Result<(), String> {
    let protocol = |case: &str, stream| {
        let s = Seen(&v["cases"][case]);
        ensure(!s.decided(stream), &format!("{case}: the call was decided"))?;
        ensure(
            s.goaway() == Some(PROTOCOL_ERROR),
            &format!("{case}: no GOAWAY PROTOCOL_ERROR"),
        )
    };
    protocol("even", 2)?;
    protocol("decreasing", 3)?;
    protocol("data_on_idle", 3)?;
    let s = Seen(&v["cases"]["headers_on_closed"]);
    ensure(
        v["cases"]["headers_on_closed"]["first_answered"] == true,
        "headers_on_closed: the first call was not answered",
    )?;
    ensure(
        matches!(s.goaway(), Some(PROTOCOL_ERROR | STREAM_CLOSED)) || s.reset(1, STREAM_CLOSED),
        "headers_on_closed: neither PROTOCOL_ERROR nor STREAM_CLOSED",
    )
}

/// More streams than SETTINGS_MAX_CONCURRENT_STREAMS, held open: each
/// beyond the limit refused (REFUSED_STREAM or PROTOCOL_ERROR), or the
/// connection ended.
fn too_many_streams(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(
        s.closed() || s.goaway().is_some() || s.field("refused") == s.field("excess"),
        "the streams beyond the limit were not all refused",
    )?;
    ensure(
        s.field("answered_beyond") == 0,
        "a stream beyond the limit was answered",
    )
}

fn zero_length_flood(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(
        s.closed() || s.field("answered") == 1,
        "neither closed nor the call answered",
    )
}

fn malformed_requests(v: &Value) -> Result<(), String> {
    every_case(v, |s| {
        ensure(!s.decided(1), "the call was decided")?;
        ensure(
            s.reset(1, PROTOCOL_ERROR) || s.goaway() == Some(PROTOCOL_ERROR) || s.error_answer(1),
            "neither PROTOCOL_ERROR nor an error answer",
        )
    })
}

/// `grpc-timeout: 200m` on a call whose body never ends.
fn half_open_body(v: &Value) -> Result<(), String> {
    let s = Seen(v);
    ensure(s.of("grpc", 1) == Some(4), "not DEADLINE_EXCEEDED")?;
    let elapsed = s.field("elapsed_ms");
    ensure(
        (190..3_000).contains(&elapsed),
        &format!("answered after {elapsed} ms, not at the 200 ms deadline"),
    )
}

type Check = fn(&Value) -> Result<(), String>;

/// Every scenario of the script and what a server must do under it.
const SCENARIOS: &[(&str, Check)] = &[
    ("valid_call", valid_call),
    ("bad_preface", bad_preface),
    ("oversized_frame", oversized_frame),
    ("continuation_flood", continuation_flood),
    ("header_list_too_large", header_list_too_large),
    ("bad_hpack", bad_hpack),
    ("rapid_reset", rapid_reset),
    ("ping_flood", control_flood),
    ("settings_flood", control_flood),
    ("window_overflow", window_overflow),
    ("data_beyond_window", data_beyond_window),
    ("stream_id_games", stream_id_games),
    ("too_many_streams", too_many_streams),
    ("zero_length_flood", zero_length_flood),
    ("malformed_requests", malformed_requests),
    ("half_open_body", half_open_body),
];

/// The value of `field` (`State:`, `VmHWM:`) in `/proc/PID/status`.
fn proc_status(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_owned())
}

/// The peak resident size of the process (`VmHWM`), in bytes.
fn peak_resident(pid: u32) -> u64 {
    proc_status(pid, "VmHWM:")
        .and_then(|v| v.strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Whether the process runs (not exited, not a zombie).
fn alive(pid: u32) -> bool {
    proc_status(pid, "State:").is_some_and(|s| !s.starts_with('Z'))
}

/// Starts `floodgate serve` (rules in memory) with `extra_args`, runs
/// every scenario against its gRPC port, checking after each that a
/// correct call on a new connection is answered and the process lives,
/// then that its peak resident memory stayed under [`MOST_RESIDENT`].
/// Panics with every failure, the observations and the server's log.
fn battery(extra_args: &[&str]) {
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let serve = Floodgate::start(bin, CONFIG, extra_args, &[]);
    // Found (and its packages checked) once: that takes a second.
    let python = python();
    let mut failures = Vec::new();
    for (name, check) in SCENARIOS {
        let seen = run(&python, serve.grpc, name);
        if let Err(e) = check(&seen) {
            failures.push(format!("{name}: {e}; observed {seen}"));
        }
        let after = run(&python, serve.grpc, "valid_call");
        if !alive(serve.pid()) {
            failures.push(format!("{name}: the process died"));
            break;
        }
        if let Err(e) = valid_call(&after) {
            failures.push(format!(
                "{name}: no call answered after it: {e}; observed {after}"
            ));
        }
    }
    let peak = peak_resident(serve.pid());
    eprintln!("{extra_args:?}: peak resident memory {} MiB", peak >> 20);
    if peak >= MOST_RESIDENT {
        failures.push(format!("peak resident memory {} MiB", peak >> 20));
    }
    assert!(
        failures.is_empty(),
        "{extra_args:?}:\n{}\nthe server's log:\n{}",
        failures.join("\n"),
        serve.log()
    );
}

#[test]
fn the_hyper_server_survives_hostile_http2_clients() {
    battery(&[]);
}

#[test]
fn the_own_http2_server_survives_hostile_http2_clients() {
    battery(&["--grpc-http2", "direct"]);
}
