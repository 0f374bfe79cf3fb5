//! `floodgate healthcheck [URL]`, the probe of images without a shell:
//! exit 0 on a 2xx answer; otherwise 1 and one line saying why (nothing
//! listening, not ready, no answer in time, not an http:// URL).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use floodgate_testkit::{Floodgate, free_port, http_request, wait_until};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1, unit: day}\n";

fn healthcheck(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("healthcheck")
        .args(args)
        .output()
        .expect("run floodgate healthcheck")
}

/// The one line of standard error of a failed check.
fn failure(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("floodgate: healthcheck: "), "{stderr}");
    stderr
}

#[test]
fn a_ready_service_passes() {
    let s = Floodgate::start(bin(), CONFIG, &[], &[]);
    let out = healthcheck(&[&format!("http://127.0.0.1:{}/ready", s.admin)]);
    assert!(out.status.success(), "{out:?}\nlog:\n{}", s.log());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("200"),
        "{out:?}"
    );
}

#[test]
fn nothing_listening_fails() {
    let url = format!("http://127.0.0.1:{}/ready", free_port());
    let said = failure(&healthcheck(&[&url]));
    assert!(said.contains("cannot connect to 127.0.0.1:"), "{said}");
}

#[test]
fn a_service_not_ready_fails() {
    // Redis as the store, nothing on its port, deciding nothing without
    // it: alive, not ready.
    let redis_url = format!("127.0.0.1:{}", free_port());
    let args = [
        "--store",
        "redis",
        "--redis-url",
        &redis_url,
        "--failure-policy",
        "fail_closed",
    ];
    let s = Floodgate::spawn(bin(), CONFIG, "1s", &args, &[], |_| {});
    let alive = wait_until(Duration::from_secs(20), || {
        http_request(s.admin, "GET", "/healthcheck", None, b"").is_some_and(|r| r.0 == 200)
    });
    assert!(alive, "not serving; log:\n{}", s.log());
    let said = failure(&healthcheck(&[&format!(
        "http://127.0.0.1:{}/ready",
        s.admin
    )]));
    assert!(said.contains("answered 503"), "{said}");
}

#[test]
fn a_listener_that_never_answers_fails_in_time() {
    // Connections are accepted by the kernel, never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ready", silent.local_addr().unwrap());
    let start = Instant::now();
    let said = failure(&healthcheck(&[&url, "--timeout", "300ms"]));
    assert!(said.contains("no answer"), "{said}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn only_plain_http_urls_are_taken() {
    let said = failure(&healthcheck(&["https://127.0.0.1:6070/ready"]));
    assert!(said.contains("not an http:// URL"), "{said}");
}
