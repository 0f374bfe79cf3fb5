//! The bundled quick starts start clean: `floodgate serve` on
//! examples/floodgate.yaml and `floodgate gateway` on examples/gateway.yaml
//! log no WARN line before they listen, under an ordinary open files
//! limit (4096, which fits fewer than the 10 000 connections a listener
//! takes by default).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{Process, free_port, limit_open_files, wait_until};

/// A limit below what the default connections of two listeners need.
const OPEN_FILES: u64 = 4096;

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// `floodgate COMMAND` on `config`, under [`OPEN_FILES`].
fn spawn(command: &'static str, name: &'static str, config: &str) -> Process {
    Process::spawn(name, config, |path: &Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.arg(command).arg("--config").arg(path);
        limit_open_files(&mut cmd, OPEN_FILES);
        cmd
    })
}

/// Waits for `listeners` "listening" lines in `p`'s log, then asserts that
/// no WARN line came before the last of them.
fn starts_clean(p: &Process, listeners: usize) {
    let listening = |log: &str| log.lines().filter(|l| l.contains(" listening ")).count();
    assert!(
        wait_until(Duration::from_secs(20), || listening(&p.log()) >= listeners),
        "{}",
        p.log()
    );
    let log = p.log();
    let started: Vec<&str> = log
        .lines()
        .take_while({
            let mut seen = 0;
            move |l| {
                let before = seen < listeners;
                seen += usize::from(l.contains(" listening "));
                before
            }
        })
        .collect();
    assert!(
        !started.iter().any(|l| l.contains(" WARN ")),
        "a WARN line at start-up:\n{log}"
    );
}

/// The service's quick start, on free ports (its addresses kept).
#[test]
fn the_service_quick_start_starts_clean() {
    let (grpc, http, admin) = (free_port(), free_port(), free_port());
    let config = example("floodgate.yaml")
        .replace(":8081", &format!(":{grpc}"))
        .replace(":8080", &format!(":{http}"))
        .replace(":6070", &format!(":{admin}"));
    let mut serve = spawn("serve", "floodgate.yaml", &config);
    serve.wait_ready(admin);
    // The admin listener, gRPC and HTTP.
    starts_clean(&serve, 3);
}

/// The gateway's quick start, on free ports (its addresses kept).
#[test]
fn the_gateway_quick_start_starts_clean() {
    let (listen, admin) = (free_port(), free_port());
    let config = example("gateway.yaml")
        .replace(":8000", &format!(":{listen}"))
        .replace(":6071", &format!(":{admin}"));
    let mut gateway = spawn("gateway", "gateway.yaml", &config);
    gateway.wait_ready(admin);
    // The admin listener and the gateway's.
    starts_clean(&gateway, 2);
}
