//! The deployment examples of deploy/ are checked and run on the image:
//! - the Envoy configuration of the compose example parses as Envoy's own
//!   `Bootstrap` (xds-protos, strict) and its references resolve;
//! - each compose file's Floodgate service runs in the image with its
//!   command, environment and volume, and limits as its comments say;
//! - each Kubernetes overlay renders with `kubectl kustomize`, validates
//!   against Kubernetes' schemas (strict), fits together, and its
//!   container runs in the image with the rendered arguments and
//!   environment, its ConfigMap in kubelet's layout: probes and metrics
//!   answer on the metrics port, the limits hold, and SIGTERM ends it
//!   within the pod's termination grace period.
//!
//! Each container has a network namespace of its own (`image_support`):
//! the manifests' ports are used unchanged, and the hosts they name
//! (`redis`, the gateway's backend) are real servers on its loopback.
//! The Python checks are in tests/python/deploy_envoy.py and
//! tests/python/deploy_kubernetes.py.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit::{
    Process, Redis, http_request, python, require, wait_until, workspace_root,
};
use serde_json::Value;

use crate::image_support::configmap::ConfigMapVolume;
use crate::image_support::{Container, podman};

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

/// What a deployment runs in the image: the arguments after the image's
/// entrypoint, the environment, and the directory mounted as its
/// configuration.
struct Spec {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    mount: String,
    config_dir: PathBuf,
}

impl Spec {
    /// The port of the listener `var` names.
    fn port(&self, var: &str) -> u16 {
        let addr = &self.env[var];
        let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
        port.unwrap_or_else(|| panic!("{var}={addr} has no port"))
    }

    /// The image running it, `hosts` resolving to the container's loopback.
    fn run(&self, hosts: &[&str]) -> Container {
        let mut options = vec![
            "-v".to_owned(),
            format!("{}:{}:ro", self.config_dir.display(), self.mount),
        ];
        for host in hosts {
            options.extend(["--add-host".to_owned(), format!("{host}:127.0.0.1")]);
        }
        for (name, value) in &self.env {
            options.extend(["-e".to_owned(), format!("{name}={value}")]);
        }
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        Container::run(&options, &args)
    }
}

/// The host and port of `url` (`redis://redis:6379`, `http://backend:80`).
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':').expect("a port");
    (host.to_owned(), port.parse().expect("a port number"))
}

/// The servers a spec names, started on `c`'s loopback: its Redis and its
/// upstream (`floodgate bench upstream`).
struct Neighbours {
    _redis: Option<Redis>,
    _upstream: Option<Process>,
}

fn neighbours(spec: &Spec, c: &Container) -> Neighbours {
    let redis = spec.env.get("FLOODGATE_REDIS_URL").map(|url| {
        let (_, port) = host_port(url);
        c.in_netns(|| Redis::start_on(port))
    });
    let upstream = spec.env.get("FLOODGATE_UPSTREAM").map(|url| {
        let (_, port) = host_port(url);
        let p = c.in_netns(|| {
            Process::spawn("unused.yaml", "", |_| {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
                let listen = format!("127.0.0.1:{port}");
                cmd.args(["bench", "upstream", "--listen", &listen]);
                cmd
            })
        });
        let up = wait_until(Duration::from_secs(20), || {
            c.in_netns(|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        });
        assert!(up, "the upstream did not listen: {}", p.log());
        p
    });
    Neighbours {
        _redis: redis,
        _upstream: upstream,
    }
}

/// The hosts a spec's environment names.
fn hosts(spec: &Spec) -> Vec<String> {
    ["FLOODGATE_REDIS_URL", "FLOODGATE_UPSTREAM"]
        .iter()
        .filter_map(|var| spec.env.get(*var))
        .map(|url| host_port(url).0)
        .collect()
}

/// Six requests with one API key through the gateway on `port` of `c`:
/// the examples allow 5 a minute.
fn six_through_the_gateway(c: &Container, port: u16) -> Vec<String> {
    let url = format!("http://127.0.0.1:{port}/");
    (0..6)
        .map(|_| {
            let out = c.in_netns(|| {
                Command::new("curl")
                    .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                    .args(["-H", "x-api-key: demo", &url])
                    .output()
                    .expect("curl")
            });
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect()
}

/// The status of `GET path` on `port` of `c`.
fn status(c: &Container, port: u16, path: &str) -> Option<u16> {
    c.in_netns(|| http_request(port, "GET", path, None, b""))
        .map(|r| r.0)
}

/// Runs `spec` in the image and checks it limits as the examples say,
/// its probes and metrics on the metrics port.
fn run_and_check(spec: &Spec) -> (Container, Neighbours) {
    let hosts = hosts(spec);
    let c = spec.run(&hosts.iter().map(String::as_str).collect::<Vec<_>>());
    let around = neighbours(spec, &c);
    let metrics = spec.port("FLOODGATE_METRICS_ADDR");
    let ready = wait_until(Duration::from_secs(30), || {
        status(&c, metrics, "/ready") == Some(200)
    });
    assert!(ready, "not ready on the metrics port; log:\n{}", c.log());
    assert_eq!(status(&c, metrics, "/healthcheck"), Some(200));
    if spec.args[0] == "serve" {
        let grpc = format!("127.0.0.1:{}", spec.port("FLOODGATE_GRPC_ADDR"));
        let envoy = deploy("compose/envoy.yaml");
        let player = script("deploy_envoy.py");
        let out = c.in_netns(|| {
            run_python(&[
                player.as_os_str(),
                "play".as_ref(),
                envoy.as_os_str(),
                grpc.as_ref(),
            ])
        });
        assert!(out.contains("played: OK OK OK OK OK OVER_LIMIT"), "{out}");
    } else {
        let codes = six_through_the_gateway(&c, spec.port("FLOODGATE_GATEWAY_LISTEN"));
        assert_eq!(
            codes,
            ["200", "200", "200", "200", "200", "429"],
            "{}",
            c.log()
        );
    }
    let (_, text) = c
        .in_netns(|| http_request(metrics, "GET", "/metrics", None, b""))
        .expect("metrics");
    assert!(text.contains("floodgate_requests_total"), "{text}");
    (c, around)
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

/// The service `name` of the compose file `file`.
fn compose_service(file: &str, name: &str) -> Spec {
    let path = deploy(file);
    let compose = yaml(&path);
    let service = &compose["services"][name];
    let volume = strings(&service["volumes"]).remove(0);
    let mut parts = volume.split(':');
    let (source, mount) = (parts.next().unwrap(), parts.next().unwrap());
    assert_eq!(service["read_only"], Value::Bool(true), "{file}: {name}");
    Spec {
        args: strings(&service["command"]),
        env: string_map(&service["environment"]),
        mount: mount.to_owned(),
        config_dir: path.parent().unwrap().join(source),
    }
}

#[test]
fn the_compose_examples_floodgate_services_run_as_written() {
    for (file, service) in [
        ("compose/compose.yaml", "floodgate"),
        ("compose/compose.gateway.yaml", "gateway"),
    ] {
        let spec = compose_service(file, service);
        run_and_check(&spec);
    }
}

/// The overlay `name`, checked: its container's spec, its ConfigMap in
/// `volume`'s place, and the pod's termination grace period.
fn overlay(name: &str) -> (Spec, ConfigMapVolume, u64) {
    let out = run_python(&[
        script("deploy_kubernetes.py").as_os_str(),
        deploy(&format!("kubernetes/overlays/{name}")).as_os_str(),
    ]);
    let rendered: Value = serde_json::from_str(out.trim()).expect("JSON");
    let files = string_map(&rendered["files"]);
    assert_eq!(files.len(), 1, "{name}: one configuration file");
    let (file, text) = files.into_iter().next().unwrap();
    let volume = ConfigMapVolume::new(&file, &text);
    let spec = Spec {
        args: strings(&rendered["args"]),
        env: string_map(&rendered["env"]),
        mount: rendered["mount"].as_str().unwrap().to_owned(),
        config_dir: volume.path().to_owned(),
    };
    (spec, volume, rendered["grace_seconds"].as_u64().unwrap())
}

/// Whether `c` still runs, and its exit code once it has stopped.
fn state(c: &Container) -> (bool, String) {
    let out = podman(&[
        "inspect",
        "-f",
        "{{.State.Running}} {{.State.ExitCode}}",
        c.id(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (running, code) = text.split_once(' ').unwrap_or((&text, ""));
    (running == "true", code.to_owned())
}

#[test]
fn the_kubernetes_overlays_validate_and_their_containers_run_as_rendered() {
    require("kubectl");
    for name in ["memory", "redis", "gateway"] {
        let (spec, _volume, grace) = overlay(name);
        let (c, _around) = run_and_check(&spec);
        // SIGTERM, as kubelet sends it: not ready at once (the endpoints
        // drop the pod), gone within the termination grace period.
        let metrics = spec.port("FLOODGATE_METRICS_ADDR");
        let asked = Instant::now();
        let out = podman(&["kill", "--signal", "TERM", c.id()]);
        assert!(out.status.success(), "podman kill");
        let unready = wait_until(Duration::from_secs(5), || {
            status(&c, metrics, "/ready") != Some(200)
        });
        assert!(unready, "{name}: still ready after SIGTERM");
        let stopped = wait_until(Duration::from_secs(grace), || !state(&c).0);
        assert!(
            stopped,
            "{name}: still running {:?} after SIGTERM; log:\n{}",
            asked.elapsed(),
            c.log()
        );
        assert_eq!(state(&c).1, "0", "{name}: exit code; log:\n{}", c.log());
    }
}
