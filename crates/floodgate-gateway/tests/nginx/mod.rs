//! A real nginx (Debian's) on an unprivileged port with a generated
//! `limit_req` configuration, and the timed client that sends the same
//! schedule to nginx and to the gateway.

#![allow(dead_code)]

pub mod model;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::Req;

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
    floodgate_testkit::require("nginx");
    PathBuf::from("nginx")
}

/// One `limit_req` of the location: its zone's key header, rate, and the
/// directive's parameters, as nginx writes them.
pub struct Limit {
    /// The request header holding the key (`x-limit-key`).
    pub header: &'static str,
    /// `10r/s`, `30r/m`.
    pub rate: &'static str,
    pub burst: Option<u64>,
    /// `nodelay`, `delay=N`, or nothing.
    pub mode: &'static str,
}

/// A running nginx; killed when dropped.
pub struct Nginx {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Child,
}

impl Nginx {
    /// Starts nginx with one location limited by `limits`, serving a static
    /// file, logging each request's decision.
    pub fn start(limits: &[Limit], dry_run: bool, status: u16) -> Nginx {
        Nginx::start_with_clock(limits, dry_run, status, 1)
    }

    /// [`start`](Self::start), with nginx's clocks (monotonic and wall)
    /// running `speed` times as fast as the real ones from its start, by
    /// libfaketime (Debian's `faketime`, which scripts/test.sh installs): a
    /// minute of nginx's time passes in `60/speed` seconds. nginx's
    /// decisions read only its clocks, so they are the ones it would make
    /// at its own times; its log gives those times. Panics when libfaketime
    /// is missing.
    pub fn start_with_clock(limits: &[Limit], dry_run: bool, status: u16, speed: u32) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("www/t")).unwrap();
        std::fs::write(dir.path().join("www/t/x"), "ok").unwrap();
        let port = floodgate_testkit::free_port();
        let mut zones = String::new();
        let mut directives = String::new();
        for (i, l) in limits.iter().enumerate() {
            let var = l.header.replace('-', "_");
            zones.push_str(&format!(
                "    limit_req_zone $http_{var} zone=z{i}:10m rate={};\n",
                l.rate
            ));
            directives.push_str(&format!("            limit_req zone=z{i}"));
            if let Some(b) = l.burst {
                directives.push_str(&format!(" burst={b}"));
            }
            if !l.mode.is_empty() {
                directives.push_str(&format!(" {}", l.mode));
            }
            directives.push_str(";\n");
        }
        let conf = format!(
            r#"
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    access_log off;
    log_format decisions '$msec $request_time $http_x_req $limit_req_status $status $remote_addr "$http_x_limit_key" "$http_x_limit_key2"';
{zones}
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
        location /t/ {{
{directives}            limit_req_status {status};
            limit_req_dry_run {dry};
            access_log {d}/access.log decisions;
            add_header X-Limit-Status $limit_req_status always;
        }}
    }}
}}
"#,
            dry = if dry_run { "on" } else { "off" },
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
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
        let ready = floodgate_testkit::wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let mut n = Nginx { port, dir, child };
        if !ready {
            let _ = n.child.kill();
            let out = n.child.wait_with_output_lossy();
            panic!("nginx did not start: {out}");
        }
        n
    }

    /// The access log's path (written in the `decisions` format:
    /// `$msec $request_time $http_x_req $limit_req_status $status
    /// $remote_addr "$http_x_limit_key" "$http_x_limit_key2"`).
    pub fn access_log(&self) -> PathBuf {
        self.dir.path().join("access.log")
    }

    /// nginx's own log: per request id, (arrival ms on nginx's wall clock,
    /// `$request_time` in ms, `$limit_req_status`, status).
    pub fn decisions(&self) -> Vec<(u64, u64, usize, String, u16)> {
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let ms = |s: &str| -> Option<u64> {
                    let (a, b) = s.split_once('.')?;
                    Some(a.parse::<u64>().ok()? * 1000 + b.parse::<u64>().ok()?)
                };
                let end = ms(f.first()?)?;
                let took = ms(f.get(1)?)?;
                Some((
                    end - took,
                    took,
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.to_string(),
                    f.get(4)?.parse().ok()?,
                ))
            })
            .collect()
    }
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

trait Lossy {
    fn wait_with_output_lossy(self) -> String;
}

impl Lossy for &mut Child {
    fn wait_with_output_lossy(self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a client saw for one request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub status: u16,
    /// nginx's `X-Limit-Status` (empty for the gateway).
    pub limit_status: String,
    /// Time from sending to the response head, in ms.
    pub latency: f64,
}

/// Sends `schedule` to `url` (each request at its offset after a common
/// start), with the keys in headers named `headers[z]` and the request's
/// index in `X-Req`; returns what each request saw.
pub async fn fire(
    url: &str,
    schedule: &[Req],
    headers: &[&'static str],
    prefix: &str,
) -> Vec<Seen> {
    let client = reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    // Warm the pool: connections are ready before the clock starts.
    let warm: Vec<_> = (0..16)
        .map(|_| {
            let c = client.clone();
            let u = url.replace("/t/x", "/warm");
            tokio::spawn(async move {
                let _ = c.get(u).send().await;
            })
        })
        .collect();
    for w in warm {
        let _ = w.await;
    }
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let url: Arc<str> = Arc::from(url);
    let tasks: Vec<_> = schedule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let client = client.clone();
            let url = url.clone();
            let at = start + Duration::from_millis(r.at);
            let mut req = client.get(&*url).header("x-req", i.to_string());
            for (h, k) in headers.iter().zip(&r.keys) {
                if let Some(k) = k {
                    req = req.header(*h, format!("{prefix}{k}"));
                }
            }
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let sent = Instant::now();
                let res = req.send().await.expect("request");
                let latency = sent.elapsed().as_secs_f64() * 1000.0;
                let limit_status = res
                    .headers()
                    .get("x-limit-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let status = res.status().as_u16();
                let _ = res.bytes().await;
                Seen {
                    status,
                    limit_status,
                    latency,
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}
