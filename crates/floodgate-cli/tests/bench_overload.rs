//! `floodgate bench overload`: the real gateway, with the adaptive
//! concurrency limit and without it, in front of the capacity-limited
//! bench upstream under open-loop load at twice its capacity. The bounds
//! are loose enough for a loaded two-core machine and a debug build; the
//! figures of a quiet machine are in docs/benchmarks.md.

use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["bench", "overload"])
        .args(args)
        .output()
        .expect("floodgate bench overload")
}

/// The JSON line of the run at `offered` with the limiter `on` or off.
fn run(runs: &[Value], offered: f64, on: bool) -> &Value {
    runs.iter()
        .find(|r| r["offered"] == offered && r["limiter"] == on && r["baseline"] == false)
        .unwrap_or_else(|| panic!("no run at {offered}× with the limiter {on}: {runs:?}"))
}

/// At twice the capacity (8 servers × 50 ms: 160 requests a second, few
/// enough that a debug gateway on a busy machine keeps up), the adaptive
/// limit keeps most of the capacity doing useful work at a latency near
/// the unloaded one; without it the upstream's queue grows until every
/// request waits past the client's timeout.
#[test]
fn the_adaptive_limit_keeps_goodput_at_twice_the_capacity() {
    let out = bench(&[
        "--servers",
        "8",
        "--service",
        "50ms",
        "--loads",
        "2",
        // Started near the upstream's concurrency and learning from fewer
        // samples, the limit settles within the warm-up at this rate.
        "--adaptive",
        "{initial: 8, min_samples: 30}",
        "--warmup",
        "6s",
        "--duration",
        "4s",
        "--timeout",
        "1s",
        "--json",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let runs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let seen = format!("{stdout}\n{stderr}");
    let (on, off) = (run(&runs, 2.0, true), run(&runs, 2.0, false));
    let num = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {seen}"));
    assert!(num(on, "goodput") >= 0.6, "{seen}");
    // Admitted requests never near the timeout the collapse reaches (a
    // ratio to the unloaded p99 moves with a busy machine's moments: the
    // quiet machine's ratio is in docs/benchmarks.md).
    assert!(num(on, "p99_ms") <= 600.0, "{seen}");
    assert!(num(on, "shed") > 0.0, "{seen}");
    // The collapse the limit prevents: the upstream's queue grows by its
    // capacity every second, so its requests wait out the client's 1 s.
    assert!(num(off, "goodput") <= 0.3, "{seen}");
    assert!(num(off, "p99_ms") >= 900.0, "{seen}");
    assert_eq!(num(off, "shed"), 0.0, "{seen}");
}

/// Flags that make no comparison are refused before anything starts,
/// with what is wrong.
#[test]
fn bad_flags_are_refused() {
    for (args, says) in [
        (&["--servers", "0"][..], "--servers must be at least 1"),
        (
            &["--service-dist", "gauss"],
            "unknown service-time distribution",
        ),
        (
            &["--service-dist", "bimodal:1.5:100ms"],
            "must be from 0 to 1",
        ),
        (&["--loads", "0"], "--loads must be multiples"),
        (&["--loads=2,-1"], "--loads must be multiples"),
        (&["--fail", "1"], "--fail must be a share"),
        (&["--service", "0"], "--service must be above zero"),
        (&["--limiter", "maybe"], "neither on nor off"),
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} ran");
    }
}
