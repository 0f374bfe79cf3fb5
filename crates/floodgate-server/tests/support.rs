//! What the tests of the gRPC listener share: the service started in the
//! background on a configuration, and Python clients (grpcio, raw HTTP/2)
//! run against it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use floodgate_runtime::RuntimeError;
use floodgate_runtime::settings::{Env, Flags, Value};
use floodgate_testkit::free_port;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A policy of 100 calls a minute per user, in domain `api`, and a token
/// bucket of 10 a second, bursts of 20, per user in domain `tokens`.
pub(crate) const POLICY: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 100, per: 1m}
  - domain: tokens
    descriptors:
      - key: user
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}
";

/// A service running in the background; stopped when dropped.
pub(crate) struct Service {
    /// Its gRPC port (unless it listens on a Unix socket).
    pub(crate) grpc: u16,
    /// Its admin port (the dashboard).
    pub(crate) admin: u16,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), RuntimeError>>,
}

impl Service {
    /// Stops it, and its outcome.
    pub(crate) async fn stop(mut self) -> Result<(), RuntimeError> {
        drop(self.stop.take());
        (&mut self.task).await.unwrap()
    }
}

/// The service's configuration in `dir`: its listeners on `grpc`, `http`
/// and `admin`, reloading every 100 ms, `server` (lines of the
/// `server:` section, indented by two) and [`POLICY`].
fn write_config(dir: &Path, (grpc, http, admin): (u16, u16, u16), server: &str) -> PathBuf {
    let path = dir.join("floodgate.yaml");
    let config = format!(
        "server:\n  grpc: 127.0.0.1:{grpc}\n  http: 127.0.0.1:{http}\n  admin: 127.0.0.1:{admin}\n  \
         reload_interval: 100ms\n{server}{POLICY}"
    );
    std::fs::write(&path, config).unwrap();
    path
}

/// Starts the service on `server` (see [`write_config`]) in the
/// background; its outcome if it fails to start.
pub(crate) async fn try_start(dir: &Path, server: &str) -> Result<Service, RuntimeError> {
    let (grpc, http, admin) = (free_port(), free_port(), free_port());
    let path = write_config(dir, (grpc, http, admin), server);
    let mut flags = Flags::new();
    flags.set("config", Value::one(path.display().to_string()));
    let sections = <floodgate_server::Rls as floodgate_runtime::host::Frontend>::sections();
    let loaded = floodgate_server::load(&flags, &Env::new(&|_| None), &sections, &[])?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        floodgate_server::serve(loaded, None, shutdown).await
    });
    let mut service = Service {
        grpc,
        admin,
        stop: Some(stop),
        task,
    };
    // The HTTP listener is bound after the gRPC one: once it answers, both
    // are there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", http))
        .await
        .is_err()
    {
        if service.task.is_finished() {
            return Err((&mut service.task).await.unwrap().unwrap_err());
        }
        assert!(Instant::now() < deadline, "the service never came up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(service)
}

/// [`try_start`], which must succeed.
pub(crate) async fn start(dir: &Path, server: &str) -> Service {
    try_start(dir, server).await.unwrap()
}

/// The output lines of the Python script `script` (in `tests/python`)
/// run with `args`, which must succeed.
pub(crate) async fn python(script: &str, args: Vec<String>) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(floodgate_testkit::python())
            .arg(path)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
