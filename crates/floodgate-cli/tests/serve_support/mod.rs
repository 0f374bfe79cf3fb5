//! Help shared by the end-to-end tests of `floodgate serve`: the wall
//! clock (here), JSON API calls ([`json_api`]) and RLS messages ([`rls`]). Counts live in fixed windows
//! of the real clock (the binary has no injected clock): a test that
//! expects a count to persist between calls would fail if a window
//! boundary fell between them.

pub(crate) mod json_api;
pub(crate) mod rls;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_testkit::Floodgate;

/// A day: the boundary of `unit: day` windows is 00:00 UTC; week windows
/// end on day boundaries too.
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// Returns once at least `margin` is left before the next boundary of the
/// epoch-aligned windows of `period`, waiting just past that boundary
/// when it is nearer. Call it before the calls whose counts must stay in
/// one window, with a margin longer than they take.
pub(crate) fn clear_of_boundary(period: Duration, margin: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos();
    let p = period.as_nanos();
    let left = p - now % p;
    if left < margin.as_nanos() {
        std::thread::sleep(Duration::from_nanos(left as u64) + Duration::from_millis(50));
    }
}

/// The configuration that reads the envoyproxy/ratelimit files of `dir`.
pub(crate) fn envoy_directory(dir: &Path) -> String {
    format!("envoy_configs:\n  - {:?}\n", dir.display().to_string())
}

/// `floodgate serve` on the envoyproxy/ratelimit file `name` holding
/// `rules`, in a directory of its own as that service is deployed, with
/// `env`; the directory lives as long as the returned handle.
pub(crate) fn serve_envoy_file(
    name: &str,
    rules: &str,
    env: &[(&str, &str)],
) -> (tempfile::TempDir, Floodgate) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(name), rules).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let s = Floodgate::start(bin, &envoy_directory(dir.path()), &[], env);
    (dir, s)
}
