//! The deployment examples of deploy/ are checked and run:
//! - the Envoy configuration of the compose example parses as Envoy's own
//!   `Bootstrap` (xds-protos, strict) and its references resolve;
//! - each compose file's Floodgate service runs with its command and
//!   environment (the hosts it names replaced by a real Redis and a real
//!   upstream, its ports by free ones) and limits as its comments say;
//! - each Kubernetes overlay renders with `kubectl kustomize`, validates
//!   against Kubernetes' schemas (strict), fits together, and its
//!   container's command and environment run: probes and metrics answer
//!   on the metrics port, the limits hold, and SIGTERM ends it within the
//!   pod's termination grace period.
//!
//! The Python checks are in tests/python/deploy_envoy.py and
//! tests/python/deploy_kubernetes.py.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit::{
    Process, Redis, free_port, http_request, python, require, wait_until, workspace_root,
};
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    workspace_root().join("deploy").join(path)
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// Runs a Python script; panics with its output unless it succeeds.
fn run_python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(python())
        .args(args)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A YAML file as JSON (PyYAML, as the other checks read it).
fn yaml(path: &Path) -> Value {
    let code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))";
    let out = run_python(&["-c".as_ref(), code.as_ref(), path.as_os_str()]);
    serde_json::from_str(&out).expect("JSON")
}

/// A JSON list of strings.
fn strings(v: &Value) -> Vec<String> {
    let list = v.as_array().expect("a list");
    list.iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// A JSON object of strings.
fn string_map(v: &Value) -> BTreeMap<String, String> {
    let map = v.as_object().expect("a map");
    map.iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("a string").to_owned()))
        .collect()
}

/// What a container runs: its arguments, its environment, the directory
/// its configuration is mounted at and where that is here.
struct Container {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    mount: String,
    config_dir: PathBuf,
}

/// The places a deployment names, here.
struct Here {
    redis: String,
    upstream: String,
}

impl Container {
    /// Rewrites what names the deployment's network for this machine:
    /// every listener on a free port of the same host, Redis and the
    /// upstream to the real ones here.
    fn localise(&mut self, here: &Here) {
        // The admin listener stays on loopback, at its default port unless
        // told otherwise: a free one here, as tests run side by side.
        self.env
            .entry("FLOODGATE_ADMIN_ADDR".to_owned())
            .or_insert_with(|| "127.0.0.1:6070".to_owned());
        for (name, value) in self.env.iter_mut() {
            if name.ends_with("_ADDR") || name == "FLOODGATE_GATEWAY_LISTEN" {
                let host = value.rsplit_once(':').map_or("", |(h, _)| h);
                *value = format!("{host}:{}", free_port());
            } else if name == "FLOODGATE_REDIS_URL" {
                value.clone_from(&here.redis);
            } else if name == "FLOODGATE_UPSTREAM" {
                value.clone_from(&here.upstream);
            }
        }
    }

    fn port(&self, var: &str) -> u16 {
        let addr = &self.env[var];
        addr.rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("a port")
    }

    fn spawn(&self) -> Process {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.replace(&self.mount, &self.config_dir.to_string_lossy()))
            .collect();
        Process::spawn("unused.yaml", "", |_| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
            cmd.args(&args).env_clear().envs(&self.env);
            cmd
        })
    }
}

/// A real upstream: `floodgate bench upstream`.
fn upstream() -> (Process, String) {
    let port = free_port();
    let p = Process::spawn("unused.yaml", "", |_| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.args([
            "bench",
            "upstream",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]);
        cmd
    });
    assert!(
        wait_until(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "the upstream did not listen: {}",
        p.log()
    );
    (p, format!("http://127.0.0.1:{port}"))
}

/// Six requests with one API key through the gateway on `port`: the
/// examples allow 5 a minute.
fn six_through_the_gateway(port: u16) -> Vec<String> {
    let key = format!("key-{}", std::process::id());
    (0..6)
        .map(|_| {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("x-api-key: {key}"))
                .arg(format!("http://127.0.0.1:{port}/"))
                .output()
                .expect("curl");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect()
}

/// Starts `container` and checks it limits as the examples say, its
/// probes and metrics on the metrics port.
fn run_and_check(container: &Container) -> Process {
    let mut p = container.spawn();
    let metrics = container.port("FLOODGATE_METRICS_ADDR");
    p.wait_ready(metrics);
    assert_eq!(
        http_request(metrics, "GET", "/healthcheck", None, b"").map(|r| r.0),
        Some(200)
    );
    if container.args[0] == "serve" {
        let grpc = format!("127.0.0.1:{}", container.port("FLOODGATE_GRPC_ADDR"));
        let envoy = deploy("compose/envoy.yaml");
        let out = run_python(&[
            script("deploy_envoy.py").as_os_str(),
            "play".as_ref(),
            envoy.as_os_str(),
            grpc.as_ref(),
        ]);
        assert!(out.contains("played: OK OK OK OK OK OVER_LIMIT"), "{out}");
    } else {
        let codes = six_through_the_gateway(container.port("FLOODGATE_GATEWAY_LISTEN"));
        assert_eq!(
            codes,
            ["200", "200", "200", "200", "200", "429"],
            "{}",
            p.log()
        );
    }
    let (_, text) = http_request(metrics, "GET", "/metrics", None, b"").expect("metrics");
    assert!(text.contains("floodgate_requests_total"), "{text}");
    p
}

#[test]
fn the_envoy_configuration_is_an_envoy_bootstrap_whose_references_resolve() {
    let envoy = deploy("compose/envoy.yaml");
    let out = run_python(&[
        script("deploy_envoy.py").as_os_str(),
        "check".as_ref(),
        envoy.as_os_str(),
    ]);
    assert_eq!(out.trim(), "edge");
}

/// The service `name` of the compose file `file`, as it runs here.
fn compose_service(file: &str, name: &str, here: &Here) -> Container {
    let path = deploy(file);
    let compose = yaml(&path);
    let service = &compose["services"][name];
    let volume = strings(&service["volumes"]).remove(0);
    let mut parts = volume.split(':');
    let (source, mount) = (parts.next().unwrap(), parts.next().unwrap());
    let mut container = Container {
        args: strings(&service["command"]),
        env: string_map(&service["environment"]),
        mount: mount.to_owned(),
        config_dir: path.parent().unwrap().join(source),
    };
    container.localise(here);
    container
}

#[test]
fn the_compose_examples_floodgate_services_run_as_written() {
    let redis = Redis::start();
    let (_upstream, upstream) = upstream();
    let here = Here {
        redis: format!("redis://{}", redis.addr()),
        upstream,
    };
    for (file, service) in [
        ("compose/compose.yaml", "floodgate"),
        ("compose/compose.gateway.yaml", "gateway"),
    ] {
        let container = compose_service(file, service, &here);
        run_and_check(&container);
    }
}

/// The overlay `name`, checked, as its container runs here (its ConfigMap
/// written to `dir`).
fn overlay(name: &str, dir: &Path, here: &Here) -> (Container, u64) {
    let out = run_python(&[
        script("deploy_kubernetes.py").as_os_str(),
        deploy(&format!("kubernetes/overlays/{name}")).as_os_str(),
    ]);
    let rendered: Value = serde_json::from_str(out.trim()).expect("JSON");
    for (file, text) in rendered["files"].as_object().expect("files") {
        std::fs::write(dir.join(file), text.as_str().unwrap()).unwrap();
    }
    let mut container = Container {
        args: strings(&rendered["args"]),
        env: string_map(&rendered["env"]),
        mount: rendered["mount"].as_str().unwrap().to_owned(),
        config_dir: dir.to_owned(),
    };
    container.localise(here);
    (container, rendered["grace_seconds"].as_u64().unwrap())
}

#[test]
fn the_kubernetes_overlays_validate_and_their_containers_run_as_rendered() {
    require("kubectl");
    let redis = Redis::start();
    let (_upstream, upstream) = upstream();
    let here = Here {
        redis: format!("redis://{}", redis.addr()),
        upstream,
    };
    for name in ["memory", "redis", "gateway"] {
        let dir = tempfile::tempdir().unwrap();
        let (container, grace) = overlay(name, dir.path(), &here);
        let mut p = run_and_check(&container);
        // SIGTERM: not ready at once (the endpoints drop the pod), gone
        // within the pod's termination grace period.
        let metrics = container.port("FLOODGATE_METRICS_ADDR");
        let asked = Instant::now();
        p.signal("TERM");
        assert!(
            wait_until(Duration::from_secs(5), || {
                http_request(metrics, "GET", "/ready", None, b"").map(|r| r.0) != Some(200)
            }),
            "{name}: still ready after SIGTERM"
        );
        let exited = p.wait_exit(Duration::from_secs(grace));
        assert!(
            exited.is_some(),
            "{name}: still running {:?} after SIGTERM",
            asked.elapsed()
        );
    }
}
