//! Reload from a Kubernetes ConfigMap volume, on the exact layout
//! kubelet's AtomicWriter keeps —
//!
//! ```text
//! ..2026_11_29_13_00_00.123456789/config.yaml
//! ..data -> ..2026_11_29_13_00_00.123456789
//! config.yaml -> ..data/config.yaml
//! ```
//!
//! — and swapped as kubelet swaps it: the new timestamped directory
//! written, `..data_tmp -> new` created, `rename("..data_tmp", "..data")`,
//! the old directory removed. Both as envoyproxy/ratelimit's manifests
//! point `floodgate serve` at it (the Istio sample's `RUNTIME_*`
//! environment, the default polling) and with `--config DIR`: the new limit
//! applies within seconds, the dot-entries are never read as configuration
//! files (the timestamped directory holds the same domain again: reading it
//! would be a duplicate), and a bad or unreadable new version is refused
//! with a clear error while the old configuration keeps deciding.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit::{Process, free_port, http_request, metric, wait_until};

use crate::serve_support::{DAY, clear_of_boundary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// A configuration whose user rule allows `per_day` calls a day.
fn limit(per_day: u32) -> String {
    format!(
        "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {{requests_per_unit: {per_day}, unit: day}}\n"
    )
}

/// What a new version of the ConfigMap holds at `config.yaml`.
enum Version {
    /// A file with this text.
    Text(String),
    /// A directory where the file should be.
    Directory,
    /// A symbolic link to nothing.
    Dangling,
}

/// A ConfigMap volume as kubelet writes it, one key (`config.yaml`).
struct ConfigMap {
    dir: PathBuf,
    current: PathBuf,
    versions: u32,
}

impl ConfigMap {
    /// The volume at `dir` (created), with `text` as its first version.
    fn new(dir: &Path, text: &str) -> ConfigMap {
        std::fs::create_dir_all(dir).unwrap();
        let mut map = ConfigMap {
            dir: dir.to_path_buf(),
            current: PathBuf::new(),
            versions: 0,
        };
        let first = map.write(&Version::Text(text.to_owned()));
        std::os::unix::fs::symlink(&first, dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
        map.current = first;
        map
    }

    /// Writes `version` into a new timestamped directory: its name.
    fn write(&mut self, version: &Version) -> PathBuf {
        self.versions += 1;
        let name = PathBuf::from(format!("..2026_11_29_13_00_{:02}.123456789", self.versions));
        let dir = self.dir.join(&name);
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("config.yaml");
        match version {
            Version::Text(text) => std::fs::write(&file, text).unwrap(),
            Version::Directory => std::fs::create_dir(&file).unwrap(),
            Version::Dangling => std::os::unix::fs::symlink("gone.yaml", &file).unwrap(),
        }
        name
    }

    /// Swaps in `version` as kubelet does.
    fn swap(&mut self, version: &Version) {
        let new = self.write(version);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&new, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        std::fs::remove_dir_all(self.dir.join(&self.current)).unwrap();
        self.current = new;
    }
}

/// `floodgate serve` reading a ConfigMap volume.
struct Served {
    process: Process,
    http: u16,
    admin: u16,
    _volume: tempfile::TempDir,
}

/// How the service finds the volume.
#[derive(Clone, Copy, Debug)]
enum Pointed {
    /// envoyproxy/ratelimit's variables, as the Istio sample sets them,
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`; the default polling.
    Runtime,
    /// `--config DIR`, an empty configuration allowed (an unreadable file
    /// is still no empty configuration).
    Config,
}

/// Starts `floodgate serve` on a ConfigMap volume holding `text`, found
/// as `pointed` says: the service and the volume.
fn start(pointed: Pointed, text: &str) -> (Served, ConfigMap) {
    let volume = tempfile::tempdir().unwrap();
    let root = volume.path().join("data");
    let config_dir = root.join("ratelimit").join("config");
    let map = ConfigMap::new(&config_dir, text);
    let (http, admin) = (free_port(), free_port());
    let mut process = Process::spawn("unused.yaml", "", |_| {
        let mut cmd = Command::new(bin());
        cmd.arg("serve");
        for v in ["FLOODGATE_CONFIG", "FLOODGATE_RELOAD_INTERVAL", "REDIS_URL"] {
            cmd.env_remove(v);
        }
        cmd.args(["--grpc-addr", "off"])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")]);
        match pointed {
            Pointed::Runtime => {
                cmd.env("RUNTIME_ROOT", &root)
                    .env("RUNTIME_SUBDIRECTORY", "ratelimit")
                    .env("RUNTIME_WATCH_ROOT", "false")
                    .env("RUNTIME_IGNOREDOTFILES", "true");
            }
            Pointed::Config => {
                cmd.arg("--config").arg(&config_dir).args([
                    "--reload-interval",
                    "200ms",
                    "--allow-empty-config",
                ]);
            }
        }
        cmd
    });
    process.wait_ready(http);
    let served = Served {
        process,
        http,
        admin,
        _volume: volume,
    };
    (served, map)
}

const REJECTED: &str = "floodgate_config_reloads_total{result=\"error\"}";

impl Served {
    /// How many calls a day a new user gets before 429, up to 2: a fresh
    /// user called twice.
    fn allowed(&self, n: &mut u32) -> u32 {
        *n += 1;
        let body = format!(
            r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"u{n}"}}]}}]}}"#
        );
        let mut allowed = 0;
        for _ in 0..2 {
            let (status, text) =
                http_request(self.http, "POST", "/json", None, body.as_bytes()).unwrap();
            assert!(status == 200 || status == 429, "{status}: {text}");
            allowed += u32::from(status == 200);
        }
        allowed
    }

    /// Waits until a new user gets `expected` calls (at most 2) within
    /// `within`; how long it took.
    fn wait_allowed(&self, n: &mut u32, expected: u32, within: Duration) -> Duration {
        let start = Instant::now();
        let seen = wait_until(within, || self.allowed(n) == expected);
        assert!(
            seen,
            "never {expected} allowed; log:\n{}",
            self.process.log()
        );
        start.elapsed()
    }

    /// Waits until one more reload is refused, then checks that the log
    /// says why (`why`) and that the old configuration (`allowed` calls)
    /// still decides.
    fn refused(&self, n: &mut u32, before: f64, why: &str, allowed: u32) {
        let counted = wait_until(Duration::from_secs(20), || {
            metric(self.admin, REJECTED) > before
        });
        let log = self.process.log();
        assert!(counted, "the reload was never refused; log:\n{log}");
        assert!(log.contains(why), "{why}:\n{log}");
        assert_eq!(self.allowed(n), allowed, "the old configuration decides");
        assert_eq!(
            http_request(self.http, "GET", "/ready", None, b"")
                .unwrap()
                .0,
            200
        );
    }
}

/// The whole story on one volume: swapped in, refused when bad or
/// unreadable, swapped again.
fn kubelet_swaps(pointed: Pointed) {
    clear_of_boundary(DAY, Duration::from_secs(120));
    let (served, mut map) = start(pointed, &limit(1));
    let log = served.process.log();
    assert!(
        !log.contains("..2026"),
        "a dot-entry was read ({pointed:?}):\n{log}"
    );
    // The Istio sample's RUNTIME_* values ask for what Floodgate does.
    assert!(!log.contains("WARN"), "{log}");
    let n = &mut 0;
    assert_eq!(served.allowed(n), 1);

    // A new limit: picked up within seconds (kubelet's own sync period
    // comes on top in a cluster).
    map.swap(&Version::Text(limit(1000)));
    let took = served.wait_allowed(n, 2, Duration::from_secs(20));
    eprintln!("{pointed:?}: the swap applied after {took:?}");

    // Bad YAML, a directory, a dangling link: refused, the old one kept.
    let before = metric(served.admin, REJECTED);
    map.swap(&Version::Text("domains: [\n".to_owned()));
    served.refused(n, before, "config.yaml", 2);
    for (version, why) in [
        (
            Version::Directory,
            "config.yaml: cannot read: a directory, not a file",
        ),
        (
            Version::Dangling,
            "config.yaml: cannot read: a symbolic link to nothing",
        ),
    ] {
        let before = metric(served.admin, REJECTED);
        map.swap(&version);
        served.refused(n, before, why, 2);
    }

    // A good version again.
    map.swap(&Version::Text(limit(1)));
    served.wait_allowed(n, 1, Duration::from_secs(20));
    let log = served.process.log();
    assert!(!log.contains("..2026"), "a dot-entry was read:\n{log}");
    assert!(!log.contains("panic"), "{log}");
}

#[test]
fn serve_with_envoy_runtime_variables_follows_kubelet_swaps() {
    kubelet_swaps(Pointed::Runtime);
}

#[test]
fn serve_with_a_config_directory_follows_kubelet_swaps() {
    kubelet_swaps(Pointed::Config);
}
