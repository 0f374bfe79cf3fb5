//! Envoy RLS v3 wire compatibility and semantics, end to end: the real
//! binary, driven by Envoy's generated Python stubs (grpcio + xds-protos),
//! on the in-memory store and on a real Redis.

use std::path::Path;
use std::process::Command;

use floodgate_testkit::{Floodgate, Redis, python, workspace_root};

fn config() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/semantics.yaml"),
    )
    .expect("semantics config")
}

/// Runs the Python semantics suite against `server`.
fn run_python_suite(server: &Floodgate, run_id: &str) {
    let script = workspace_root().join("crates/floodgate-cli/tests/python/rls_semantics.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(server.grpc_addr())
        .arg(run_id)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "python suite failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    println!("{stdout}");
}

fn run_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[test]
fn envoy_semantics_on_the_memory_store() {
    let server = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &config(),
        &[],
        &[],
    );
    run_python_suite(&server, &run_id());
}

#[test]
fn envoy_semantics_on_redis() {
    let redis = Redis::start();
    let server = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &config(),
        &[
            "--redis-url",
            &redis.addr(),
            "--failure-policy",
            "fail_closed",
        ],
        &[],
    );
    run_python_suite(&server, &run_id());
}
