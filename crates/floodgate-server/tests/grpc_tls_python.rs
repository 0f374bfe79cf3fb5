//! The gRPC listener's TLS and mTLS seen from grpcio (Python), as
//! envoyproxy/ratelimit's clients see it: a call over TLS, cleartext
//! refused, a client certificate required from the configured authority
//! (and carrying the configured SAN), a renewed certificate served to the
//! next channel; and the certificates checked at startup.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::tls::{Leaf, Pki};

use crate::support::{python, start, try_start};

/// The `server:` lines of TLS on the gRPC listener with `leaf`, asking
/// for a client certificate from `client_ca` (with `client_san`) if given.
fn grpc_tls(leaf: &Leaf, client_ca: Option<&Path>, client_san: Option<&str>) -> String {
    let mut tls = format!(
        "  tls:\n    grpc:\n      cert: {}\n      key: {}\n",
        leaf.cert.display(),
        leaf.key.display()
    );
    if let Some(ca) = client_ca {
        tls += &format!("      client_ca: {}\n", ca.display());
    }
    if let Some(san) = client_san {
        tls += &format!("      client_san: {san}\n");
    }
    tls
}

/// One grpcio call on a new channel to `port`: over TLS trusting `ca`
/// (cleartext if none), presenting `client` if any.
async fn call(port: u16, ca: Option<&Path>, client: Option<&Leaf>) -> String {
    let mut args = vec![format!("localhost:{port}")];
    if let Some(ca) = ca {
        args.extend(["--ca".into(), ca.display().to_string()]);
    }
    if let Some(c) = client {
        args.extend(["--cert".into(), c.cert.display().to_string()]);
        args.extend(["--key".into(), c.key.display().to_string()]);
    }
    python("grpc_call.py", args).await.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_over_tls_and_cleartext_refused() {
    let pki = Pki::new("serve");
    let service = start(pki.dir.path(), &grpc_tls(&pki.leaf("grpc"), None, None)).await;
    let ca = Some(pki.ca_file.as_path());
    assert_eq!(call(service.grpc, ca, None).await, "OK OK");
    let cleartext = call(service.grpc, None, None).await;
    assert!(cleartext.starts_with("ERR UNAVAILABLE"), "{cleartext}");
    // A server certificate from an authority the client does not trust.
    let other = Pki::new("other");
    let untrusted = call(service.grpc, Some(other.ca_file.as_path()), None).await;
    assert!(untrusted.starts_with("ERR UNAVAILABLE"), "{untrusted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_with_mtls_and_a_required_san() {
    let pki = Pki::new("serve");
    let clients = Pki::new("clients");
    let client = clients.leaf_for("client", &["client.example.com"]);
    let elsewhere = clients.leaf_for("elsewhere", &["elsewhere.example.com"]);
    let strangers = Pki::new("strangers");
    let stranger = strangers.leaf_for("stranger", &["client.example.com"]);
    let ca = Some(pki.ca_file.as_path());
    let leaf = pki.leaf("grpc");

    let mtls = grpc_tls(&leaf, Some(&clients.ca_file), None);
    let service = start(pki.dir.path(), &mtls).await;
    assert_eq!(call(service.grpc, ca, Some(&client)).await, "OK OK");
    assert_eq!(call(service.grpc, ca, Some(&elsewhere)).await, "OK OK");
    for refused in [None, Some(&stranger)] {
        let out = call(service.grpc, ca, refused).await;
        assert!(out.starts_with("ERR UNAVAILABLE"), "{out}");
    }
    service.stop().await.unwrap();

    let san = grpc_tls(&leaf, Some(&clients.ca_file), Some("client.example.com"));
    let service = start(pki.dir.path(), &san).await;
    assert_eq!(call(service.grpc, ca, Some(&client)).await, "OK OK");
    for refused in [None, Some(&stranger), Some(&elsewhere)] {
        let out = call(service.grpc, ca, refused).await;
        assert!(out.starts_with("ERR UNAVAILABLE"), "{out}");
    }
}

/// The live certificate files replaced by `leaf`'s, renamed into place as
/// cert-manager does.
fn renew(live: &Leaf, leaf: &Leaf, dir: &Path) {
    let staged = dir.join("staged");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::copy(&leaf.cert, staged.join("c")).unwrap();
    std::fs::copy(&leaf.key, staged.join("k")).unwrap();
    std::fs::rename(staged.join("k"), &live.key).unwrap();
    std::fs::rename(staged.join("c"), &live.cert).unwrap();
}

/// A certificate from another authority replaces the served one on disk:
/// a new grpcio channel trusting only that authority succeeds, without a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_to_the_next_channel() {
    let (first, second) = (Pki::new("first"), Pki::new("second"));
    let live = Leaf {
        cert: first.dir.path().join("live.crt"),
        key: first.dir.path().join("live.key"),
    };
    renew(&live, &first.leaf("grpc"), first.dir.path());
    let service = start(first.dir.path(), &grpc_tls(&live, None, None)).await;
    let (old_ca, new_ca) = (
        Some(first.ca_file.as_path()),
        Some(second.ca_file.as_path()),
    );
    assert_eq!(call(service.grpc, old_ca, None).await, "OK OK");

    renew(&live, &second.leaf("grpc"), first.dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(service.grpc, new_ca, None).await != "OK OK" {
        assert!(
            Instant::now() < deadline,
            "the new certificate is never served"
        );
    }
    let old = call(service.grpc, old_ca, None).await;
    assert!(old.starts_with("ERR UNAVAILABLE"), "{old}");
}

/// Wrong certificates at startup: a clear error naming the files.
#[tokio::test]
async fn wrong_certificates_fail_startup_naming_the_files() {
    let pki = Pki::new("serve");
    let (leaf, other) = (pki.leaf("grpc"), pki.leaf("other"));
    let mismatched = Leaf {
        cert: leaf.cert.clone(),
        key: other.key.clone(),
    };
    let tls = grpc_tls(&mismatched, None, None);
    let e = try_start(pki.dir.path(), &tls)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("grpc.crt") && e.contains("other.key"), "{e}");

    // A directory where the certificate should be: unreadable.
    let unreadable = Leaf {
        cert: pki.dir.path().to_owned(),
        key: leaf.key.clone(),
    };
    let tls = grpc_tls(&unreadable, None, None);
    let e = try_start(pki.dir.path(), &tls)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("cannot read") && e.contains(&pki.dir.path().display().to_string()),
        "{e}"
    );

    // A client SAN without the client CA it narrows.
    let tls = grpc_tls(&leaf, None, Some("client.example.com"));
    let e = try_start(pki.dir.path(), &tls)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("client SAN") && e.contains("client_ca"), "{e}");
}
