//! A real nginx (the test kit's) with a generated `limit_req`
//! configuration, and the timed client that sends the same
//! schedule to nginx and to the gateway.

#![allow(dead_code)]

pub mod model;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_testkit::Nginx;
use model::Req;

/// The request headers holding the keys of the first and second limits
/// (the ones nginx's access log records).
pub const HEADERS: [&str; 2] = ["x-limit-key", "x-limit-key2"];

/// The gateway configuration deciding as nginx does: one shaper rule per
/// limit (`rules`: their `rate_limit` bodies), keyed by [`HEADERS`], in
/// shadow mode when `dry_run` (as `limit_req_dry_run`), rejecting with
/// `status`.
pub fn gateway_config(rules: &[&str], dry_run: bool, status: u16) -> String {
    let mut descriptors = String::new();
    let mut rule_lines = String::new();
    for (i, rule) in rules.iter().enumerate() {
        descriptors.push_str(&format!(
            "    - [{{header: {{name: {}, key: z{i}}}}}]\n",
            HEADERS[i]
        ));
        rule_lines.push_str(&format!(
            "      - key: z{i}\n        shadow_mode: {dry_run}\n        rate_limit: {{name: z{i}, algorithm: shaper, {rule}}}\n"
        ));
    }
    format!(
        "http:\n  domain: nginx\n  descriptors:\n{descriptors}  responses: {{status: {status}}}\ndomains:\n  - domain: nginx\n    descriptors:\n{rule_lines}"
    )
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

/// A running nginx limiting one location with `limit_req`; killed when
/// dropped.
pub struct LimitReq {
    nginx: Nginx,
    pub port: u16,
}

impl LimitReq {
    /// Starts nginx with one location limited by `limits`, serving a static
    /// file, logging each request's decision.
    pub fn start(limits: &[Limit], dry_run: bool, status: u16) -> LimitReq {
        LimitReq::start_with_clock(limits, dry_run, status, 1)
    }

    /// [`start`](Self::start), with nginx's clocks (monotonic and wall)
    /// running `speed` times as fast as the real ones from its start, by
    /// libfaketime (Debian's `faketime`, which scripts/test.sh installs): a
    /// minute of nginx's time passes in `60/speed` seconds. nginx's
    /// decisions read only its clocks, so they are the ones it would make
    /// at its own times; its log gives those times. Panics when libfaketime
    /// is missing.
    pub fn start_with_clock(limits: &[Limit], dry_run: bool, status: u16, speed: u32) -> LimitReq {
        let nginx = Nginx::start(1024, speed, |port, dir| {
            std::fs::create_dir_all(dir.join("www/t")).unwrap();
            std::fs::write(dir.join("www/t/x"), "ok").unwrap();
            let d = dir.display();
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
            format!(
                r#"    log_format decisions '$msec $request_time $http_x_req $limit_req_status $status $remote_addr "$http_x_limit_key" "$http_x_limit_key2"';
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
"#,
                dry = if dry_run { "on" } else { "off" },
            )
        });
        let port = nginx.port;
        LimitReq { nginx, port }
    }

    /// The access log's path (written in the `decisions` format:
    /// `$msec $request_time $http_x_req $limit_req_status $status
    /// $remote_addr "$http_x_limit_key" "$http_x_limit_key2"`).
    pub fn access_log(&self) -> PathBuf {
        self.nginx.dir().join("access.log")
    }

    /// nginx's own log: per request id, (arrival ms on nginx's wall clock,
    /// `$request_time` in ms, `$limit_req_status`, status).
    pub fn decisions(&self) -> Vec<(u64, u64, usize, String, u16)> {
        let text = std::fs::read_to_string(self.access_log()).unwrap_or_default();
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
