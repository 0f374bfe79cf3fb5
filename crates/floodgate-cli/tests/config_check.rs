//! `floodgate config check` on real files.

use std::process::Command;

fn check(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["config", "check"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn valid_files_pass_and_invalid_ones_are_reported_with_positions() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}\n",
    )
    .unwrap();
    let (ok, stdout, _) = check(&[good.to_str().unwrap()]);
    assert!(ok);
    assert!(stdout.contains("1 domain(s), 1 rule(s)"), "{stdout}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {algorithm: token_bucket, requests: ten, per: 1s}\n",
    )
    .unwrap();
    let (ok, _, stderr) = check(&[bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("bad.yaml:5:"), "{stderr}");
    assert!(stderr.contains("`ten`"), "{stderr}");

    let (ok, _, stderr) = check(&[dir.path().join("missing.yaml").to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("missing.yaml: cannot read"), "{stderr}");
}

/// Paths naming an endless device, as the configuration or as a TLS file,
/// are refused at their size bound with the file named (never read until
/// memory runs out).
#[cfg(unix)]
#[test]
fn endless_devices_are_refused_not_read_forever() {
    let (ok, _, stderr) = check(&["/dev/zero"]);
    assert!(!ok);
    assert!(
        stderr.contains("/dev/zero: file is larger than 16777216 bytes"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        "gateway:\n  listen: 127.0.0.1:8443\n  upstream: {url: \"http://127.0.0.1:9000\"}\n  tls: {cert: /dev/zero, key: /dev/zero}\n",
    )
    .unwrap();
    let (ok, _, stderr) = check(&[config.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("gateway.yaml:4:15: cannot read /dev/zero: larger than 4194304 bytes"),
        "{stderr}"
    );
}
