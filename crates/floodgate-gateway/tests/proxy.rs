//! End to end through real sockets: a hyper upstream, the gateway, and
//! reqwest clients over HTTP/1.1 and HTTP/2.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use support::{ConfigFile, eventually, gateway, get_ok, h1, h2, header, pattern, upstream};

const LIMITED: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
domains:
  - domain: gw
    descriptors:
      # A sliding log, not the default fixed window: a test that crosses a
      # minute boundary must not see its count reset.
      - key: key
        rate_limit: {name: per-key, algorithm: sliding_log, requests: 3, per: 1m}
      - key: key
        value: shaped
        rate_limit: {name: shaped, algorithm: shaper, rate: 2r/s, burst: 5}
server: {reload_interval: 0}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_http2_clients_and_upstreams() {
    let up = upstream().await;
    for (protocol, suffix) in [
        ("http1", ""),
        (
            "http2",
            "\ngateway: {upstream: {url: http://127.0.0.1:1, protocol: http2}}\n",
        ),
    ] {
        let file = ConfigFile::new(&format!("{LIMITED}{suffix}"));
        let gw = gateway(&file, &format!("http://{}", up.addr)).await;
        let url = format!("http://{}/hello?x=1", gw.addr());
        for (client, want) in [
            (h1(), reqwest::Version::HTTP_11),
            (h2(), reqwest::Version::HTTP_2),
        ] {
            let key = format!("{protocol}-{want:?}");
            for i in 0..4 {
                let r = client
                    .get(&url)
                    .header("x-limit-key", &key)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.version(), want);
                assert!(
                    header(&r, "ratelimit-policy").is_some(),
                    "headers on every response"
                );
                if i < 3 {
                    assert_eq!(r.status(), 200, "{protocol} {want:?} #{i}");
                    let seen = header(&r, "x-seen-version").unwrap();
                    let expect = if protocol == "http1" {
                        "HTTP/1.1"
                    } else {
                        "HTTP/2.0"
                    };
                    assert_eq!(seen, expect);
                    let current = header(&r, "ratelimit").unwrap();
                    assert!(
                        current.starts_with(&format!("\"per-key\";r={}", 2 - i)),
                        "{current}"
                    );
                    assert!(header(&r, "keep-alive").is_none(), "hop-by-hop dropped");
                    assert_eq!(r.text().await.unwrap(), "ok");
                } else {
                    assert_eq!(r.status(), 429);
                    assert!(header(&r, "retry-after").is_some());
                    assert_eq!(
                        header(&r, "x-seen-version"),
                        None,
                        "never reached the upstream"
                    );
                }
            }
        }
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_is_reused_both_sides() {
    let up = upstream().await;
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    // One client connection, many requests, one upstream connection.
    let text = support::raw(
        gw.addr(),
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3, "{text}");
    let c = h1();
    for _ in 0..20 {
        get_ok(&c, gw.addr(), "/").await;
    }
    // 23 requests one after the other: the pool reuses its connection (a
    // second one may open when a request overtakes the return of the
    // first to the pool).
    assert!(
        up.connections() <= 2,
        "{} upstream connections",
        up.connections()
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_streaming_bodies_are_byte_exact() {
    let up = upstream().await;
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let n: u64 = 20 << 20;
    let body: Vec<u8> = (0..n).map(pattern).collect();
    for client in [h1(), h2()] {
        // Up and back: 20 MB echoed.
        let r = client
            .post(format!("http://{}/echo", gw.addr()))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let back = r.bytes().await.unwrap();
        assert_eq!(back.len(), body.len());
        assert!(back == body, "echoed body differs");
        // Down: 20 MB generated, streamed in chunks.
        let r = client
            .get(format!("http://{}/big?n={n}", gw.addr()))
            .send()
            .await
            .unwrap();
        let got = r.bytes().await.unwrap();
        assert_eq!(got.len() as u64, n);
        assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i as u64)));
        // A chunked upload of unknown length, sent in pieces over time.
        let pieces: Vec<Result<Bytes, std::io::Error>> = (0..50)
            .map(|i| Ok(Bytes::from(vec![i as u8; 10_000 + i])))
            .collect();
        let expect: Vec<u8> = pieces
            .iter()
            .flat_map(|p| p.as_ref().unwrap().to_vec())
            .collect();
        let stream = futures_util::StreamExt::then(futures_util::stream::iter(pieces), |p| async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            p
        });
        let r = client
            .post(format!("http://{}/echo", gw.addr()))
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap().to_vec(), expect);
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502_and_slow_is_504() {
    let up = upstream().await;
    let dead = floodgate_testkit::free_port();
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://127.0.0.1:{dead}")).await;
    let r = h1()
        .get(format!("http://{}/", gw.addr()))
        .header("x-limit-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(
        header(&r, "ratelimit-policy").is_some(),
        "headers on gateway errors too"
    );
    assert_eq!(
        gw.gateway()
            .proxy()
            .stats()
            .bad_gateway
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    gw.shutdown().await;

    let slow = format!(
        "{LIMITED}\ngateway: {{upstream: {{url: http://127.0.0.1:1, response_timeout: 300ms}}}}\n"
    );
    let file = ConfigFile::new(&slow);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let started = Instant::now();
    let r = h2()
        .get(format!("http://{}/slow?ms=3000", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(2));
    let r = h1()
        .get(format!("http://{}/slow?ms=10", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a fast answer is not a timeout");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_and_hop_by_hop_headers() {
    let up = upstream().await;
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let r = h1()
        .get(format!("http://{}/", gw.addr()))
        .header("host", "app.example")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .header("connection", "x-hop")
        .header("x-hop", "secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-seen-xff"), Some("203.0.113.9, 127.0.0.1"));
    // Not through a trusted proxy: the client's claim is replaced.
    assert_eq!(header(&r, "x-seen-proto"), Some("http"));
    assert_eq!(
        header(&r, "x-seen-forwarded"),
        Some("for=127.0.0.1;proto=http;host=\"app.example\"")
    );
    assert_eq!(header(&r, "x-seen-host"), Some("app.example"));
    assert_eq!(header(&r, "x-seen-hop"), None);
    assert_eq!(header(&r, "x-seen-connection"), None);
    // HTTP/2 clients' :authority becomes the upstream's Host.
    let r = h2()
        .get(format!("http://{}/", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "x-seen-host"), Some(&*gw.addr().to_string()));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_proto_is_kept_only_through_a_trusted_proxy() {
    let up = upstream().await;
    let file = ConfigFile::new(
        r#"
http:
  domain: gw
  client_ip: {trusted_hops: 1}
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {requests: 100, per: 1m}
server: {reload_interval: 0}
"#,
    );
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let send = |xff: Option<&'static str>| {
        let url = format!("http://{}/", gw.addr());
        async move {
            let mut req = h1()
                .get(url)
                .header("x-limit-key", "k")
                .header("x-forwarded-proto", "https");
            if let Some(xff) = xff {
                req = req.header("x-forwarded-for", xff);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            header(&r, "x-seen-proto").map(str::to_owned)
        }
    };
    // The client named by the trusted hop differs from the peer: the
    // request came through that proxy, whose scheme is kept.
    assert_eq!(send(Some("203.0.113.9")).await.as_deref(), Some("https"));
    // No forwarding hop: the claim is replaced by the connection's scheme.
    assert_eq!(send(None).await.as_deref(), Some("http"));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaper_delays_and_a_client_leaving_mid_delay() {
    let up = upstream().await;
    let file = ConfigFile::new(LIMITED);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let url = format!("http://{}/", gw.addr());
    let c = h1();
    // 2r/s: the first passes, the second waits 500 ms.
    let first = Instant::now();
    let r = c
        .get(&url)
        .header("x-limit-key", "shaped")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let before = up.requests();
    // The client gives up after 100 ms of a 500 ms delay.
    let gone = c
        .get(&url)
        .header("x-limit-key", "shaped")
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gone.is_err());
    let limiter = gw.gateway().limiter();
    let layer = limiter.as_ref().as_ref().unwrap().layer();
    // The delay slot is freed at once, not when the delay ends.
    let freed = eventually(Duration::from_secs(10), || layer.delayed() == 0).await;
    let when = first.elapsed();
    assert!(
        freed && when < Duration::from_millis(500),
        "the delay slot was freed {when:?} after the first request"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        up.requests(),
        before,
        "the upstream never saw the abandoned request"
    );
    // A patient client is delayed, then served.
    let started = Instant::now();
    let r = c
        .get(&url)
        .header("x-limit-key", "shaped")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    gw.shutdown().await;
}
