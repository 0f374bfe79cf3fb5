//! The metrics listener of both binaries (`--metrics-addr`,
//! envoyproxy/ratelimit's `USE_PROMETHEUS` + `PROMETHEUS_ADDR`), reached
//! from the pod network as Prometheus and the kubelet reach it: a port
//! alone binds every interface; `/metrics`, `/healthcheck` and `/ready`
//! answer for any `Host`; the dashboard, `/rlconfig` and every other path
//! are 404 and show nothing; the internals stay on the loopback admin
//! listener.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use floodgate_testkit::{Floodgate, Gateway, Process, free_port};

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 10, unit: minute}\n";

/// What the metrics listener serves.
const SERVED: [&str; 3] = ["/metrics", "/healthcheck", "/ready"];

/// What it does not: the admin listener's internals and anything else.
const NOT_SERVED: [&str; 9] = [
    "/",
    "/dashboard",
    "/dashboard/data",
    "/rlconfig",
    "/json",
    "/debug/pprof/",
    "/metrics/",
    "/Metrics",
    "/ready/../dashboard",
];

/// `Host` headers a client may send: its own address, a Service's name,
/// one a rebinding page would send.
const HOSTS: [&str; 4] = [
    "",
    "floodgate.default.svc.cluster.local:9901",
    "attacker.example",
    "localhost",
];

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// The addresses of this machine's interfaces other than loopback (the
/// kernel's tables of local addresses; IPv6's of global scope), if any.
fn pod_addresses() -> Vec<IpAddr> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let lines: Vec<&str> = trie.lines().collect();
    let v4 = lines
        .windows(2)
        .filter(|w| w[1].trim() == "/32 host LOCAL")
        .filter_map(|w| w[0].trim().trim_start_matches("|-- ").parse().ok());
    let inet6 = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    let v6 = inet6.lines().filter_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let global = fields.get(3) == Some(&"00");
        let bits = u128::from_str_radix(fields.first()?, 16).ok()?;
        global.then(|| IpAddr::from(Ipv6Addr::from(bits)))
    });
    let mut found: Vec<IpAddr> = v4.chain(v6).filter(|ip| !ip.is_loopback()).collect();
    found.sort();
    found.dedup();
    found
}

/// Where a listener bound to the `wildcard` address on `port` is reached
/// from: loopback, and the machine's other addresses (of the wildcard's
/// family, both for `[::]`, dual-stack).
fn reach(wildcard: IpAddr, port: u16) -> Vec<SocketAddr> {
    let mut at = vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)];
    if wildcard.is_ipv6() {
        at.push(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port));
    }
    let pod = pod_addresses().into_iter();
    let pod = pod.filter(|ip| ip.is_ipv4() || wildcard.is_ipv6());
    at.extend(pod.map(|ip| SocketAddr::new(ip, port)));
    at
}

/// `GET http://at{path}` with `Host: host` (blank: the address's):
/// status and body.
async fn get(client: &reqwest::Client, at: SocketAddr, path: &str, host: &str) -> (u16, String) {
    let mut req = client.get(format!("http://{at}{path}"));
    if !host.is_empty() {
        req = req.header("host", host);
    }
    let res = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{at}{path}: {e}"));
    let status = res.status().as_u16();
    (status, res.text().await.unwrap_or_default())
}

/// The metrics listener at `at` serves [`SERVED`] and nothing else, for
/// every one of [`HOSTS`].
async fn serves_probes_only(at: SocketAddr) {
    let client = reqwest::Client::new();
    for host in HOSTS {
        for path in SERVED {
            let (status, body) = get(&client, at, path, host).await;
            assert_eq!(status, 200, "{at}{path} for `{host}`: {body}");
        }
        let (_, metrics) = get(&client, at, "/metrics", host).await;
        assert!(
            metrics.contains("floodgate_"),
            "{at} for `{host}`: {metrics}"
        );
        for path in NOT_SERVED {
            let (status, body) = get(&client, at, path, host).await;
            assert_eq!(status, 404, "{at}{path} for `{host}`: {body}");
            assert!(body.is_empty(), "{at}{path} shows nothing: {body}");
        }
    }
}

/// The listener named `what` is bound to `wildcard` on `port` (its
/// start-up line says so), which is the unspecified address.
fn bound_to_every_interface(log: &str, what: &str, wildcard: IpAddr, port: u16) {
    assert!(wildcard.is_unspecified(), "{wildcard}");
    let line = format!(
        "listener=\"{what}\" addr={}",
        SocketAddr::new(wildcard, port)
    );
    assert!(log.contains(&line), "{line}:\n{log}");
}

/// `0.0.0.0`: every IPv4 interface, what a port alone binds.
const EVERY_V4: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
/// `[::]`: every interface, IPv4 and IPv6, what Go's `:port` binds.
const EVERY: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_metrics_listener_serves_probes_only_on_every_interface() {
    let port = free_port();
    let metrics = format!(":{port}");
    let serve = Floodgate::start(bin(), CONFIG, &["--metrics-addr", &metrics], &[]);
    bound_to_every_interface(&serve.log(), "metrics", EVERY_V4, port);
    for at in reach(EVERY_V4, port) {
        serves_probes_only(at).await;
    }
    // The internals are where they were: the admin listener, on loopback.
    let client = reqwest::Client::new();
    let admin = SocketAddr::from(([127, 0, 0, 1], serve.admin));
    for path in ["/dashboard", "/rlconfig"] {
        assert_eq!(get(&client, admin, path, "").await.0, 200, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_probes_are_on_the_pod_network() {
    let port = free_port();
    let config = format!("gateway:\n  upstream: http://127.0.0.1:{}\n", free_port());
    let env = [("FLOODGATE_ALLOW_EMPTY_CONFIG", "true")];
    let metrics = format!(":{port}");
    let gw = Gateway::start(bin(), &config, &["--metrics-addr", &metrics], &env);
    bound_to_every_interface(&gw.log(), "metrics", EVERY_V4, port);
    for at in reach(EVERY_V4, port) {
        serves_probes_only(at).await;
    }
}

/// envoyproxy/ratelimit's Prometheus variables: `PROMETHEUS_ADDR=":PORT"`
/// (Go's empty host: every interface, IPv4 and IPv6) puts the metrics
/// listener on `[::]`, reached over both; `DEBUG_PORT` alone keeps the admin listener, the dashboard
/// and `/rlconfig` with it, on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_prometheus_addr_is_scrapable_and_the_internals_stay_on_loopback() {
    let (port, debug) = (free_port(), free_port());
    let env = [
        ("USE_PROMETHEUS", "true".to_owned()),
        ("PROMETHEUS_ADDR", format!(":{port}")),
        ("DEBUG_PORT", debug.to_string()),
    ];
    let http = free_port();
    let mut serve = Process::spawn("floodgate.yaml", CONFIG, |path| {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("serve").arg("--config").arg(path);
        cmd.args([
            "--grpc-addr",
            "off",
            "--http-addr",
            &format!("127.0.0.1:{http}"),
        ]);
        cmd.env_remove("FLOODGATE_ADMIN_ADDR").envs(env);
        cmd
    });
    serve.wait_ready(http);
    let log = serve.log();
    bound_to_every_interface(&log, "metrics", EVERY, port);
    let line = format!("listener=\"admin\" addr=127.0.0.1:{debug}");
    assert!(log.contains(&line), "{line}:\n{log}");
    for at in reach(EVERY, port) {
        serves_probes_only(at).await;
    }
    let client = reqwest::Client::new();
    let admin = SocketAddr::from(([127, 0, 0, 1], debug));
    assert_eq!(get(&client, admin, "/dashboard", "").await.0, 200);
    for ip in pod_addresses() {
        let beyond = std::net::TcpStream::connect((ip, debug));
        assert!(beyond.is_err(), "the admin listener on {ip}: {beyond:?}");
    }
}

/// `PROMETHEUS_ADDR` with a host: exactly there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_prometheus_addr_with_a_host_binds_that_host() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", addr.as_str()),
    ];
    let serve = Floodgate::start(bin(), CONFIG, &[], &env);
    let line = format!("listener=\"metrics\" addr={addr}");
    assert!(serve.log().contains(&line), "{line}:\n{}", serve.log());
    serves_probes_only(addr.parse().unwrap()).await;
    for ip in pod_addresses() {
        let beyond = std::net::TcpStream::connect((ip, port));
        assert!(beyond.is_err(), "{ip}: {beyond:?}");
    }
}

/// `server.tls.metrics`: the probes over TLS, as every listener's; the
/// other paths still 404; cleartext is not answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_takes_tls() {
    use floodgate_testkit::tls::{Pki, client_config, tls_connect};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pki = Pki::new("metrics");
    let leaf = pki.leaf("metrics");
    let port = free_port();
    let args = [
        "--metrics-addr".to_owned(),
        format!("127.0.0.1:{port}"),
        "--metrics-tls-cert".to_owned(),
        leaf.cert.display().to_string(),
        "--metrics-tls-key".to_owned(),
        leaf.key.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _serve = Floodgate::start(bin(), CONFIG, &args, &[]);
    for (path, expected) in [("/ready", 200), ("/metrics", 200), ("/dashboard", 404)] {
        let config = client_config(pki.roots(), None, &[b"http/1.1"]);
        let mut tls = tls_connect(port, config).await.unwrap();
        let head = format!("GET {path} HTTP/1.1\r\nHost: 10.0.0.7\r\nConnection: close\r\n\r\n");
        tls.write_all(head.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out);
        let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        assert_eq!(status, Some(expected), "{path}: {text}");
    }
    let cleartext = floodgate_testkit::http_request(port, "GET", "/ready", None, b"");
    assert!(
        cleartext.as_ref().is_none_or(|(s, _)| *s != 200),
        "{cleartext:?}"
    );
}

/// envoyproxy/ratelimit's `PROMETHEUS_PATH` moves the metrics on the
/// metrics listener; the admin listener's stay at `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_prometheus_path_moves_the_metrics() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", addr.as_str()),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
    ];
    let serve = Floodgate::start(bin(), CONFIG, &[], &env);
    assert!(!serve.log().contains("PROMETHEUS_PATH"), "{}", serve.log());
    let client = reqwest::Client::new();
    let at: SocketAddr = addr.parse().unwrap();
    let (status, body) = get(&client, at, "/stats/prometheus", "").await;
    assert_eq!(status, 200);
    assert!(body.contains("floodgate_"), "{body}");
    for (path, status) in [("/metrics", 404), ("/ready", 200), ("/healthcheck", 200)] {
        assert_eq!(get(&client, at, path, "").await.0, status, "{path}");
    }
    let admin = SocketAddr::from(([127, 0, 0, 1], serve.admin));
    assert_eq!(get(&client, admin, "/metrics", "").await.0, 200);
}

/// The admin listener's protections: a half-sent head is closed at
/// `server.limits.header_read_timeout`, and a flood of idle connections
/// fills the metrics listener's own places, never the admin listener's.
#[test]
fn the_metrics_listener_has_the_admin_listeners_protections() {
    use std::io::{Read, Write};
    let port = free_port();
    let args = [
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
        "--header-read-timeout",
        "1s",
    ];
    let serve = Floodgate::start(bin(), CONFIG, &args, &[]);
    let mut head = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    head.write_all(b"GET /ready HTTP/1.1\r\n").unwrap();
    head.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let closed = head.read_to_end(&mut rest);
    assert!(closed.is_ok(), "a half-sent head held: {closed:?}");
    let flood: Vec<_> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    for listener in [serve.admin, serve.http] {
        let ready = floodgate_testkit::http_request(listener, "GET", "/ready", None, b"");
        assert_eq!(ready.map(|r| r.0), Some(200), "{listener}");
    }
    drop(flood);
    let back = floodgate_testkit::wait_until(std::time::Duration::from_secs(20), || {
        floodgate_testkit::http_request(port, "GET", "/ready", None, b"")
            .is_some_and(|r| r.0 == 200)
    });
    assert!(back, "{}", serve.log());
}
