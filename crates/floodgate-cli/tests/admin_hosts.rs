//! DNS rebinding against the admin listener of both binaries: a page that
//! makes its own name resolve to 127.0.0.1 gets its name sent as `Host`
//! (or HTTP/2's `:authority`), and is answered 421 on every route —
//! `/dashboard/data`'s client identities, the configuration, `/metrics` —
//! while loopback names, IP addresses and `server.admin_hosts` are
//! answered.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use floodgate_testkit::{Floodgate, Gateway, free_port, h2_connect};
use http_body_util::Empty;

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 10, unit: minute}\n";

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// `GET path` on 127.0.0.1:`port` with `Host: host`: the status and the
/// response.
fn get(port: u16, path: &str, host: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|t| t.parse().ok());
    (status.unwrap_or(0), text)
}

/// The admin listener on `admin` answers its names on every one of
/// `paths`, and 421 to any other name.
async fn answers_only_its_names(admin: u16, paths: &[&str]) {
    let own = [
        format!("127.0.0.1:{admin}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{admin}"),
        "LocalHost.".to_owned(),
        format!("prometheus.localhost:{admin}"),
        format!("[::1]:{admin}"),
        "10.1.2.3:6070".to_owned(),
        format!("admin.internal:{admin}"),
    ];
    let foreign = [
        "attacker.example".to_owned(),
        format!("attacker.example:{admin}"),
        format!("localhost.attacker.example:{admin}"),
        "127.0.0.1.nip.io".to_owned(),
        "admin.internal.attacker.example".to_owned(),
    ];
    for path in paths {
        for host in &own {
            let (status, text) = get(admin, path, host);
            assert_eq!(status, 200, "{path} for {host}: {text}");
        }
        for host in &foreign {
            let (status, text) = get(admin, path, host);
            assert_eq!(status, 421, "{path} for {host}: {text}");
            assert!(text.contains("server.admin_hosts"), "{text}");
            assert!(!text.contains("floodgate_"), "nothing of the route: {text}");
        }
    }
    // HTTP/2: `:authority` alone.
    let mut h2 = h2_connect(admin).await;
    for (authority, status) in [("attacker.example", 421), ("127.0.0.1", 200)] {
        let uri = format!("http://{authority}:{admin}/dashboard/data");
        let req = http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
        let res = h2.send_request(req).await.unwrap();
        assert_eq!(res.status(), status, "{authority}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listeners_answer_only_their_own_names() {
    let serve = Floodgate::start(bin(), CONFIG, &["--admin-hosts", "Admin.Internal"], &[]);
    let paths = [
        "/metrics",
        "/dashboard",
        "/dashboard/data",
        "/rlconfig",
        "/ready",
    ];
    answers_only_its_names(serve.admin, &paths).await;
    let misdirected = serve.metric("floodgate_admin_misdirected_total");
    assert!(misdirected >= 25.0, "{misdirected}");

    let config = format!("gateway:\n  upstream: http://127.0.0.1:{}\n", free_port());
    let env = [
        ("FLOODGATE_ALLOW_EMPTY_CONFIG", "true"),
        ("FLOODGATE_ADMIN_HOSTS", "admin.internal"),
    ];
    let gw = Gateway::start(bin(), &config, &[], &env);
    answers_only_its_names(
        gw.admin,
        &["/metrics", "/dashboard", "/dashboard/data", "/ready"],
    )
    .await;
}

#[test]
fn an_admin_host_that_is_no_name_is_refused() {
    let out = std::process::Command::new(bin())
        .args(["config", "check", "--admin-hosts", "admin.internal:6070"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("admin_hosts") || err.contains("admin-hosts"),
        "{err}"
    );
    assert!(err.contains("without a port"), "{err}");
}
