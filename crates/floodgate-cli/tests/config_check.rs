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
    // The default store: a million keys in memory, and what they take.
    assert!(
        stdout.contains("in-memory store: ") && stdout.contains("1000000 keys, "),
        "{stdout}"
    );

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
    let (ok, _, stderr) = check(&[config.to_str().unwrap(), "--allow-empty-config"]);
    assert!(!ok);
    assert!(
        stderr.contains("gateway.yaml:4:15: cannot read /dev/zero: larger than 4194304 bytes"),
        "{stderr}"
    );
}

fn check_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
    cmd.args(["config", "check"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `config check` reads the configuration as `serve` and `gateway` do:
/// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG` (or the flag) merges two
/// files of one domain; the environment's settings are checked, each
/// error naming its variable; every section of the files is read.
#[test]
fn the_environment_and_flags_are_read_as_the_binaries_read_them() {
    let dir = tempfile::tempdir().unwrap();
    for (name, key) in [("a.yaml", "user"), ("b.yaml", "team")] {
        std::fs::write(
            dir.path().join(name),
            format!("domain: api\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"),
        )
        .unwrap();
    }
    let path = dir.path().to_str().unwrap();
    let (ok, _, stderr) = check_env(&[path], &[]);
    assert!(!ok, "two files of one domain are refused by default");
    assert!(stderr.contains("api"), "{stderr}");
    for (args, env) in [
        (vec![path], vec![("MERGE_DOMAIN_CONFIG", "true")]),
        (vec![path, "--merge-domains"], vec![]),
        (vec![path], vec![("FLOODGATE_MERGE_DOMAINS", "1")]),
    ] {
        let (ok, stdout, stderr) = check_env(&args, &env);
        assert!(ok, "{args:?} {env:?}: {stderr}");
        assert!(stdout.contains("1 domain(s), 2 rule(s)"), "{stdout}");
    }
    // The flag is stronger than the environment.
    let (ok, _, _) = check_env(
        &[path, "--merge-domains=false"],
        &[("MERGE_DOMAIN_CONFIG", "true")],
    );
    assert!(!ok);
    // A bad variable is a problem of the configuration, named.
    let (ok, _, stderr) = check_env(
        &[path, "--merge-domains"],
        &[("FLOODGATE_SHUTDOWN_DELAY", "soon")],
    );
    assert!(!ok);
    assert!(
        stderr.contains("FLOODGATE_SHUTDOWN_DELAY: expected a duration"),
        "{stderr}"
    );
}

/// The bundled examples are separate configurations (the service's and
/// the gateway's quick starts, the benchmarks'): `--each` checks every file
/// of the directory on its own, as the docs show, and they all pass; read
/// together they are one configuration, which two of them contradict.
#[test]
fn every_bundled_example_passes_on_its_own() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let (ok, stdout, stderr) = check(&["--each", examples]);
    assert!(ok, "{stdout}\n{stderr}");
    for f in [
        "floodgate.yaml",
        "gateway.yaml",
        "bench.yaml",
        "bench-keys.yaml",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(f) && l.contains(": OK: 1 file(s)")),
            "{f}: {stdout}"
        );
    }
    let (ok, _, stderr) = check(&[examples]);
    assert!(!ok);
    assert!(stderr.contains("problem(s) found"), "{stderr}");

    // One bad file among good ones: named, and the whole check fails.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {requests_per_unit: 1, unit: second}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.yml"),
        "domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {requests_per_unit: x, unit: second}\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = check(&["--each", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stdout.contains("a.yaml: OK"), "{stdout}");
    assert!(stderr.contains("b.yml:5:"), "{stderr}");
    assert!(stderr.contains("1 of 2 configuration(s)"), "{stderr}");
}

/// Every section reads durations the one way: the same grammar (`1.5s`,
/// `1m30s`, `1d`, `minute`) and the same message for a value that is not
/// one, zero refused where a duration must be positive.
#[test]
fn every_section_reads_durations_the_one_way() {
    // Each place a duration is written, by section; whether zero is allowed there.
    let places = [
        ("server", "server:\n  shutdown_delay: {}\n", true),
        ("store", "store:\n  backend: redis\n  timeout: {}\n", false),
        (
            "gateway",
            "gateway:\n  upstream: {url: 'http://127.0.0.1:9', connect_timeout: {}}\n",
            false,
        ),
        (
            "http.responses",
            "http:\n  domain: api\n  descriptors: [[client_ip]]\n  responses: {retry_after_unknown: {}}\n",
            true,
        ),
        (
            "http.layer",
            "http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer: {concurrency: {global: {max: 1, timeout: {}}}}\n",
            true,
        ),
        ("per", "{RULE}{requests: 1, per: {}}\n", false),
        (
            "block_for",
            "{RULE}{requests: 1, per: 1s, block_for: {}}\n",
            false,
        ),
        (
            "sync",
            "{RULE}{requests: 1, per: 1h, sync: {mode: lease, duration: {}}}\n",
            false,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.yaml");
    let rule =
        "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: ";
    let check_with = |text: &str, value: &str| {
        let mut file = text.replace("{RULE}", rule).replace("{}", value);
        if !file.contains("domains:") {
            file.push_str(&format!("{rule}{{requests: 1, per: 1s}}\n"));
        }
        std::fs::write(&path, &file).unwrap();
        let (ok, _, stderr) = check(&[path.to_str().unwrap()]);
        (ok, stderr)
    };
    for (section, text, zero) in places {
        for good in ["1.5s", "1m30s", "250ms", "minute", "0.5h"] {
            let (ok, stderr) = check_with(text, good);
            assert!(ok, "{section}: `{good}`: {stderr}");
        }
        let (ok, stderr) = check_with(text, "soon");
        assert!(!ok, "{section}");
        let such_as = if zero {
            "such as 0, 500ms"
        } else {
            "such as 500ms"
        };
        let expected =
            format!("expected a duration {such_as}, 1.5s, 1m30s, 1d or minute, found `soon`");
        assert!(stderr.contains(&expected), "{section}: {stderr}");
        let (ok, stderr) = check_with(text, "0");
        assert_eq!(ok, zero, "{section}: `0`: {stderr}");
        if !zero {
            let expected = "expected a duration above zero, found `0`";
            assert!(stderr.contains(expected), "{section}: {stderr}");
        }
    }
}

/// With `shedding.adaptive`, `config check` explains the controller in
/// words and numbers: bounds, target, interval, drains, the classes'
/// limits, the queue's bound; without it, nothing of the kind.
#[test]
fn the_adaptive_limit_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("adaptive.yaml");
    let layer = "    shedding:\n      adaptive: {min: 2, max: 100, initial: 10, tolerance: 1, probe_every: 5, queue: {max_waiting: 64, order: lifo, timeout: 50ms}}\n";
    let base = "domains:\n  - domain: api\n    descriptors:\n      - key: method\n        rate_limit: {requests: 10, per: 1s}\nhttp:\n  domain: api\n  descriptors: [[method]]\n";
    std::fs::write(&config, format!("{base}  layer:\n{layer}")).unwrap();
    let (ok, stdout, stderr) = check(&[config.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    for expected in [
        "adaptive concurrency limit (http.layer.shedding.adaptive):",
        "  limit between 2 and 100 requests in flight, 10 before anything is measured",
        "no-load latency × (1 + 1) = 2.00 × the no-load latency",
        "re-measured every 5 intervals",
        "sheddable requests admitted below 50% of the limit: 5 of 10 at the initial limit, 50 of 100 at the largest",
        "default requests admitted below 80% of the limit: 8 of 10 at the initial limit, 80 of 100 at the largest",
        "queue: up to 64 requests over their class's limit wait for a slot, the highest class first; each waits at most 50ms, newest first",
    ] {
        assert!(stdout.contains(expected), "no `{expected}` in:\n{stdout}");
    }
    std::fs::write(&config, base).unwrap();
    let (ok, stdout, _) = check(&[config.to_str().unwrap()]);
    assert!(ok && !stdout.contains("adaptive"), "{stdout}");
}
