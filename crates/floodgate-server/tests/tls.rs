//! TLS on every listener of the service: a gRPC call over TLS, a client
//! without a certificate refused where one is required (mTLS), the HTTP
//! and admin listeners over TLS, and a renewed certificate picked up
//! without a restart.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_runtime::settings::{Env, Flags, Value};
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_testkit::free_port;
use floodgate_testkit::grpc::{grpc_frame, grpc_status, rls_request};
use floodgate_testkit::tls::{
    ClientConfig, Leaf, Pki, client_config, h2_tls_connect, https_get, presented, tls_connect,
};
use http_body_util::Full;
use prost::Message;
use tokio::sync::oneshot;

const POLICY: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 100, per: 1m}
";

/// The service's ports.
struct Ports {
    grpc: u16,
    http: u16,
    admin: u16,
}

/// A running service; stops when dropped.
struct Running {
    ports: Ports,
    _stop: oneshot::Sender<()>,
}

/// `server:` settings with the listeners on free ports, then `tls`.
fn config(ports: &Ports, tls: &str) -> String {
    let Ports { grpc, http, admin } = ports;
    format!(
        "server:\n  grpc: 127.0.0.1:{grpc}\n  http: 127.0.0.1:{http}\n  admin: 127.0.0.1:{admin}\n  \
         reload_interval: 100ms\n  tls:\n{tls}{POLICY}"
    )
}

/// The TLS of one listener, as the `server.tls` section gives it.
fn listener_tls(name: &str, leaf: &Leaf, client_ca: Option<&Path>) -> String {
    let ca = client_ca.map_or(String::new(), |ca| format!(", client_ca: {}", ca.display()));
    format!(
        "    {name}: {{cert: {}, key: {}{ca}}}\n",
        leaf.cert.display(),
        leaf.key.display()
    )
}

/// Starts the service on `tls` (the `server.tls` section's lines) in the
/// background, and waits until its TLS listener `ready_on` answers
/// handshakes.
async fn start(dir: &Path, tls: &str, ready_on: impl Fn(&Ports) -> u16) -> Running {
    let ports = Ports {
        grpc: free_port(),
        http: free_port(),
        admin: free_port(),
    };
    let path = dir.join("floodgate.yaml");
    std::fs::write(&path, config(&ports, tls)).unwrap();
    let mut flags = Flags::new();
    flags.set("config", Value::one(path.display().to_string()));
    let sections = <floodgate_server::Rls as floodgate_runtime::host::Frontend>::sections();
    let loaded = floodgate_server::load(&flags, &Env::new(&|_| None), &sections, &[]).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        floodgate_server::serve(loaded, None, shutdown)
            .await
            .unwrap();
    });
    let port = ready_on(&ports);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the listener on {port} never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Running { ports, _stop: stop }
}

/// One `ShouldRateLimit` for `user` as a gRPC frame.
fn rls_call(user: &str) -> Full<Bytes> {
    let request = RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            limit: None,
            hits_addend: None,
            is_negative_hits: false,
        }],
        hits_addend: 1,
    };
    Full::new(grpc_frame(&request.encode_to_vec()))
}

/// The grpc-status of a `ShouldRateLimit` over TLS with `config`.
async fn call_over_tls(port: u16, config: ClientConfig) -> Result<String, String> {
    let mut send = h2_tls_connect(port, config)
        .await
        .map_err(|e| e.to_string())?;
    let res = send
        .send_request(rls_request(port, rls_call("alice")))
        .await
        .map_err(|e| e.to_string())?;
    Ok(grpc_status(res).await)
}

#[tokio::test]
async fn a_grpc_call_over_tls_and_a_client_without_certificate_refused() {
    let pki = Pki::new("serve");
    let clients = Pki::new("clients");
    let (server, client) = (pki.leaf("grpc"), clients.leaf("client"));
    let tls = listener_tls("grpc", &server, Some(&clients.ca_file));
    let running = start(pki.dir.path(), &tls, |p| p.grpc).await;
    let port = running.ports.grpc;

    let with_certificate = client_config(pki.roots(), Some(&client), &[]);
    assert_eq!(call_over_tls(port, with_certificate).await.unwrap(), "0");

    // TLS 1.3: the refusal of the client comes with the first read.
    let without = client_config(pki.roots(), None, &[]);
    let refused = call_over_tls(port, without).await;
    assert!(refused.is_err(), "{refused:?}");
    // A certificate from another authority is refused too.
    let stranger = pki.leaf("stranger");
    let other = client_config(pki.roots(), Some(&stranger), &[]);
    let refused = call_over_tls(port, other).await;
    assert!(refused.is_err(), "{refused:?}");
    // Cleartext HTTP/2 does not reach the service.
    let cleartext = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
    let io = hyper_util::rt::TokioIo::new(cleartext.unwrap());
    let exec = hyper_util::rt::TokioExecutor::new();
    let handshake = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(exec, io).await;
    if let Ok((mut send, conn)) = handshake {
        tokio::spawn(conn);
        let res = send.send_request(rls_request(port, rls_call("bob"))).await;
        assert!(res.is_err(), "a cleartext call was answered");
    }
}

#[tokio::test]
async fn the_http_and_admin_listeners_over_tls() {
    let pki = Pki::new("serve");
    let leaf = pki.leaf("web");
    let tls = format!(
        "{}{}",
        listener_tls("http", &leaf, None),
        listener_tls("admin", &leaf, None)
    );
    let running = start(pki.dir.path(), &tls, |p| p.admin).await;
    let Ports { http, admin, .. } = running.ports;
    let config = || client_config(pki.roots(), None, &[]);
    assert_eq!(
        https_get(http, "/healthcheck", config()).await.unwrap(),
        200
    );
    assert_eq!(https_get(admin, "/metrics", config()).await.unwrap(), 200);
    // The gRPC listener stays in cleartext: a TLS handshake fails there.
    assert!(tls_connect(running.ports.grpc, config()).await.is_err());
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let pki = Pki::new("serve");
    let (first, renewed) = (pki.leaf("first"), pki.leaf("renewed"));
    let live = Leaf {
        cert: pki.dir.path().join("live.crt"),
        key: pki.dir.path().join("live.key"),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let running = start(pki.dir.path(), &listener_tls("grpc", &live, None), |p| {
        p.grpc
    })
    .await;
    let port = running.ports.grpc;
    let der = |leaf: &Leaf| floodgate_testkit::tls::chain(&leaf.cert)[0].to_vec();
    assert_eq!(presented(port, pki.roots()).await, der(&first));

    // Renewed in place, as cert-manager does: a new pair renamed over it.
    let staged = pki.dir.path().join("staged");
    std::fs::create_dir(&staged).unwrap();
    std::fs::copy(&renewed.cert, staged.join("c")).unwrap();
    std::fs::copy(&renewed.key, staged.join("k")).unwrap();
    std::fs::rename(staged.join("k"), &live.key).unwrap();
    std::fs::rename(staged.join("c"), &live.cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while presented(port, pki.roots()).await != der(&renewed) {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate is never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
