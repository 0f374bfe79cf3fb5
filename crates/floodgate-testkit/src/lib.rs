//! Process helpers for end-to-end tests: free ports, `redis-server`
//! processes, the `floodgate` binary (`serve` or `gateway`) started on a
//! temporary configuration and awaited until ready, its metrics (one
//! value, or every sample: [`prometheus`]), an
//! upstream served in the test process, raw HTTP/2 and gRPC ([`grpc`]),
//! a real nginx, the Python interpreter with Envoy's generated gRPC
//! client (xds-protos), the probe that hostile tests measure a server by (a normal client
//! served on time while an attack runs) and the attackers they run,
//! the timer's lateness on a loaded machine ([`timer_lateness`]), HTTP/2
//! clients whose receive window stays shut ([`ZeroWindow`]), throwaway
//! certificates and TLS clients ([`tls`]), (feature `settings`) the checks
//! of a table of settings, and
//! (feature `browser`) a headless Chromium.
//!
//! Everything fails loudly: a missing tool is a test failure, never a skip.

pub mod attack;
#[cfg(feature = "browser")]
pub mod browser;
mod cluster;
pub mod envoy_reference;
mod floodgate;
mod gateway;
pub mod grpc;
mod h2;
mod lateness;
mod metrics;
mod net;
mod nginx;
mod probe;
mod process;
pub mod prometheus;
mod redis;
#[cfg(feature = "settings")]
pub mod settings;
pub mod tls;
mod upstream;
mod zero_window;

pub use cluster::RedisCluster;
pub use floodgate::Floodgate;
pub use gateway::Gateway;
pub use h2::h2_connect;
pub use lateness::timer_lateness;
pub use metrics::metric;
pub use net::{free_port, http_request, wait_until};
pub use nginx::{Nginx, libfaketime, nginx_binary};
pub use probe::{Probe, Probed, median_time};
pub use process::{Process, limit_open_files};
pub use redis::Redis;
pub use upstream::Upstream;
pub use zero_window::{Stalled, ZeroWindow};

use std::path::PathBuf;
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|p| p.parent())
        .expect("crates/floodgate-testkit is two levels below the root")
        .to_path_buf()
}

/// The Python interpreter with `grpcio` and `xds-protos`:
/// `$FLOODGATE_PYTHON`, else `.venv/bin/python` at the workspace root.
/// Panics with instructions when it is missing or lacks the packages.
pub fn python() -> PathBuf {
    let path = std::env::var_os("FLOODGATE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv/bin/python"));
    let ok = Command::new(&path)
        .args([
            "-c",
            "import grpc; from envoy.service.ratelimit.v3 import rls_pb2_grpc",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "no Python with grpcio and xds-protos at {} (set FLOODGATE_PYTHON, or run scripts/test.sh, \
         which creates .venv with them)",
        path.display()
    );
    path
}

/// Panics unless `tool` is on the PATH.
pub fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not installed (run scripts/test.sh, which installs it)"
    );
}
