//! A real nginx (Debian's) on a free port of 127.0.0.1, in a temporary
//! prefix directory of its own, optionally on a faster clock.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, require, wait_until};

/// The nginx binary: `$NGINX`, else `nginx` on the PATH or in /usr/sbin.
/// Panics when it is missing (scripts/test.sh installs it).
pub fn nginx_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NGINX") {
        return PathBuf::from(p);
    }
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    require("nginx");
    PathBuf::from("nginx")
}

/// Debian's libfaketime (package `faketime`). Panics when it is missing.
pub fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!("libfaketime is not installed (run scripts/test.sh, which installs `faketime`)")
    })
}

/// A running nginx (one process, in the foreground); killed on drop.
pub struct Nginx {
    /// The port its configuration listens on.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Nginx {
    /// Starts nginx on a configuration whose `http` block holds what every
    /// test needs (temporary paths in its directory, no default access
    /// log), then what `http(port, dir)` writes (the `server` blocks, on
    /// `port`; `dir` is the prefix directory, for logs and files to
    /// serve). `worker_connections` bounds its connections; `speed` other
    /// than 1 runs its clocks (monotonic and wall) that many times as fast
    /// as the real ones from its start, by libfaketime. Waits until the
    /// port accepts connections; panics with nginx's errors if it does
    /// not within 10 s.
    pub fn start(
        worker_connections: u32,
        speed: u32,
        http: impl FnOnce(u16, &Path) -> String,
    ) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path().display().to_string();
        let port = free_port();
        let servers = http(port, dir.path());
        let conf = format!(
            r#"
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections {worker_connections}; }}
http {{
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    access_log off;
{servers}}}
"#
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let mut command = Command::new(nginx_binary());
        if speed != 1 {
            command
                .env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", format!("+0 x{speed}"))
                .env("FAKETIME_NO_CACHE", "1");
        }
        let child = command
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nginx");
        let mut nginx = Nginx { port, dir, child };
        let ready = wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        if !ready {
            let _ = nginx.child.kill();
            let mut errors = String::new();
            if let Some(mut e) = nginx.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut errors);
            }
            let log = std::fs::read_to_string(nginx.dir().join("error.log")).unwrap_or_default();
            panic!("nginx did not start: {errors}\n{log}");
        }
        nginx
    }

    /// Its prefix directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
