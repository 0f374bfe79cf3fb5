//! `rediss://`: a real redis-server with TLS (certificates made by the
//! `openssl` tool for this test), trusted through a configured CA, with and
//! without a client certificate.

#![cfg(feature = "tls")]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Server, blank, free_port, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::Backend;
use floodgate_redis::{RedisBackend, RedisConfig, TlsFiles};

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("the `openssl` tool is installed");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate.
fn certificates(dir: &Path) {
    openssl(dir, &["genrsa", "-out", "ca.key", "2048"]);
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-sha256",
            "-days",
            "2",
            "-subj",
            "/CN=floodgate test CA",
            "-out",
            "ca.crt",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    for name in ["server", "client"] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(dir, &["genrsa", "-out", &key, "2048"]);
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                &key,
                "-subj",
                "/CN=127.0.0.1",
                "-out",
                &csr,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-sha256",
                "-extfile",
                "ext.cnf",
                "-out",
                &crt,
            ],
        );
    }
}

async fn decide(config: &RedisConfig) -> Result<bool, String> {
    let b = RedisBackend::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(60)).unwrap());
    let mut out = [blank()];
    b.decide(
        &[item(b"tls", b"tls:a", &limit, 1)],
        Timestamp::ZERO,
        Apply::Commit,
        &mut out,
    )
    .await
    .map(|d| d.is_allowed())
    .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_and_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let tls_port = free_port().to_string();
    let (cert, key, ca) = (p("server.crt"), p("server.key"), p("ca.crt"));
    let server = Server::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "optional",
    ]);
    let _ = &server;
    let mut config = RedisConfig {
        urls: vec![format!("rediss://127.0.0.1:{tls_port}")],
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        tls: TlsFiles {
            ca_file: Some(d.join("ca.crt")),
            ..TlsFiles::default()
        },
        ..RedisConfig::default()
    };
    assert_eq!(decide(&config).await, Ok(true));
    // With a client certificate too (mutual TLS).
    config.tls.client_cert_file = Some(d.join("client.crt"));
    config.tls.client_key_file = Some(d.join("client.key"));
    assert_eq!(decide(&config).await, Ok(true));
    // The system's trust store does not know this CA: refused.
    config.tls = TlsFiles::default();
    assert!(decide(&config).await.is_err());
    // A certificate without its key is a configuration error.
    config.tls.client_cert_file = Some(d.join("client.crt"));
    let e = decide(&config).await.unwrap_err();
    assert!(e.contains("TLS"), "{e}");
}
