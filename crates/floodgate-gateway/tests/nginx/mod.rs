//! A real nginx (the test kit's) with a generated `limit_req`
//! configuration, and the timed client that sends the same
//! schedule to nginx and to the gateway.

#![allow(dead_code)]

pub(crate) mod model;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use floodgate_testkit::Nginx;
use model::{Req, Zone};

/// The request headers holding the keys of the first and second limits
/// (the ones nginx's access log records).
pub(crate) const HEADERS: [&str; 2] = ["x-limit-key", "x-limit-key2"];

/// The gateway configuration deciding as nginx does: one shaper rule per
/// limit (`rules`: their `rate_limit` bodies), keyed by [`HEADERS`], in
/// shadow mode when `dry_run` (as `limit_req_dry_run`), rejecting with
/// `status`.
pub(crate) fn gateway_config(rules: &[&str], dry_run: bool, status: u16) -> String {
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
pub(crate) struct Limit {
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
pub(crate) struct LimitReq {
    nginx: Nginx,
    pub port: u16,
}

impl LimitReq {
    /// Starts nginx with one location limited by `limits`, serving a static
    /// file, logging each request's decision.
    pub(crate) fn start(limits: &[Limit], dry_run: bool, status: u16) -> LimitReq {
        LimitReq::start_with_clock(limits, dry_run, status, 1)
    }

    /// [`start`](Self::start), with nginx's clocks (monotonic and wall)
    /// running `speed` times as fast as the real ones from its start, by
    /// libfaketime (Debian's `faketime`, which scripts/test.sh installs): a
    /// minute of nginx's time passes in `60/speed` seconds. nginx's
    /// decisions read only its clocks, so they are the ones it would make
    /// at its own times; its log gives those times. Panics when libfaketime
    /// is missing.
    pub(crate) fn start_with_clock(
        limits: &[Limit],
        dry_run: bool,
        status: u16,
        speed: u32,
    ) -> LimitReq {
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
    pub(crate) fn access_log(&self) -> PathBuf {
        self.nginx.dir().join("access.log")
    }

    /// [`decisions`](Self::decisions) once nginx has logged `n` requests
    /// (it logs one when its response has gone out), or after 10 s.
    pub(crate) async fn logged(&self, n: usize) -> Vec<(u64, u64, usize, String, u16)> {
        let end = Instant::now() + Duration::from_secs(10);
        let mut logged = self.decisions();
        while logged.len() < n && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
            logged = self.decisions();
        }
        logged
    }

    /// The delays nginx decided, from its error log, per request id: the
    /// "delaying request" line it writes as it decides names the excess it
    /// found in the zone that delays most (the request line carries the
    /// id, see [`fire`]); with `zones`, the location's, that is the delay
    /// in ms. Exact whatever the load: the time nginx took to release the
    /// request is not. Dry-run delays are included.
    pub(crate) fn delays(&self, zones: &[Zone]) -> HashMap<usize, u64> {
        let text = std::fs::read_to_string(self.nginx.dir().join("error.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let rest = &l[l.find("delaying request")?..];
                let excess = rest.split_once("excess: ")?.1.split(',').next()?;
                let (whole, milli) = excess.split_once('.')?;
                let excess = whole.parse::<u64>().ok()? * 1000 + milli.parse::<u64>().ok()?;
                let zone: usize = rest
                    .split_once("by zone \"z")?
                    .1
                    .split('"')
                    .next()?
                    .parse()
                    .ok()?;
                let id: usize = rest.split_once("?r=")?.1.split(' ').next()?.parse().ok()?;
                Some((id, zones.get(zone)?.delay_of(excess)))
            })
            .collect()
    }

    /// nginx's own log: per request id, (arrival ms on nginx's wall clock,
    /// `$request_time` in ms, `$limit_req_status`, status).
    pub(crate) fn decisions(&self) -> Vec<(u64, u64, usize, String, u16)> {
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

/// Allowed difference, in ms, between two readings of one delay: nginx's
/// millisecond clocks (its wall clock, which its log shows, and its
/// monotonic one, which it decides with, truncate apart) and the whole
/// milliseconds of the models.
pub(crate) const CLOCKS: u64 = 2;

/// What a client saw for one request.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub status: u16,
    /// nginx's `X-Limit-Status` (empty for the gateway).
    pub limit_status: String,
    /// Time from sending to the response head, in ms.
    pub latency: f64,
    /// Time from the request's time in the schedule to the response head,
    /// in ms: a delay decided is never shorter than this less the delay,
    /// however late the client sent the request.
    pub since_due: f64,
}

/// What a schedule's client saw.
pub(crate) struct Fired {
    /// Per request, in schedule order.
    pub seen: Vec<Seen>,
    /// The most a timer beside the requests was woken late, in ms: how
    /// much the machine's load alone delays a response here.
    pub late: f64,
}

/// The orders in which nginx may have handled the requests it logged
/// (arrival ms, request id), earliest first: by arrival, those that
/// arrived in the same millisecond (handled in one pass of nginx's event
/// loop, in an order its logs do not show) in every order; at most
/// `limit` orders, the first by request id.
pub(crate) fn handling_orders(logged: &[(u64, usize)], limit: usize) -> Vec<Vec<usize>> {
    let mut sorted = logged.to_vec();
    sorted.sort();
    let mut groups: Vec<Vec<Vec<usize>>> = Vec::new();
    for same in sorted.chunk_by(|a, b| a.0 == b.0) {
        let ids: Vec<usize> = same.iter().map(|(_, id)| *id).collect();
        groups.push(permutations(&ids));
    }
    let mut orders = Vec::new();
    let mut pick = vec![0usize; groups.len()];
    while orders.len() < limit {
        orders.push(
            groups
                .iter()
                .zip(&pick)
                .flat_map(|(g, &p)| g[p].iter().copied())
                .collect(),
        );
        // The next combination, the last group turning fastest.
        let Some(i) = (0..groups.len())
            .rev()
            .find(|&i| pick[i] + 1 < groups[i].len())
        else {
            break;
        };
        pick[i] += 1;
        for p in &mut pick[i + 1..] {
            *p = 0;
        }
    }
    orders
}

/// Every order of `ids`, `ids` itself first.
fn permutations(ids: &[usize]) -> Vec<Vec<usize>> {
    if ids.len() <= 1 {
        return vec![ids.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..ids.len() {
        let mut rest = ids.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

/// Sends `schedule` to `url` (each request at its offset after a common
/// start), with the keys in headers named `headers[z]` and the request's
/// index in `X-Req` and in the query (`?r=`, for nginx's error log);
/// returns what each request saw.
pub(crate) async fn fire(
    url: &str,
    schedule: &[Req],
    headers: &[&'static str],
    prefix: &str,
) -> Fired {
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
    let stop = Arc::new(AtomicBool::new(false));
    let lateness = floodgate_testkit::timer_lateness(stop.clone());
    let url: Arc<str> = Arc::from(url);
    let tasks: Vec<_> = schedule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let client = client.clone();
            let url = url.clone();
            let at = start + Duration::from_millis(r.at);
            let mut req = client
                .get(format!("{url}?r={i}"))
                .header("x-req", i.to_string());
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
                let since_due = at.elapsed().as_secs_f64() * 1000.0;
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
                    since_due,
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let late = lateness.await.unwrap().as_secs_f64() * 1000.0;
    Fired { seen, late }
}
