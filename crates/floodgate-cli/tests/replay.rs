//! `floodgate replay` end to end: a session recorded by the real gateway
//! (its JSON access log) replayed through the same configuration gives
//! the gateway's decisions request by request — rejections, delays and
//! their length; and the command's inputs and outputs (standard input,
//! gzip, every output file, errors).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use floodgate_testkit::{Gateway, wait_until};

use crate::gateway_lifecycle::upstream;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// Per client address: 4 a second (sliding window); `/login`: 3 a
/// minute per client; `/api/...`: nginx's shaper at 10r/s, burst 4, per
/// client (delays).
fn session_config(upstream: SocketAddr) -> String {
    format!(
        r#"gateway:
  access_log: true
  upstream: http://{upstream}
http:
  domain: edge
  routes: ["/api/{{*rest}}", "/login"]
  descriptors:
    - [client_ip]
    - [client_ip, route]
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {{name: per-ip, algorithm: sliding_window, requests_per_unit: 4, unit: second}}
        descriptors:
          - key: route
            value: /login
            rate_limit: {{name: login, algorithm: fixed_window, requests_per_unit: 3, unit: minute}}
          - key: route
            value: "/api/{{*rest}}"
            rate_limit: {{name: api, algorithm: shaper, rate: 10r/s, burst: 4}}
server: {{log: {{level: warn, format: json}}, reload_interval: 0}}
"#
    )
}

/// One GET from source address `from`: the status and the time to the
/// response head.
fn get_from(from: &str, port: u16, path: &str) -> (u16, Duration) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    let remote: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    if socket.connect(&remote.into()).is_err() {
        return (0, started.elapsed());
    }
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return (0, started.elapsed());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, took)
}

/// The schedule: (ms after the start, client, path).
fn schedule() -> Vec<(u64, &'static str, &'static str)> {
    let clients = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let paths = ["/api/orders", "/login", "/", "/api/items/7?x=1"];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut t = 0;
    (0..60)
        .map(|_| {
            let r = next();
            // Bursts and pauses: 0 to 90 ms apart, in steps of 30 ms.
            t += (r % 4) * 30;
            let client = clients[(r >> 8) as usize % 3];
            let path = paths[(r >> 16) as usize % paths.len()];
            (t, client, path)
        })
        .collect()
}

/// The gateway's access lines (JSON) in its log.
fn access_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "floodgate::access")
        .collect()
}

/// Records one session and replays it; the differences, if any.
fn attempt(dir: &Path) -> Result<usize, String> {
    let up = upstream();
    let config = session_config(up.addr);
    let gw = Gateway::start(bin(), &config, &[], &[]);
    let port = gw.port;
    let plan = schedule();
    let start = Instant::now() + Duration::from_millis(100);
    let threads: Vec<_> = plan
        .iter()
        .map(|&(at, from, path)| {
            std::thread::spawn(move || {
                let due = start + Duration::from_millis(at);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                get_from(from, port, path)
            })
        })
        .collect();
    let seen: Vec<(u16, Duration)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(seen.iter().all(|s| s.0 != 0), "requests failed: {seen:?}");
    let mut lines = Vec::new();
    let logged = wait_until(Duration::from_secs(10), || {
        lines = access_lines(&gw.log());
        lines.len() >= plan.len()
    });
    assert!(logged, "access lines missing; log:\n{}", gw.log());
    // The access lines alone, as an operator would keep them.
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    let log = dir.join("access.jsonl");
    std::fs::write(&log, &text).unwrap();
    let cfg = dir.join("gateway.yaml");
    std::fs::write(&cfg, &config).unwrap();
    let decisions = dir.join("decisions.jsonl");
    let out = Command::new(bin())
        .arg("replay")
        .args(["--config", cfg.to_str().unwrap()])
        .args(["--log", log.to_str().unwrap()])
        .args(["--format", "jsonl"])
        .args(["--decisions", decisions.to_str().unwrap()])
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Vec<serde_json::Value> = std::fs::read_to_string(&decisions)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        replayed.len(),
        lines.len(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut problems = Vec::new();
    let mut delayed = 0;
    let mut denied = 0;
    for d in &replayed {
        let n = d["line"].as_u64().unwrap() as usize;
        let live = &lines[n - 1];
        let status = live["status"].as_u64().unwrap();
        let micros = live["micros"].as_u64().unwrap();
        let outcome = d["outcome"].as_str().unwrap();
        let delay_ms = d["delay_ms"].as_f64().unwrap();
        let want_status = if outcome == "denied" { 429 } else { 200 };
        if status != want_status {
            problems.push(format!(
                "line {n} ({} {}): the gateway answered {status}, the replay says {outcome} (rule {})",
                live["client"], live["path"], d["rule"]
            ));
        }
        match outcome {
            "delayed" => {
                delayed += 1;
                // The gateway's time includes the wait: never less, and
                // not much more on a loaded machine.
                let waited = micros as f64 / 1000.0;
                if waited < delay_ms || waited > delay_ms + 500.0 {
                    problems.push(format!(
                        "line {n}: replay delays {delay_ms} ms, the gateway took {waited} ms"
                    ));
                }
            }
            "denied" => denied += 1,
            _ => {}
        }
    }
    if delayed == 0 || denied == 0 {
        problems.push(format!(
            "the session should have delays and rejections: {delayed} delayed, {denied} denied"
        ));
    }
    if problems.is_empty() {
        Ok(replayed.len())
    } else {
        Err(problems.join("\n"))
    }
}

/// A request the client sent late on a loaded machine changes nothing (the
/// log has its real arrival); only an arrival within microseconds of a
/// limit's boundary could be decided differently, so a session is tried up
/// to three times: a real difference fails every time.
#[test]
fn a_recorded_gateway_session_replays_to_the_same_decisions() {
    let mut last = String::new();
    for n in 1..=3 {
        let dir = tempfile::tempdir().unwrap();
        match attempt(dir.path()) {
            Ok(count) => {
                eprintln!("{count} requests agree (attempt {n})");
                return;
            }
            Err(e) => {
                eprintln!("attempt {n}:\n{e}");
                last = e;
            }
        }
    }
    panic!("every attempt disagreed; the last:\n{last}");
}

const SMALL: &str = r#"
http:
  domain: d
  descriptors: [[client_ip]]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: fixed_window, requests_per_unit: 1, unit: minute}
"#;

/// Standard input, gzip, and every output file.
#[test]
fn reads_standard_input_and_writes_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("small.yaml");
    std::fs::write(&cfg, SMALL).unwrap();
    let log = "192.0.2.1 - - [01/May/2024:12:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"ua\"\n\
               192.0.2.1 - - [01/May/2024:12:00:01 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"ua\"\n\
               not a line\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(log.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let path = |n: &str| dir.path().join(n).display().to_string();
    let mut child = Command::new(bin())
        .arg("replay")
        .args(["--config", &cfg.display().to_string()])
        .args(["--log", "-"])
        .args(["--report", &path("r.html"), "--json", &path("r.json")])
        .args(["--csv", &path("r.csv"), "--decisions", &path("d.jsonl")])
        .args(["--rejected", &path("rejected.txt"), "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&gz).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Replayed 3 lines of <stdin>"), "{stdout}");
    assert!(stdout.contains("<stdin>:3: column 1"), "{stdout}");
    let decisions = std::fs::read_to_string(path("d.jsonl")).unwrap();
    assert_eq!(decisions.lines().count(), 2);
    assert!(
        decisions
            .lines()
            .nth(1)
            .unwrap()
            .contains("\"outcome\":\"denied\"")
    );
    assert!(
        std::fs::read_to_string(path("r.html"))
            .unwrap()
            .contains("<svg")
    );
    assert!(
        std::fs::read_to_string(path("r.csv"))
            .unwrap()
            .contains("small,per-ip,d,")
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path("r.json")).unwrap()).unwrap();
    assert_eq!(json["candidates"][0]["denied"], 1);
    assert!(
        std::fs::read_to_string(path("rejected.txt"))
            .unwrap()
            .contains(":3: ")
    );
}

/// Bad arguments and files are refused with a specific message.
#[test]
fn refuses_what_it_cannot_replay() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("small.yaml");
    std::fs::write(&cfg, SMALL).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("replay")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let c = cfg.display().to_string();
    assert!(run(&["--config", &c, "--log", "/nonexistent/x.log"]).contains("/nonexistent/x.log"));
    assert!(run(&["--config", &c, "--format", "apache"]).contains("unknown log format"));
    assert!(run(&["--config", &c, "--format", "nginx:$status"]).contains("time"));
    assert!(run(&["--config", &c, "--compare-algorithms=magic"]).contains("unknown algorithm"));
    assert!(run(&["--config", "/nonexistent.yaml"]).contains("nonexistent.yaml"));
}

/// Keyed on the user agent, so that a client's text is a key the summary
/// lists.
const BY_USER_AGENT: &str = r#"
http:
  domain: d
  descriptors: [[{header: {name: user-agent, key: ua}}]]
domains:
  - domain: d
    descriptors:
      - key: ua
        rate_limit: {name: per-ua, algorithm: fixed_window, requests_per_unit: 1, unit: minute}
"#;

/// Whether `text` (what a terminal would be given) holds a control
/// character other than the line ends it is made of, or is not UTF-8.
fn control_in(text: &[u8]) -> Option<String> {
    let Ok(s) = std::str::from_utf8(text) else {
        return Some("not UTF-8".into());
    };
    s.char_indices()
        .find(|&(_, c)| c.is_control() && c != '\n')
        .map(|(i, c)| format!("{c:?} at byte {i}"))
}

/// A log whose paths, user agents and malformed lines carry terminal
/// escape sequences (ESC `[2J`, an OSC title, CR, a LF inside a field,
/// C1's CSI, DEL, raw and as JSON escapes): nothing printed, nor the
/// report nor the list of rejected lines, holds a control character; the
/// key is shown escaped.
#[test]
fn escape_sequences_in_a_log_reach_no_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ua.yaml");
    std::fs::write(&cfg, BY_USER_AGENT).unwrap();
    let ua = r#"\u001b[2J\u001b]0;owned\u0007\r\nX\u009b31m\u007f"#;
    let line = |t: u32, path: &str| {
        format!(
            r#"{{"time": "2024-05-01T12:00:0{t}Z", "method": "GET", "path": "{path}", "client": "192.0.2.1", "status": 200, "headers": {{"user-agent": "{ua}"}}}}"#
        )
    };
    let mut log = Vec::new();
    for (t, path) in [(0, r"/\u001b[2J\r"), (1, r"/\u009bH\n")] {
        log.extend_from_slice(line(t, path).as_bytes());
        log.push(b'\n');
    }
    // Malformed lines, raw: ESC, CR, C1 as UTF-8 and as a lone byte, DEL.
    log.extend_from_slice(b"\x1b[2J\x1b]0;owned\x07 \rnot json \xc2\x9b31m \x9b \x7f\n");
    log.extend_from_slice(b"{\"time\": \"\x1b[2J\r\xc2\x9b\"}\n");
    let path = |n: &str| dir.path().join(n).display().to_string();
    std::fs::write(path("hostile.log"), &log).unwrap();
    let out = Command::new(bin())
        .arg("replay")
        .args(["--config", &cfg.display().to_string()])
        .args(["--log", &path("hostile.log"), "--format", "jsonl"])
        .args([
            "--report",
            &path("r.html"),
            "--rejected",
            &path("rejected.txt"),
        ])
        .arg("--quiet")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout:?}{stderr:?}");
    for (what, text) in [
        ("stdout", out.stdout.clone()),
        ("stderr", out.stderr.clone()),
        (
            "the rejected lines",
            std::fs::read(path("rejected.txt")).unwrap(),
        ),
        ("the report", std::fs::read(path("r.html")).unwrap()),
    ] {
        assert_eq!(
            control_in(&text),
            None,
            "{what}: {:?}",
            String::from_utf8_lossy(&text)
        );
    }
    assert!(
        stdout.contains(r"\x1b[2J\x1b]0;owned\x07\r\nX\u{9b}31m\x7f"),
        "{stdout}"
    );
    assert!(stdout.contains("2 malformed"), "{stdout}");
    assert!(
        stdout.contains(r"\x1b[2J\x1b]0;owned\x07 \rnot json \u{9b}31m"),
        "{stdout}"
    );
}
