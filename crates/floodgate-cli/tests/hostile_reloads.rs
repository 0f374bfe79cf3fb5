//! Reloads that would lift limits, against the real binaries under load:
//! the configuration file emptied, cut mid-rule, one file of a directory
//! emptied, a file truncated and written slowly in place, SIGHUP in the
//! middle of such a write. Throughout, a client over its limit keeps being
//! denied (429) and a normal client keeps being served within 100 ms; each
//! refusal keeps the running configuration, and is logged and counted.
//! An empty configuration starts only when the operator says so.
//!
//! The limits are per day: tests that count in them first make sure
//! 00:00 UTC is not about to pass.

use crate::gateway_lifecycle::{get, upstream};
use crate::serve_support::{DAY, clear_of_boundary};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_testkit::{Floodgate, Gateway, http_request, metric, wait_until};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// A policy of many rules with the user rule (2 a day) last, so that most
/// of its prefixes cut at a line end are valid configurations without it.
fn policy(domain: &str, indent: &str) -> String {
    let mut text = format!("{indent}- domain: {domain}\n{indent}  descriptors:\n");
    for i in 0..300 {
        text.push_str(&format!(
            "{indent}    - key: k{i}\n{indent}      rate_limit: {{requests_per_unit: 100, unit: day}}\n"
        ));
    }
    text + &format!(
        "{indent}    - key: user\n{indent}      rate_limit: {{requests_per_unit: 2, unit: day}}\n"
    )
}

fn serve_config() -> String {
    format!("domains:\n{}", policy("d", "  "))
}

/// The text before the user rule's limit: a rule cut from its limit.
fn cut_mid_rule(text: &str) -> String {
    text[..text.find("rate_limit: {requests_per_unit: 2").unwrap()].to_owned()
}

/// Truncates `file` and writes `text` into it in place, line by line,
/// 5 ms apart — seconds in all, as a slow writer (a copy over a network, a
/// template engine) takes. Returns when the write is done.
fn write_slowly(file: PathBuf, text: String) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut f = std::fs::File::create(&file).unwrap();
        for line in text.split_inclusive('\n') {
            f.write_all(line.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

const RELOADED: &str = "floodgate_config_reloads_total{result=\"ok\"}";
const REJECTED: &str = "floodgate_config_reloads_total{result=\"error\"}";
const UNSETTLED: &str = "floodgate_config_reloads_total{result=\"unsettled\"}";

/// Waits until the counter `name` exceeds `before`.
fn counted(admin: u16, name: &str, before: f64, log: impl Fn() -> String) {
    assert!(
        wait_until(Duration::from_secs(20), || metric(admin, name) > before),
        "{name} never counted; log:\n{}",
        log()
    );
}

/// What the clients saw while an attack ran.
#[derive(Debug, Default)]
struct Seen {
    /// Statuses other than 429 the client over its limit got.
    victim_admitted: Vec<u16>,
    victim_sent: usize,
    /// Statuses other than 200 the normal client got.
    normal_failed: Vec<u16>,
    normal_sent: usize,
    /// Normal requests answered after more than 100 ms.
    normal_slow: usize,
    slowest: Duration,
}

/// A client over its limit and a normal client (a new user each time),
/// sending one request each in turn until stopped.
struct Clients {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Seen>,
}

impl Clients {
    fn start(send: impl Fn(&str) -> u16 + Send + 'static) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Seen::default();
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                let status = send("victim");
                seen.victim_sent += 1;
                if status != 429 {
                    seen.victim_admitted.push(status);
                }
                i += 1;
                let started = Instant::now();
                let status = send(&format!("normal-{i}"));
                let took = started.elapsed();
                seen.normal_sent += 1;
                if status != 200 {
                    seen.normal_failed.push(status);
                }
                if took > Duration::from_millis(100) {
                    seen.normal_slow += 1;
                }
                seen.slowest = seen.slowest.max(took);
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        });
        Clients { stop, thread }
    }

    /// Stops the clients and checks what they saw: the victim never
    /// admitted, the normal client always served, within 100 ms (a few
    /// requests slower than that are the loaded machine's, not a stall:
    /// at most one in 20).
    fn finish(self, log: impl Fn() -> String) {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.thread.join().unwrap();
        assert!(seen.victim_sent > 10 && seen.normal_sent > 10, "{seen:?}");
        assert!(
            seen.victim_admitted.is_empty(),
            "the limit was lifted: {seen:?}\nlog:\n{}",
            log()
        );
        assert!(
            seen.normal_failed.is_empty(),
            "a normal client was refused: {seen:?}"
        );
        assert!(
            seen.normal_slow * 20 <= seen.normal_sent,
            "normal requests slower than 100 ms: {seen:?}"
        );
    }
}

/// One `/json` call of domain `d` for `user`: the HTTP status.
fn json_call(http: u16, user: &str) -> u16 {
    json_call_in(http, "d", user)
}

/// One `/json` call of `domain` for `user`: the HTTP status.
fn json_call_in(http: u16, domain: &str, user: &str) -> u16 {
    let body = format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    http_request(
        http,
        "POST",
        "/json",
        Some("application/json"),
        body.as_bytes(),
    )
    .map_or(0, |r| r.0)
}

/// Uses up the victim's two requests.
fn deny_victim(send: impl Fn(&str) -> u16) {
    assert_eq!(send("victim"), 200);
    assert_eq!(send("victim"), 200);
    assert_eq!(send("victim"), 429);
}

#[test]
fn serve_refuses_emptied_and_truncated_files_under_load() {
    // A second domain in a directory of its own (envoyproxy/ratelimit
    // format), loaded beside the main file.
    let shop = tempfile::tempdir().unwrap();
    let shop_file = shop.path().join("shop.yaml");
    let shop_text = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 2}\n";
    std::fs::write(&shop_file, shop_text).unwrap();
    let s = Floodgate::start(
        bin(),
        &serve_config(),
        &["--config", shop.path().to_str().unwrap()],
        &[],
    );
    clear_of_boundary(DAY, Duration::from_secs(60));
    let http = s.http;
    deny_victim(|u| json_call(http, u));
    let clients = Clients::start(move |u| json_call(http, u));
    let full = serve_config();
    let attacks = [
        (
            s.config_path(),
            String::new(),
            "floodgate.yaml: file is empty",
        ),
        (
            s.config_path(),
            "domains:\n".into(),
            "floodgate.yaml: the file held 301 rule(s) and now holds none",
        ),
        (
            s.config_path(),
            cut_mid_rule(&full),
            "descriptor 'user' has neither rate_limit nor descriptors",
        ),
        (shop_file.clone(), String::new(), "shop.yaml: file is empty"),
    ];
    for (file, text, error) in attacks {
        let before = metric(s.admin, REJECTED);
        // In place, as `>` in a shell does.
        std::fs::write(&file, &text).unwrap();
        counted(s.admin, REJECTED, before, || s.log());
        assert!(s.log().contains(error), "{error}; log:\n{}", s.log());
        assert_eq!(metric(s.admin, "floodgate_config_last_reload_ok"), 0.0);
        std::fs::write(&file, if file == shop_file { shop_text } else { &full }).unwrap();
    }
    clients.finish(|| s.log());
    assert!(s.log().contains("configuration rejected"), "{}", s.log());
    assert_eq!(metric(s.admin, RELOADED), 0.0, "{}", s.log());
    // The other domain kept its limit too.
    let shop_call = |user: &str| json_call_in(http, "shop", user);
    deny_victim(shop_call);
}

#[test]
fn serve_reads_a_file_being_written_only_once_it_settles() {
    let first = serve_config().replacen("unit: day}", "unit: hour}", 1);
    // Polled every second: files must stay unchanged a second to be read.
    let s = Floodgate::start_polling(bin(), &first, "1s", &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(60));
    let http = s.http;
    deny_victim(|u| json_call(http, u));
    let clients = Clients::start(move |u| json_call(http, u));
    write_slowly(s.config_path(), serve_config())
        .join()
        .unwrap();
    counted(s.admin, RELOADED, 0.0, || s.log());
    clients.finish(|| s.log());
    assert!(metric(s.admin, UNSETTLED) >= 1.0, "{}", s.log());
    assert!(s.log().contains("still being written"), "{}", s.log());
    assert_eq!(metric(s.admin, RELOADED), 1.0, "{}", s.log());
    assert_eq!(json_call(http, "victim"), 429);
}

/// With polling off, a SIGHUP in the middle of a write waits for its end,
/// then applies the whole file without being asked again.
#[test]
fn sighup_during_a_write_waits_for_the_end_of_it() {
    let first = serve_config().replacen("unit: day}", "unit: hour}", 1);
    let s = Floodgate::start_polling(bin(), &first, "0", &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(60));
    let http = s.http;
    deny_victim(|u| json_call(http, u));
    let clients = Clients::start(move |u| json_call(http, u));
    let writer = write_slowly(s.config_path(), serve_config());
    std::thread::sleep(Duration::from_millis(300));
    s.signal("HUP");
    writer.join().unwrap();
    counted(s.admin, RELOADED, 0.0, || s.log());
    clients.finish(|| s.log());
    assert!(metric(s.admin, UNSETTLED) >= 1.0, "{}", s.log());
    assert_eq!(json_call(http, "victim"), 429);
}

/// `config check`, `serve` and `gateway` refuse an empty configuration
/// unless it is allowed (flag or environment).
#[test]
fn an_empty_configuration_needs_the_operators_word() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(bin());
        cmd.args(args).env_remove("FLOODGATE_ALLOW_EMPTY_CONFIG");
        if let Some(v) = env {
            cmd.env("FLOODGATE_ALLOW_EMPTY_CONFIG", v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let path = empty.to_str().unwrap();
    let (ok, out) = run(&["config", "check", path], None);
    assert!(!ok, "{out}");
    assert!(out.contains("empty.yaml: file is empty"), "{out}");
    assert!(out.contains("--allow-empty-config"), "{out}");
    let (ok, out) = run(&["config", "check", "--allow-empty-config", path], None);
    assert!(ok && out.contains("0 domain(s)"), "{out}");
    let (ok, out) = run(&["config", "check", path], Some("true"));
    assert!(ok, "{out}");
    // A configuration without a domain is empty too.
    std::fs::write(&empty, "server: {reload_interval: 1s}\n").unwrap();
    let (ok, out) = run(&["config", "check", path], None);
    assert!(!ok && out.contains("no domain is configured"), "{out}");
    // Neither binary starts on it: each exits, naming the problem.
    for command in ["serve", "gateway"] {
        let mut p = floodgate_testkit::Process::spawn("empty.yaml", "server: {}\n", |path| {
            let mut cmd = Command::new(bin());
            cmd.arg(command)
                .arg("--config")
                .arg(path)
                .env_remove("FLOODGATE_ALLOW_EMPTY_CONFIG");
            if command == "gateway" {
                cmd.args(["--listen", "127.0.0.1:0"]);
            }
            cmd
        });
        let status = p.wait_exit(Duration::from_secs(20));
        assert!(
            status.is_some_and(|s| !s.success()),
            "{command}: {status:?}; log:\n{}",
            p.log()
        );
        assert!(p.log().contains("no domain is configured"), "{}", p.log());
    }
    // Allowed: the service starts and answers, limiting nothing.
    let s = Floodgate::start(
        bin(),
        "# nothing yet\n",
        &[],
        &[("FLOODGATE_ALLOW_EMPTY_CONFIG", "true")],
    );
    assert_eq!(json_call(s.http, "anyone"), 200);
}

fn gateway_config(upstream: std::net::SocketAddr) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\nserver: {{reload_interval: 1s, shutdown_grace: 5s}}\nhttp:\n  domain: gw\n  descriptors:\n    - [{{header: {{name: x-user, key: user}}}}]\ndomains:\n{}",
        policy("gw", "  ")
    )
}

#[test]
fn the_gateway_refuses_emptied_and_half_written_files_under_load() {
    let up = upstream();
    let full = gateway_config(up.addr);
    let first = full.replacen("unit: day}", "unit: hour}", 1);
    let gw = Gateway::start(bin(), &first, &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(60));
    let port = gw.port;
    let send = move |user: &str| get(port, "/", user).0;
    deny_victim(send);
    let clients = Clients::start(send);
    // Emptied, then cut mid-rule: refused, counted, logged.
    for (text, error) in [
        (String::new(), "gateway.yaml: file is empty"),
        (
            cut_mid_rule(&first),
            "descriptor 'user' has neither rate_limit nor descriptors",
        ),
    ] {
        let before = gw.metric(REJECTED);
        std::fs::write(gw.config_path(), &text).unwrap();
        counted(gw.admin, REJECTED, before, || gw.log());
        assert!(gw.log().contains(error), "{error}; log:\n{}", gw.log());
    }
    // Written slowly in place: read once whole.
    write_slowly(gw.config_path(), full).join().unwrap();
    counted(gw.admin, RELOADED, 0.0, || gw.log());
    clients.finish(|| gw.log());
    assert!(gw.metric(UNSETTLED) >= 1.0, "{}", gw.log());
    assert_eq!(gw.metric(RELOADED), 1.0, "{}", gw.log());
    assert_eq!(send("victim"), 429);
}
