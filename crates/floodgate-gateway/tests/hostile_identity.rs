//! A hostile client against the identity's header reads: a `host` key
//! spelled differently (case, final dot, port) or sent as HTTP/2's
//! `:authority` is one key; a keyed field sent twice is refused; a keyed
//! field spelled with `_` for `-` never reaches the upstream.

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
    - [api_key]
domains:
  - domain: gw
    descriptors:
      - key: host
        value: app.example
        rate_limit: {name: per-host, algorithm: sliding_log, requests: 1, per: 1h}
      - key: api_key
        rate_limit: {name: per-key, algorithm: sliding_log, requests: 1, per: 1h}
server: {reload_interval: 0}
"#;

/// One HTTP/1.1 request with `fields` (raw lines), on its own connection.
fn send(addr: std::net::SocketAddr, fields: &str) -> String {
    let req = format!("GET / HTTP/1.1\r\n{fields}Connection: close\r\n\r\n");
    raw(addr, req.as_bytes(), Duration::from_secs(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_limit_holds_whatever_the_spelling_or_protocol() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let first = send(a, "Host: app.example\r\n");
    assert_eq!(status_of(&first), Some(200), "{first}");
    for host in [
        "APP.example",
        "app.example.",
        "app.example:80",
        "App.Example.:080",
        "app.example:",
        "app.example:8080",
    ] {
        let text = send(a, &format!("Host: {host}\r\n"));
        assert_eq!(status_of(&text), Some(429), "{host}: {text}");
        assert!(field(&text, "x-seen-host").is_none(), "{host} forwarded");
    }
    // Forwarded as sent: another host, another key.
    let other = send(a, "Host: Other.Example.:80\r\n");
    assert_eq!(status_of(&other), Some(200), "{other}");
    assert_eq!(field(&other, "x-seen-host"), Some("Other.Example.:80"));
    // HTTP/2: `:authority` alone, no `Host` field.
    let mut h2 = h2_connect(a.port()).await;
    for uri in [
        "http://app.example/",
        "http://APP.EXAMPLE:80/x",
        "https://app.example:1/",
    ] {
        let req = http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
        let res = h2.send_request(req).await.unwrap();
        assert_eq!(res.status(), 429, "{uri}");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_field_is_read_one_way_by_limiter_and_upstream() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    // Two lines of the key: the limiter keys one, an upstream may read
    // the other. Refused before either.
    for fields in [
        "X-Api-Key: k1\r\nX-Api-Key: k2\r\n",
        "X-Api-Key: k1\r\nAccept: */*\r\nx-api-key: k1\r\n",
        "X-Api-Key: k1\r\nX-Api-Key:\r\n",
    ] {
        let before = up.requests();
        let text = send(a, &format!("Host: h.example\r\n{fields}"));
        assert_eq!(status_of(&text), Some(400), "{fields:?}: {text}");
        assert!(text.contains("more than once"), "{text}");
        assert_eq!(up.requests(), before, "{fields:?} reached the upstream");
    }
    let stats = gw.gateway().proxy().stats();
    assert_eq!(
        stats
            .duplicate_keyed_fields
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    // `X_Api_Key` (read as `X-Api-Key` by CGI-style upstreams): removed,
    // the key the limiter read is the one forwarded.
    let text = send(
        a,
        "Host: h.example\r\nX-Api-Key: k1\r\nX_Api_Key: k2\r\nX_Other: kept\r\n",
    );
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(field(&text, "x-seen-api-key"), Some("k1"));
    assert_eq!(field(&text, "x-seen-underscored"), Some("x_other"));
    // Alone, it is no key either: nothing for an upstream to read.
    let text = send(a, "Host: h.example\r\nX_Api_Key: k3\r\n");
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(field(&text, "x-seen-underscored"), Some(""));
    // k1 is spent, however the request spells its fields.
    let text = send(a, "Host: h.example\r\nx_api-key: k9\r\nx-api-key: k1\r\n");
    assert_eq!(status_of(&text), Some(429), "{text}");
    gw.shutdown().await;
}
