//! Floodgate's image (Containerfile, scripts/image.sh), built from this
//! build's binary on a locally made `cc` base and run with podman: the
//! quick start as nonroot on a read-only root filesystem; Istio's sample
//! (deploy/istio/rate-limit-service.yaml) with its exact command and
//! environment and a ConfigMap volume that kubelet updates; the
//! HEALTHCHECK, passing when ready and failing when not. See
//! `image_support` for how the containers run on this machine.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_testkit::{Redis, http_request, python, wait_until, workspace_root};
use saphyr::{LoadableYamlNode, Yaml};

use crate::image_support::configmap::ConfigMapVolume;
use crate::image_support::{Container, podman};

/// A `/json` call for `user` in the quick start's domain, to the
/// container's HTTP listener at its default port: the status.
fn quickstart_call(c: &Container, user: &str) -> Option<u16> {
    let body = format!(
        r#"{{"domain":"quickstart","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    c.in_netns(|| http_request(8080, "POST", "/json", None, body.as_bytes()))
        .map(|r| r.0)
}

/// The status of `GET path` on the container's admin listener.
fn admin_status(c: &Container, path: &str) -> Option<u16> {
    c.in_netns(|| http_request(6070, "GET", path, None, b""))
        .map(|r| r.0)
}

#[test]
fn the_quick_start_runs_as_nonroot_on_a_read_only_root() {
    // The image's own command: `podman run IMAGE`.
    let c = Container::run(&[], &[]);
    let up = wait_until(Duration::from_secs(20), || {
        quickstart_call(&c, "probe").is_some()
    });
    assert!(up, "the image does not answer; its log:\n{}", c.log());
    let answers: Vec<_> = (0..4).map(|_| quickstart_call(&c, "bob")).collect();
    assert_eq!(answers, [Some(200), Some(200), Some(200), Some(429)]);

    let status = std::fs::read_to_string(format!("/proc/{}/status", c.pid())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65532"; 4],
        "{uid}"
    );
    let ro = podman(&["inspect", "-f", "{{.HostConfig.ReadonlyRootfs}}", c.id()]);
    assert_eq!(String::from_utf8_lossy(&ro.stdout).trim(), "true");
}

#[test]
fn the_healthcheck_fails_until_the_store_can_decide_then_passes() {
    // Redis as the store, refusing to decide without it: alive, not ready
    // (the container's loopback has no Redis yet).
    let config = ConfigMapVolume::new("config.yaml", &echo_limits(1));
    let mount = format!("{}:/config:ro", config.path().display());
    let command = [
        "serve",
        "--config",
        "/config",
        "--store",
        "redis",
        "--failure-policy",
        "fail_closed",
        "--redis-breaker-cool-down",
        "200ms",
    ];
    let c = Container::run(&["-v", &mount], &command);
    let alive = wait_until(Duration::from_secs(20), || {
        admin_status(&c, "/healthcheck") == Some(200)
    });
    assert!(alive, "not serving; log:\n{}", c.log());
    assert_eq!(admin_status(&c, "/ready"), Some(503));
    let (passed, said) = c.healthcheck();
    assert!(!passed, "the HEALTHCHECK passed while not ready: {said}");

    // Redis comes up on the container's loopback: the probes find it.
    let _redis = c.in_netns(|| Redis::start_on(6379));
    let healthy = wait_until(Duration::from_secs(20), || c.healthcheck().0);
    assert!(healthy, "{}\nlog:\n{}", c.healthcheck().1, c.log());
}

/// The rate limit container of Istio's sample: its command and
/// environment, as the manifest gives them.
fn istio_container() -> (Vec<String>, Vec<(String, String)>) {
    let path = workspace_root().join("deploy/istio/rate-limit-service.yaml");
    let docs = Yaml::load_from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let deployment = docs
        .iter()
        .find(|d| {
            d["kind"].as_str() == Some("Deployment")
                && d["metadata"]["name"].as_str() == Some("ratelimit")
        })
        .expect("the ratelimit Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let strings = |y: &Yaml| y.as_str().expect("a string").to_owned();
    let command = container["command"]
        .as_vec()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    let env = container["env"].as_vec().unwrap().iter();
    let env = env
        .map(|e| (strings(&e["name"]), strings(&e["value"])))
        .collect();
    (command, env)
}

/// The sample's ConfigMap (the manifest's comment), with `/`'s limit.
fn echo_limits(root_per_minute: u32) -> String {
    format!(
        "domain: echo-ratelimit
descriptors:
  - key: PATH
    value: \"/\"
    rate_limit:
      unit: minute
      requests_per_unit: {root_per_minute}
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
"
    )
}

/// Lines of `rls_watch.py` watching `/`'s limit, run in `c`'s network
/// namespace, as they come: `(unix time, "CODE LIMIT")`.
fn watch_root_limit(c: &Container) -> (std::process::Child, mpsc::Receiver<(f64, String)>) {
    let script = workspace_root().join("crates/floodgate-cli/tests/python/rls_watch.py");
    let mut child = c.in_netns(|| {
        Command::new(python())
            .arg(script)
            .args(["127.0.0.1:8081", "echo-ratelimit", "PATH", "/", "60"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn rls_watch.py")
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let (time, seen) = line.split_once(' ').unwrap();
            let _ = tx.send((time.parse().unwrap(), seen.to_owned()));
        }
    });
    (child, rx)
}

/// The watcher's next line with limit `limit`, within `limit_time`.
fn next_with_limit(
    rx: &mpsc::Receiver<(f64, String)>,
    limit: &str,
    within: Duration,
) -> Option<f64> {
    let end = std::time::Instant::now() + within;
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((time, seen))
                if seen.ends_with(&format!(" {limit}")) && !seen.starts_with("ERROR") =>
            {
                return Some(time);
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

#[test]
fn istios_sample_runs_unchanged_and_follows_its_configmap() {
    let (command, env) = istio_container();
    let mut volume = ConfigMapVolume::new("config.yaml", &echo_limits(1));
    // The manifest's command replaces the image's entrypoint and command,
    // as Kubernetes does; its environment is passed whole; the ports are
    // the image's defaults (the container has its own loopback); the
    // manifest's `redis` Service is a redis-server on that loopback.
    let entrypoint = format!(
        "[{}]",
        command
            .iter()
            .map(|c| format!("{c:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mount = format!("{}:/data/ratelimit/config:ro", volume.path().display());
    let mut options = vec!["--entrypoint".to_owned(), entrypoint, "-v".into(), mount];
    options.extend(["--add-host".into(), "redis:127.0.0.1".into()]);
    for (name, value) in &env {
        options.extend(["-e".into(), format!("{name}={value}")]);
    }
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let c = Container::run(&options, &[]);
    let redis = c.in_netns(|| Redis::start_on(6379));
    let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", c.pid())).unwrap();
    assert_eq!(
        cmdline
            .trim_end_matches('\0')
            .split('\0')
            .collect::<Vec<_>>(),
        command
    );

    let (mut watcher, rx) = watch_root_limit(&c);
    let first = next_with_limit(&rx, "1", Duration::from_secs(30));
    assert!(
        first.is_some(),
        "no answer with the first limit; log:\n{}",
        c.log()
    );
    // Decided in the sample's Redis once the service has found it.
    let in_redis = wait_until(Duration::from_secs(20), || {
        let out = c.in_netns(|| {
            Command::new("redis-cli")
                .args(["-p", "6379", "--scan"])
                .output()
        });
        out.is_ok_and(|o| !o.stdout.is_empty())
    });
    assert!(in_redis, "nothing counted in Redis; log:\n{}", c.log());

    // kubelet's update: the new limit applies within 3 s (here, with a
    // margin for a loaded machine: the reload checks every second).
    volume.update(&echo_limits(7));
    let swapped = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let seen = next_with_limit(&rx, "7", Duration::from_secs(5));
    let _ = watcher.kill();
    let seen = seen.unwrap_or_else(|| panic!("the new limit never applied; log:\n{}", c.log()));
    let took = seen - swapped;
    eprintln!("the ConfigMap's update applied after {took:.2} s");
    assert!(took < 5.0, "the update took {took:.2} s");
    drop(redis);
}

#[test]
fn the_image_script_refuses_bad_arguments_with_its_usage() {
    let script = workspace_root().join("scripts/image.sh");
    for args in [
        &["--tagg", "x"][..],
        &["--tag"],
        &["--from-binary", "/nonexistent/floodgate"],
        &["extra"],
    ] {
        let out = Command::new(&script).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("usage: scripts/image.sh [--tag TAG]"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
