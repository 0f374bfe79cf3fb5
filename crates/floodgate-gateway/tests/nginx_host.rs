//! The gateway's `Host` handling against a real nginx (Debian's) proxying
//! to the same upstream with `proxy_set_header Host $host` — nginx's
//! reading of RFC 9112 §3.2: which HTTP/1.x requests are refused (400),
//! and which authority the upstream is told of. Every combination of
//! request-target form, version and `Host` field lines from a pool of
//! valid and invalid values goes to both; their answers must agree up to
//! the documented differences (docs/gateway.md, "Limits and known
//! differences"): `$host` is lower-cased and loses its port and final
//! dot where the gateway passes the authority as sent; an HTTP/1.0
//! request without `Host` gets nginx's empty server name where the
//! gateway names the upstream; and the gateway refuses a few `Host`
//! values RFC 3986 does not allow (some bytes, an empty first label) that
//! nginx passes.

use crate::support;

use std::time::Duration;

use floodgate_testkit::Nginx;

use support::{ConfigFile, gateway, raw, status_of, upstream};

/// nginx proxying everything to `upstream` with `Host: $host`.
fn nginx_proxy(upstream: std::net::SocketAddr) -> Nginx {
    Nginx::start(64, 1, |port, _| {
        format!(
            r#"    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_set_header Host $host;
        }}
    }}
"#
        )
    })
}

/// The status and the `Host` the upstream saw (none: refused, or sent
/// without one).
fn ask(addr: std::net::SocketAddr, req: &str) -> (Option<u16>, Option<String>) {
    let text = raw(addr, req.as_bytes(), Duration::from_secs(5));
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let seen = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("x-seen-host")
            .then(|| v.trim().to_owned())
    });
    (status_of(&text), seen)
}

/// What nginx's `$host` makes of an authority: lower case, no port, no
/// final dot.
fn as_nginx_host(authority: &str) -> String {
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        authority.split(':').next().unwrap_or(authority)
    };
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// `Host` values the gateway refuses, which nginx lets through: bytes
/// outside RFC 3986's `reg-name`, and an empty first label.
const STRICTER: &[&str] = &[
    "u@a.example",
    "a\"b.example",
    "a{b}.example",
    "a\\b",
    "a%41.example",
    ".a",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_handling_matches_nginx() {
    let up = upstream().await;
    let nginx = nginx_proxy(up.addr);
    let n = std::net::SocketAddr::from(([127, 0, 0, 1], nginx.port));
    let file = ConfigFile::new("server: {reload_interval: 0}\n");
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let g = gw.addr();

    let pool: Vec<&str> = [
        "a.example",
        "B.Example",
        "a.example.",
        "a.example:8080",
        "127.0.0.1",
        "[::1]",
        "[::1]:81",
        "",
        "a/b",
        "a..b",
        "a b",
    ]
    .into_iter()
    .chain(STRICTER.iter().copied())
    .collect();
    let mut host_lines: Vec<Vec<&str>> = vec![vec![]];
    host_lines.extend(pool.iter().map(|h| vec![*h]));
    host_lines.push(vec!["a.example", "a.example"]);
    host_lines.push(vec!["a.example", "b.example"]);
    host_lines.push(vec!["a/b", "a.example"]);
    let targets = [
        "/x",
        "http://c.example/x",
        "http://C.example:8081/x",
        "http://u@c.example/x",
        "http://c..example/x",
    ];
    let mut compared = 0;
    let mut refused = 0;
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        for target in targets {
            for hosts in &host_lines {
                let mut req = format!("GET {target} {version}\r\n");
                for h in hosts {
                    req.push_str(&format!("Host: {h}\r\n"));
                }
                req.push_str("Connection: close\r\n\r\n");
                let (ns, nh) = ask(n, &req);
                let (gs, gh) = ask(g, &req);
                let what = format!("{req:?}: nginx {ns:?} {nh:?}, gateway {gs:?} {gh:?}");
                assert!(ns.is_some() && gs.is_some(), "{what}");
                let stricter = hosts.iter().any(|h| STRICTER.contains(h));
                if stricter {
                    assert_eq!(gs, Some(400), "{what}");
                    assert!(matches!(ns, Some(200 | 400)), "{what}");
                    continue;
                }
                assert_eq!(gs, ns, "{what}");
                compared += 1;
                if gs != Some(200) {
                    refused += 1;
                    continue;
                }
                match (&gh, &nh) {
                    // HTTP/1.0 without any authority: nginx sends its
                    // (empty) server name, that is no Host; the gateway
                    // the upstream's own.
                    (Some(g), None)
                        if version == "HTTP/1.0" && hosts.is_empty() && target == "/x" =>
                    {
                        assert_eq!(g, &up.addr.to_string(), "{what}");
                    }
                    (Some(g), Some(n)) => assert_eq!(&as_nginx_host(g), n, "{what}"),
                    _ => panic!("{what}"),
                }
            }
        }
    }
    // Both kinds were seen, many times.
    assert!(
        compared > 80 && refused > 30,
        "{compared} compared, {refused} refused"
    );
    gw.shutdown().await;
}
