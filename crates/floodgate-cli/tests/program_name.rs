//! Called `ratelimit` (envoyproxy/ratelimit's binary name, which its
//! manifests run as `/bin/ratelimit`), `floodgate` is `floodgate serve`
//! with the arguments given, whatever directory the name is in.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use floodgate_testkit::{Process, free_port, http_request};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1, unit: day}\n";

#[test]
fn called_ratelimit_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let ratelimit = dir.path().join("ratelimit");
    symlink(bin(), &ratelimit).unwrap();
    let (http, grpc, admin) = (free_port(), free_port(), free_port());
    let mut p = Process::spawn("config.yaml", CONFIG, |config| {
        let mut cmd = Command::new(&ratelimit);
        cmd.arg("--config").arg(config);
        cmd.args(["--http-addr", &format!("127.0.0.1:{http}")]);
        cmd.args(["--grpc-addr", &format!("127.0.0.1:{grpc}")]);
        cmd.args(["--admin-addr", &format!("127.0.0.1:{admin}")]);
        cmd
    });
    p.wait_ready(http);
    let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
    let answers = [
        http_request(http, "POST", "/json", None, body).map(|r| r.0),
        http_request(http, "POST", "/json", None, body).map(|r| r.0),
    ];
    assert_eq!(answers, [Some(200), Some(429)], "log:\n{}", p.log());
}

#[test]
fn called_ratelimit_it_takes_serves_flags_only() {
    let dir = tempfile::tempdir().unwrap();
    let ratelimit = dir.path().join("ratelimit");
    symlink(bin(), &ratelimit).unwrap();
    let help = Command::new(&ratelimit).arg("--help").output().unwrap();
    assert!(help.status.success(), "{help:?}");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--grpc-addr"), "{text}");
    // A subcommand's name is an argument `serve` refuses, not a dispatch.
    let gateway = Command::new(&ratelimit).arg("gateway").output().unwrap();
    assert_eq!(gateway.status.code(), Some(2), "{gateway:?}");
    // Under its own name, the binary still needs a subcommand.
    let bare = Command::new(bin()).output().unwrap();
    assert_eq!(bare.status.code(), Some(2), "{bare:?}");
}
