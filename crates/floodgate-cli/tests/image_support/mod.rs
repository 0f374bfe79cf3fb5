//! Floodgate's image under test: built once per test binary with
//! `scripts/image.sh --from-binary` (this build's `floodgate`) on a base
//! made from Debian's packages (`scripts/image-base.sh`: nothing pulled),
//! and run with podman as this machine allows it: `--runtime runc`,
//! explicit `--ulimit`s no higher than the test's own hard limits.
//!
//! Each container gets a network namespace of its own (`--network none`:
//! its own loopback), so the image's default ports and the manifests'
//! environment run unchanged, never colliding with another test's ports;
//! the test reaches them from a thread that enters that namespace
//! ([`Container::in_netns`]), and starts clients and servers there (a
//! child process keeps its parent thread's namespace). Needs root, as the
//! suite runs here. A missing podman fails the test.

pub(crate) mod configmap;

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

use floodgate_testkit::{require, workspace_root};

/// The base the tests build on: a distroless-style `cc` base made locally.
const BASE: &str = "localhost/floodgate-test-base";

/// The image of this test binary's `floodgate`, built on first use. Its
/// tag names the binary's directory, so that worktrees and checkouts
/// testing at once on one machine never run each other's build.
pub(crate) fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        require("podman");
        require("runc");
        let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
        let tag = format!("localhost/floodgate-test:{:016x}", path_hash(bin));
        let root = workspace_root();
        let base = script(&root.join("scripts/image-base.sh"), &[BASE]);
        let bin = bin.to_str().expect("a UTF-8 binary path");
        let args = ["--tag", &tag, "--from-binary", bin, "--base", &base];
        let previous = image_id(&tag);
        let built = script(&root.join("scripts/image.sh"), &args);
        assert_eq!(built, tag, "scripts/image.sh's last line names the image");
        // The previous run's build, untagged now: removed, unless a
        // container still uses it, so that runs do not pile images up.
        if let Some(old) = previous.filter(|old| Some(old) != image_id(&tag).as_ref()) {
            let _ = podman(&["rmi", &old]);
        }
        tag
    })
}

/// The id of the image `tag` names, if there is one.
fn image_id(tag: &str) -> Option<String> {
    let out = podman(&["image", "inspect", "--format", "{{.Id}}", tag]);
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !id.is_empty()).then_some(id)
}

/// A short, stable name for `path`.
fn path_hash(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish()
}

/// Runs `script` with `args`; its last line of standard output.
fn script(script: &Path, args: &[&str]) -> String {
    let out = Command::new(script)
        .args(args)
        .output()
        .expect("run the script");
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// A command's standard output and error, for a failure message.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `podman` with `args`, its output.
pub(crate) fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .output()
        .expect("run podman")
}

/// A running container of the image, removed on drop.
pub(crate) struct Container {
    id: String,
    /// Its first process, as the host numbers it.
    pid: u32,
}

impl Container {
    /// `podman run -d` of the image with `options` (before the image) and
    /// `command` (after it: replaces the image's `CMD`), in a network
    /// namespace of its own, a read-only root filesystem.
    pub(crate) fn run(options: &[&str], command: &[&str]) -> Container {
        let (nofile, nproc) = (ulimit(libc::RLIMIT_NOFILE), ulimit(libc::RLIMIT_NPROC));
        let mut args = vec!["run", "-d", "--runtime", "runc", "--network", "none"];
        args.extend(["--read-only", "--ulimit", &nofile, "--ulimit", &nproc]);
        args.extend(options);
        args.push(image());
        args.extend(command);
        let out = podman(&args);
        assert!(out.status.success(), "podman run: {}", text(&out));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let pid = podman(&["inspect", "-f", "{{.State.Pid}}", &id]);
        let pid = String::from_utf8_lossy(&pid.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        let c = Container { id, pid };
        assert!(
            pid > 0,
            "the container is not running; its log:\n{}",
            c.log()
        );
        c
    }

    /// Its id, for podman.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its first process's id on the host.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Its output so far (standard output and error).
    pub(crate) fn log(&self) -> String {
        text(&podman(&["logs", &self.id]))
    }

    /// `podman healthcheck run`: whether the image's HEALTHCHECK passed,
    /// and what podman said.
    pub(crate) fn healthcheck(&self) -> (bool, String) {
        let out = podman(&["healthcheck", "run", &self.id]);
        (out.status.success(), text(&out))
    }

    /// `f`'s result, run on a thread inside the container's network
    /// namespace: connections to 127.0.0.1 reach the container's
    /// listeners; processes spawned there live in that namespace.
    pub(crate) fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let ns = std::fs::File::open(format!("/proc/{}/ns/net", self.pid))
            .unwrap_or_else(|e| panic!("the container is gone ({e}); its log:\n{}", self.log()));
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns on a valid namespace descriptor; it moves
                // this thread only, which ends with `f`.
                let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("the thread in the container's namespace")
        })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.id]);
    }
}

/// `--ulimit NAME=N:N` for `resource`: 4096, or the test's hard limit when
/// lower (a container may not raise it).
fn ulimit(resource: libc::__rlimit_resource_t) -> String {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut l) }, 0);
    let n = l.rlim_max.min(4096);
    let name = if resource == libc::RLIMIT_NOFILE {
        "nofile"
    } else {
        "nproc"
    };
    format!("{name}={n}:{n}")
}
