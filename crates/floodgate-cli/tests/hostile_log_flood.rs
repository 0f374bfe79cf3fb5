//! An HTTP/2 rapid-reset flood (the Python `h2` library, HEADERS then
//! RST_STREAM in a loop, on loopback) against the real binary, `serve`'s
//! gRPC listener and `gateway`'s: h2 logs a WARN line for every connection
//! it closes for too many resets, and those lines are held to the budget
//! of lines from libraries (a few an interval, then one summary of how
//! many were suppressed), so the flood does not flood the log. A normal
//! request is served after it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{
    Floodgate, Gateway, Process, http_request, python, wait_until, workspace_root,
};

use crate::gateway_lifecycle::upstream;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// Connections of the flood, each closed by the server after its first
/// few dozen resets.
const CONNECTIONS: u32 = 60;

/// WARN lines the flood may add: the budget of one interval (5), a
/// second one should the flood outlast an interval on a loaded machine,
/// and their summaries.
const MOST_WARN_LINES: usize = 12;

fn warn_lines(p: &Process) -> usize {
    p.log().lines().filter(|l| l.contains(" WARN ")).count()
}

/// Floods `port`, then checks the WARN lines the flood added to `p`'s log
/// and waits for the summary of those suppressed.
fn flood_and_count(p: &Process, port: u16) {
    let before = warn_lines(p);
    let script = workspace_root().join("crates/floodgate-cli/tests/python/rapid_reset.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(port.to_string())
        .arg(CONNECTIONS.to_string())
        .arg("2000")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The server closes (almost) every connection: h2 logs each.
    let closed: u32 = stdout
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the flood's tally");
    assert!(closed >= CONNECTIONS / 2, "{stdout}");
    let added = warn_lines(p) - before;
    assert!(
        added <= MOST_WARN_LINES,
        "{added} WARN lines from a flood of {CONNECTIONS} connections:\n{}",
        p.log()
    );
    // Within an interval (10 s) the suppressed lines are counted in one.
    let summarised = wait_until(Duration::from_secs(30), || {
        p.log().contains("log lines from libraries suppressed")
    });
    assert!(summarised, "no summary:\n{}", p.log());
}

#[test]
fn a_rapid_reset_flood_against_serve_logs_a_bounded_number_of_lines() {
    let rules = "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {requests: 1000, per: 1m}\n";
    let serve = Floodgate::start(bin(), rules, &[], &[]);
    flood_and_count(&serve, serve.grpc);
    let body = br#"{"domain": "api", "descriptors": [{"entries": {"user": "a"}}]}"#;
    let answer = http_request(
        serve.http,
        "POST",
        "/v1/check",
        Some("application/json"),
        body,
    );
    assert!(matches!(answer, Some((200, _))), "{answer:?}");
}

#[test]
fn a_rapid_reset_flood_against_the_gateway_logs_a_bounded_number_of_lines() {
    let up = upstream();
    let config = format!(
        "gateway:\n  upstream: http://{}\nserver: {{reload_interval: 0}}\n",
        up.addr
    );
    let gw = Gateway::start(bin(), &config, &["--allow-empty-config"], &[]);
    flood_and_count(&gw, gw.port);
    let answer = http_request(gw.port, "GET", "/", None, b"");
    assert!(matches!(answer, Some((200, _))), "{answer:?}");
}
