//! The request's authority (RFC 9112 §3.2, RFC 9110 §7.2, RFC 9113
//! §8.3.1): exactly one `Host` reaches the upstream, the absolute-form
//! target's authority wins, and anything else is a 400 that reaches
//! neither the limiter nor the upstream.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use floodgate_testkit::h2_connect;
use http_body_util::Empty;
use support::{ConfigFile, field, gateway, raw, status_of, upstream};

const CONFIG: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: host, key: host}}]
domains:
  - domain: gw
    descriptors:
      - key: host
        rate_limit: {name: per-host, algorithm: sliding_log, requests: 1000, per: 1m}
server: {reload_interval: 0}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_requests_carry_exactly_one_host() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let t = Duration::from_secs(3);
    // (request, status, the Host the upstream saw)
    let cases: &[(&str, u16, Option<&str>)] = &[
        (
            "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
            200,
            Some("a.example"),
        ),
        (
            "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
            400,
            None,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
            400,
            None,
        ),
        ("GET / HTTP/1.1\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost:\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost: u@a.example\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n", 400, None),
        ("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400, None),
        (
            "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
            200,
            Some("[::1]:8080"),
        ),
        (
            "GET / HTTP/1.1\r\nHost: A.Example.:81\r\n\r\n",
            200,
            Some("A.Example.:81"),
        ),
        // The absolute form's authority wins over the Host beside it.
        (
            "GET http://a.example/x HTTP/1.1\r\nHost: b.example\r\n\r\n",
            200,
            Some("a.example"),
        ),
        (
            "GET http://a.example:8080/x HTTP/1.1\r\nHost: a.example\r\n\r\n",
            200,
            Some("a.example:8080"),
        ),
        // ... but the Host must still be there, once, and valid.
        ("GET http://a.example/x HTTP/1.1\r\n\r\n", 400, None),
        (
            "GET http://a.example/x HTTP/1.1\r\nHost: b\r\nHost: c\r\n\r\n",
            400,
            None,
        ),
        (
            "GET http://a.example/x HTTP/1.1\r\nHost: b/c\r\n\r\n",
            400,
            None,
        ),
        (
            "GET http://u@a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n",
            400,
            None,
        ),
        // HTTP/1.0 may omit it: the upstream's own authority is sent.
        ("GET / HTTP/1.0\r\n\r\n", 200, Some(&*up.addr.to_string())),
        (
            "GET http://a.example/ HTTP/1.0\r\n\r\n",
            200,
            Some("a.example"),
        ),
        ("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, None),
    ];
    let mut refused = 0;
    for (req, status, host) in cases {
        let before = up.requests();
        // Closed after the response, so the read ends with it.
        let sent = req.replacen("\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1);
        let text = raw(a, sent.as_bytes(), t);
        assert_eq!(status_of(&text), Some(*status), "{req:?}: {text:?}");
        if *status == 400 {
            refused += 1;
            assert_eq!(up.requests(), before, "{req:?} reached the upstream");
            assert_eq!(field(&text, "connection"), Some("close"), "{text:?}");
            assert!(
                field(&text, "ratelimit").is_none(),
                "never limited: {text:?}"
            );
        } else {
            assert_eq!(field(&text, "x-seen-host"), *host, "{req:?}: {text:?}");
            assert_eq!(field(&text, "x-seen-host-count"), Some("1"), "{req:?}");
        }
    }
    let stats = gw.gateway().proxy().stats();
    assert_eq!(
        stats.bad_host.load(std::sync::atomic::Ordering::Relaxed),
        refused
    );
    assert_eq!(
        stats.bad_gateway.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    gw.shutdown().await;
}

/// One HTTP/2 request to `addr` (on 127.0.0.1) for `uri` with `hosts` as
/// `Host` lines: the status and the `Host` the upstream saw.
async fn h2_get(addr: std::net::SocketAddr, uri: &str, hosts: &[&str]) -> (u16, Option<String>) {
    assert!(addr.ip().is_loopback(), "{addr}");
    let mut send = h2_connect(addr.port()).await;
    let mut req = http::Request::builder().uri(uri);
    for h in hosts {
        req = req.header("host", *h);
    }
    let res = send
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let host = res
        .headers()
        .get("x-seen-host")
        .map(|v| v.to_str().unwrap().to_owned());
    (res.status().as_u16(), host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_and_host_must_agree() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let ok = |h: &str| (200, Some(h.to_owned()));
    assert_eq!(h2_get(a, "http://a.example/", &[]).await, ok("a.example"));
    assert_eq!(
        h2_get(a, "http://a.example/", &["a.example"]).await,
        ok("a.example")
    );
    // The same authority, written differently (RFC 3986 §6.2).
    assert_eq!(
        h2_get(a, "http://a.example/", &["A.EXAMPLE:80"]).await,
        ok("A.EXAMPLE:80")
    );
    // No :authority: the one Host names the authority.
    assert_eq!(h2_get(a, "/", &["a.example"]).await, ok("a.example"));
    let before = up.requests();
    assert_eq!(
        h2_get(a, "/", &[]).await,
        (400, None),
        "no authority at all"
    );
    for hosts in [
        &["b.example"][..],
        &["a.example:81"],
        &["a.example", "a.example"],
        &["a/b"],
    ] {
        assert_eq!(
            h2_get(a, "http://a.example/", hosts).await,
            (400, None),
            "{hosts:?}"
        );
    }
    assert_eq!(up.requests(), before, "none reached the upstream");
    gw.shutdown().await;
}
