//! The gRPC listener on a Unix socket (`server.grpc_uds`, envoyproxy/
//! ratelimit's `GRPC_UDS`): instead of TCP, answered by grpcio over
//! `unix:`, its permissions what the umask leaves, removed at shutdown; a
//! path already taken is an error naming it, the file left alone.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use floodgate_runtime::settings::Env;
use floodgate_server::RlsSettings;

use crate::support::{python, start, try_start};

/// The process's umask, as the kernel reports it.
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_calls_over_the_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("grpc.sock");
    let service = start(dir.path(), &format!("  grpc_uds: {}\n", socket.display())).await;
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o777 & !umask());
    // Instead of TCP, as envoyproxy/ratelimit.
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", service.grpc)).await;
    assert!(tcp.is_err(), "the TCP listener is there too");

    // grpcio's default authority over `unix:` (the path, percent-encoded)
    // is refused by HTTP/2's rules: the client names one (docs/service.md).
    let target = format!("unix:{}", socket.display());
    let args = vec![target, "--authority".into(), "localhost".into()];
    let out = python("grpc_call.py", args).await;
    assert_eq!(out, ["OK OK"]);
    service.stop().await.unwrap();
    assert!(!socket.exists(), "the socket is removed at shutdown");
}

#[tokio::test]
async fn a_path_that_exists_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken.sock");
    std::fs::write(&taken, "another process's").unwrap();
    let server = format!("  grpc_uds: {}\n", taken.display());
    let Err(e) = try_start(dir.path(), &server).await else {
        panic!("started over an existing file");
    };
    let e = e.to_string();
    assert!(e.contains(&taken.display().to_string()), "{e}");
    assert!(e.contains("exists"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&taken).unwrap(),
        "another process's"
    );
}

#[test]
fn envoy_s_grpc_uds_is_read() {
    let env = |k: &str| (k == "GRPC_UDS").then(|| "/run/ratelimit.sock".to_owned());
    let s = RlsSettings::resolve(
        &floodgate_runtime::settings::Flags::new(),
        &Env::new(&env),
        &[],
    )
    .unwrap();
    assert_eq!(
        s.grpc_uds.unwrap(),
        std::path::Path::new("/run/ratelimit.sock")
    );
}
