//! TLS end to end with throwaway certificates: HTTPS clients → the
//! gateway terminating TLS (ALPN h2 and http/1.1) → HTTPS upstreams
//! (HTTP/1.1, and HTTP/2 by ALPN), bad certificates on either side, a
//! client certificate towards the upstream, and a certificate renewed
//! while running.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use support::tls::{Leaf, Pki, https_client, presented, tls_upstream};
use support::{ConfigFile, gateway};

const LIMITED: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {name: per-key, algorithm: sliding_log, requests: 2, per: 1m}
"#;

fn config(listener: &str, upstream: &str, extra: &str) -> String {
    format!("{LIMITED}gateway:\n{listener}  upstream:\n{upstream}{extra}")
}

/// The `gateway:` lines of a listener serving `leaf`'s certificate.
fn listener_tls(leaf: &Leaf) -> String {
    format!(
        "  tls: {{cert: {}, key: {}}}\n",
        leaf.cert.display(),
        leaf.key.display()
    )
}

fn get(url: &str, key: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .header("x-limit-key", key)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_client_to_https_upstream_over_http1_and_http2() {
    let pki = Pki::new("edge");
    let front = pki.leaf("gateway");
    let back = pki.leaf("upstream");
    for (protocol, alpn) in [
        ("http1", vec![&b"http/1.1"[..]]),
        ("http2", vec![&b"h2"[..]]),
    ] {
        let up = tls_upstream(&back, &alpn, None).await;
        let url = format!("https://localhost:{}", up.addr.port());
        let text = config(
            &listener_tls(&front),
            &format!(
                "    url: {url}\n    protocol: {protocol}\n    tls: {{ca: {}}}\n",
                pki.ca_file.display()
            ),
            "server: {reload_interval: 0}\n",
        );
        let file = ConfigFile::new(&text);
        let gw = gateway(&file, &url).await;
        let front_url = format!("https://localhost:{}/hello", gw.addr().port());
        for (http2, want) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
            let client = https_client(pki.roots(), http2);
            let key = format!("{protocol}-{http2}");
            for i in 0..3 {
                let res = client.request(get(&front_url, &key)).await.unwrap();
                assert_eq!(res.version(), want, "ALPN picks the client's protocol");
                let h = res.headers().clone();
                if i < 2 {
                    assert_eq!(res.status(), StatusCode::OK, "{protocol} {want:?} #{i}");
                    let seen = h["x-seen-version"].to_str().unwrap();
                    let expect = if protocol == "http1" {
                        "HTTP/1.1"
                    } else {
                        "HTTP/2.0"
                    };
                    assert_eq!(seen, expect, "upstream protocol over TLS");
                    assert_eq!(h["x-seen-proto"], "https", "X-Forwarded-Proto");
                    assert!(
                        h["x-seen-forwarded"]
                            .to_str()
                            .unwrap()
                            .contains("proto=https"),
                        "{h:?}"
                    );
                    let body = res.into_body().collect().await.unwrap().to_bytes();
                    assert_eq!(&body[..], b"ok");
                } else {
                    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
                }
                assert!(h.contains_key("ratelimit"), "{h:?}");
            }
        }
        assert!(up.requests() >= 4);
        // One TLS connection, kept alive and used again by every request.
        assert_eq!(up.connections(), 1, "{protocol}");
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_reject_a_certificate_they_do_not_trust() {
    let pki = Pki::new("edge");
    let other = Pki::new("other");
    let front = pki.leaf("gateway");
    let up = support::upstream().await;
    let url = format!("http://{}", up.addr);
    let text = config(
        &listener_tls(&front),
        &format!("    url: {url}\n"),
        "server: {reload_interval: 0}\n",
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &url).await;
    let front_url = format!("https://localhost:{}/", gw.addr().port());
    for http2 in [false, true] {
        let err = https_client(other.roots(), http2)
            .request(get(&front_url, "k"))
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
    }
    // Cleartext HTTP on the TLS port is not served either.
    let raw = support::raw(
        gw.addr(),
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(!raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert_eq!(up.requests(), 0);
    // The gateway still serves clients that trust it.
    let res = https_client(pki.roots(), false)
        .request(get(&front_url, "k"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_upstream_is_a_bad_gateway() {
    let pki = Pki::new("edge");
    let rogue = Pki::new("rogue");
    let up = tls_upstream(&rogue.leaf("upstream"), &[], None).await;
    let url = format!("https://127.0.0.1:{}", up.addr.port());
    let text = config(
        "",
        &format!(
            "    url: {url}\n    tls: {{ca: {}}}\n",
            pki.ca_file.display()
        ),
        "server: {reload_interval: 0}\n",
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &url).await;
    let r = support::h1()
        .get(format!("http://{}/", gw.addr()))
        .header("x-limit-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(r.headers().contains_key("ratelimit"), "limited, then 502");
    assert_eq!(up.requests(), 0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_to_the_upstream() {
    let pki = Pki::new("edge");
    let clients = Pki::new("clients");
    let up = tls_upstream(&pki.leaf("upstream"), &[], Some(&clients)).await;
    let url = format!("https://127.0.0.1:{}", up.addr.port());
    let me = clients.leaf("gateway-client");
    for (with_cert, want) in [(true, 200), (false, 502)] {
        let identity = if with_cert {
            format!(", cert: {}, key: {}", me.cert.display(), me.key.display())
        } else {
            String::new()
        };
        let text = config(
            "",
            &format!(
                "    url: {url}\n    tls: {{ca: {}{identity}}}\n",
                pki.ca_file.display()
            ),
            "server: {reload_interval: 0}\n",
        );
        let file = ConfigFile::new(&text);
        let gw = gateway(&file, &url).await;
        let r = support::h1()
            .get(format!("http://{}/", gw.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "client certificate: {with_cert}");
        gw.shutdown().await;
    }
}

/// A gateway terminating TLS with `pki`'s leaf `first`, polling its
/// files per `server` (a `server:` line), with its certificate's renewal
/// (`next`) renamed into place: the gateway and its files, and the
/// certificates presented before and to be presented after.
struct Renewal {
    gw: floodgate_gateway::Running,
    pki: Pki,
    key: std::path::PathBuf,
    before: Vec<u8>,
    after: Vec<u8>,
    _files: (ConfigFile, support::Upstream),
}

async fn renewal(server: &str) -> Renewal {
    let pki = Pki::new("edge");
    let first = pki.leaf("gateway");
    let up = support::upstream().await;
    let url = format!("http://{}", up.addr);
    let text = config(&listener_tls(&first), &format!("    url: {url}\n"), server);
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &url).await;
    let before = presented(gw.addr(), pki.roots()).await;
    assert_eq!(before, pem_der(&first.cert));
    // A new certificate and key replace the files (renamed into place).
    let next = pki.leaf("next");
    std::fs::rename(&next.key, &first.key).unwrap();
    std::fs::rename(&next.cert, &first.cert).unwrap();
    let after = pem_der(&first.cert);
    assert_ne!(after, before);
    Renewal {
        gw,
        pki,
        key: first.key,
        before,
        after,
        _files: (file, up),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let r = renewal("server: {reload_interval: 50ms}\n").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if presented(r.gw.addr(), r.pki.roots()).await == r.after {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Half-written files (a key that does not match) keep the current one.
    std::fs::write(&r.key, std::fs::read(&r.pki.leaf("stray").key).unwrap()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(presented(r.gw.addr(), r.pki.roots()).await, r.after);
    r.gw.shutdown().await;
}

/// With polling off, a renewed certificate is served once a reload is
/// asked for (what SIGHUP does), at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_asked_for_rereads_the_certificate() {
    let r = renewal("server: {reload_interval: 0}\n").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        presented(r.gw.addr(), r.pki.roots()).await,
        r.before,
        "not polled"
    );
    r.gw.reload_now();
    assert_eq!(presented(r.gw.addr(), r.pki.roots()).await, r.after);
    r.gw.shutdown().await;
}

fn pem_der(path: &std::path::Path) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_file(path)
        .unwrap()
        .to_vec()
}

/// With `gateway.tls.client_ca`, only clients presenting a certificate of
/// that authority reach the upstream (mTLS); the others are refused at the
/// handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ca_refuses_clients_without_its_certificate() {
    use floodgate_testkit::tls::{client_config, https_get};
    let (pki, clients) = (Pki::new("edge"), Pki::new("clients"));
    let (front, client) = (pki.leaf("gateway"), clients.leaf("client"));
    let up = support::upstream().await;
    let url = format!("http://{}", up.addr);
    let listener = format!(
        "  tls: {{cert: {}, key: {}, client_ca: {}}}\n",
        front.cert.display(),
        front.key.display(),
        clients.ca_file.display()
    );
    let text = config(
        &listener,
        &format!("    url: {url}\n"),
        "server: {reload_interval: 0}\n",
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &url).await;
    let port = gw.addr().port();
    let with = client_config(pki.roots(), Some(&client), &[]);
    assert_eq!(https_get(port, "/", with).await.unwrap(), 200);
    let without = https_get(port, "/", client_config(pki.roots(), None, &[])).await;
    assert!(without.is_err(), "{without:?}");
    let stranger = pki.leaf("stranger");
    let other = https_get(port, "/", client_config(pki.roots(), Some(&stranger), &[])).await;
    assert!(other.is_err(), "{other:?}");
    assert_eq!(up.requests(), 1);
    gw.shutdown().await;
}
