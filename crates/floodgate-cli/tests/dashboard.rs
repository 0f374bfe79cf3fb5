//! The admin dashboard (`/dashboard`) of the real binaries: in a headless
//! Chromium its numbers move while traffic flows, the keys limited most
//! appear (as text, even when a client writes markup into them), and
//! nothing goes wrong in the page's console; its JSON follows reloads
//! (generation, result) and the decision service's traffic too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use floodgate_testkit::browser::Browser;
use floodgate_testkit::{Floodgate, Gateway, http_request, wait_until};

use crate::gateway_lifecycle::upstream;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

fn gateway_config(upstream: SocketAddr, per_user: u32) -> String {
    format!(
        r#"gateway:
  upstream: http://{upstream}
http:
  domain: edge
  descriptors:
    - [{{header: {{name: x-user, key: user}}}}]
    - [client_ip]
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {{name: per-user, algorithm: fixed_window, requests_per_unit: {per_user}, unit: minute}}
      - key: remote_address
        rate_limit: {{name: per-ip, algorithm: shaper, rate: 50r/s, burst: 20}}
server: {{reload_interval: 100ms}}
"#
    )
}

fn get(port: u16, user: &str) -> u16 {
    get_with(port, &[("x-user", user)])
}

/// The status of `GET /` with `headers` (0: no answer).
pub(crate) fn get_with(port: u16, headers: &[(&str, &str)]) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let lines: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!("GET / HTTP/1.1\r\nHost: gw\r\n{lines}Connection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn data(admin: u16) -> serde_json::Value {
    let (status, body) = http_request(admin, "GET", "/dashboard/data", None, b"").unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The per-user rule's denials so far, as the page's rule table shows
/// them (-1 before it shows the rule).
fn per_user_denials(page: &floodgate_testkit::browser::Page) -> i64 {
    page.eval(
        "Number([...document.querySelectorAll('#rates tbody tr')].find(tr => tr.children[1].textContent === 'per-user')?.children[6].textContent ?? -1)",
    )
    .as_i64()
    .unwrap_or(-1)
}

/// A client's key carrying markup and script.
const HOSTILE: &str = "<img src=x onerror=\"document.title='owned'\">";

#[test]
fn the_dashboard_moves_with_the_traffic_in_a_browser() {
    let up = upstream();
    let gw = Gateway::start(bin(), &gateway_config(up.addr, 2), &[], &[]);
    let (port, admin) = (gw.port, gw.admin);
    let browser = Browser::start();
    let page = browser.open(&format!("http://127.0.0.1:{admin}/dashboard"));
    let started = wait_until(Duration::from_secs(20), || {
        page.eval("document.getElementById('updated').textContent") != "never"
    });
    assert!(started, "the page never updated: {:?}", page.problems());
    assert_eq!(
        page.eval("document.getElementById('generation').textContent"),
        "1"
    );

    // The page first shows the rule having denied nothing, alice at her
    // limit: the next render's rate counts her first denial from that zero.
    assert_eq!(get(port, "alice"), 200);
    assert_eq!(get(port, "alice"), 200);
    let shown = wait_until(Duration::from_secs(10), || per_user_denials(&page) == 0);
    assert!(shown, "the rule never appeared: {:?}", page.problems());
    let mut updated = page.eval("document.getElementById('updated').textContent");
    let mut denials = per_user_denials(&page);

    // Traffic for a while: a few users, one of them hostile, each over
    // its limit (alice at once, so that every render from now on covers
    // denials).
    for user in ["alice", "bob", HOSTILE] {
        let over = wait_until(Duration::from_secs(10), || get(port, user) == 429);
        assert!(over, "{user} was never limited");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let user = match sent % 3 {
                    0 => "alice",
                    1 => "bob",
                    _ => HOSTILE,
                };
                assert_ne!(get(port, user), 0, "the gateway stopped answering");
                sent += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            sent
        })
    };
    let mut rates = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && rates.len() < 6 {
        // Every render is read, the first one after the denials included.
        let rendered = wait_until(Duration::from_secs(5), || {
            page.eval("document.getElementById('updated').textContent") != updated
        });
        assert!(rendered, "the page stopped updating: {:?}", page.problems());
        updated = page.eval("document.getElementById('updated').textContent");
        let total: f64 = page
            .eval("document.getElementById('total-rate').textContent")
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let denied: f64 = page
            .eval("document.getElementById('denied-rate').textContent")
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        // Every render whose interval holds denials shows them.
        let denied_so_far = per_user_denials(&page);
        if denied_so_far > denials {
            rates.push((total, denied));
        }
        denials = denied_so_far;
    }
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert!(sent > 20, "only {sent} requests sent");
    assert!(rates.len() >= 3, "the rates never moved: {rates:?}");
    assert!(
        rates.iter().all(|r| r.1 > 0.0),
        "no denials shown: {rates:?}"
    );
    // Once the traffic stops, the rates fall back to zero.
    let idle = wait_until(Duration::from_secs(10), || {
        page.eval("document.getElementById('total-rate').textContent") == "0.0"
    });
    assert!(idle, "the rate stayed up after the traffic stopped");

    // The keys limited most, the hostile one among them as plain text.
    let keys: Vec<String> = serde_json::from_str(
        page.eval(
            "JSON.stringify([...document.querySelectorAll('#top tbody tr td:nth-child(2)')].map(td => td.textContent))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert!(keys.contains(&"user=alice".to_owned()), "{keys:?}");
    assert!(keys.contains(&format!("user={HOSTILE}")), "{keys:?}");
    assert_eq!(page.eval("document.querySelectorAll('#top img').length"), 0);
    assert_eq!(page.eval("document.title"), "Floodgate dashboard");
    // The per-rule table names both rules; the store holds keys.
    let rules = page.eval("document.querySelector('#rates tbody').textContent");
    assert!(rules.as_str().unwrap().contains("per-user"), "{rules}");
    let store = page.eval("document.querySelector('#store tbody').textContent");
    assert!(store.as_str().unwrap().contains("memory"), "{store}");
    // The history plot drew both lines.
    let points = page.eval("document.getElementById('history-denied').getAttribute('points')");
    assert!(points.as_str().unwrap().split(' ').count() >= 3, "{points}");
    assert_eq!(page.problems(), Vec::<String>::new());
    drop(gw);
}

#[test]
fn the_data_follows_reloads() {
    let up = upstream();
    let gw = Gateway::start(bin(), &gateway_config(up.addr, 1), &[], &[]);
    let (port, admin) = (gw.port, gw.admin);
    let d = data(admin);
    assert_eq!(d["config"]["generation"], 1);
    assert_eq!(d["config"]["last_reload_ok"], serde_json::Value::Null);
    assert_eq!(get(port, "carol"), 200);
    assert_eq!(get(port, "carol"), 429);
    let d = data(admin);
    let rule = d["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "per-user")
        .unwrap()
        .clone();
    assert_eq!(
        (rule["allowed"].as_u64(), rule["denied"].as_u64()),
        (Some(1), Some(1))
    );
    let carol = d["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "user=carol")
        .unwrap_or_else(|| panic!("carol is not among the keys limited: {d}"));
    assert_eq!(
        (carol["rule"].as_str(), carol["how"].as_str()),
        (Some("per-user"), Some("denied"))
    );
    assert_eq!(carol["count"], 1);
    assert_eq!(d["store"]["backend"], "memory");
    assert!(d["store"]["keys"].as_u64().unwrap() >= 1);

    // A refused reload: the generation stays, the result says so.
    gw.write_config("domains: [not: valid");
    let refused = wait_until(Duration::from_secs(10), || {
        data(admin)["config"]["last_reload_ok"] == false
    });
    assert!(refused, "{}", data(admin));
    assert_eq!(data(admin)["config"]["generation"], 1);
    // A valid one: a new generation.
    gw.write_config(&gateway_config(up.addr, 5));
    let applied = wait_until(Duration::from_secs(10), || {
        let d = data(admin);
        d["config"]["last_reload_ok"] == true && d["config"]["generation"] != 1
    });
    assert!(applied, "{}", data(admin));
    assert_eq!(data(admin)["config"]["reloads_failed"], 1);
}

#[test]
fn the_decision_service_has_it_too() {
    let config = "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {name: per-user, requests_per_unit: 1, unit: minute}\n";
    let fg = Floodgate::start(bin(), config, &[], &[]);
    let body = br#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"dan"}]}]}"#;
    for _ in 0..3 {
        http_request(fg.http, "POST", "/json", Some("application/json"), body).unwrap();
    }
    let d = data(fg.admin);
    assert_eq!(d["rules"][0]["denied"], 2);
    assert_eq!(d["top"][0]["key"], "user=dan");
    let (status, page) = http_request(fg.admin, "GET", "/dashboard", None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(page.contains("<title>Floodgate dashboard</title>"));
}

/// On Redis: shadow-mode hits per rule and among the keys, the store's
/// health and breaker following a Redis that stops answering and comes
/// back, the local fallback counted meanwhile.
#[test]
fn shadow_hits_and_the_redis_store_follow_an_outage() {
    let redis = floodgate_testkit::Redis::start();
    let config = "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {name: per-user, requests_per_unit: 1, unit: minute}\n      - key: tenant\n        shadow_mode: true\n        rate_limit: {name: per-tenant, requests_per_unit: 1, unit: minute}\n";
    let fg = Floodgate::start(
        bin(),
        config,
        &[
            "--store",
            "redis",
            "--redis-url",
            &redis.addr(),
            "--failure-policy",
            "local",
        ],
        &[],
    );
    let body = br#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"erin"}]},{"entries":[{"key":"tenant","value":"acme"}]}]}"#;
    let call = || {
        http_request(fg.http, "POST", "/json", Some("application/json"), body)
            .unwrap()
            .0
    };
    assert_eq!(call(), 200);
    assert_eq!(call(), 429);
    assert_eq!(call(), 429);
    let d = data(fg.admin);
    let rule = |name: &str| {
        d["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == name)
            .unwrap_or_else(|| panic!("no rule {name}: {d}"))
            .clone()
    };
    assert_eq!(rule("per-user")["denied"], 2, "{d}");
    assert_eq!(rule("per-tenant")["shadow"], 2, "{d}");
    assert_eq!(rule("per-tenant")["denied"], 0, "{d}");
    let top: Vec<(String, String)> = d["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_owned(),
                k["how"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        top.contains(&("tenant=acme".into(), "shadow".into())),
        "{d}"
    );
    assert!(top.contains(&("user=erin".into(), "denied".into())), "{d}");
    let store = &d["store"];
    assert_eq!(store["backend"], "redis", "{d}");
    assert_eq!(store["healthy"], true, "{d}");
    assert_eq!(store["breaker"], "closed", "{d}");
    assert!(store["calls"].as_u64().unwrap() >= 3, "{d}");
    assert_eq!(store["local_fallbacks"], 0, "{d}");

    // Redis stops answering: the breaker opens, the local store decides.
    redis.pause();
    let opened = wait_until(Duration::from_secs(20), || {
        call();
        let s = &data(fg.admin)["store"];
        s["healthy"] == false && s["breaker"] != "closed"
    });
    assert!(opened, "{}", data(fg.admin));
    let s = data(fg.admin)["store"].clone();
    assert!(s["local_fallbacks"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["breaker_opened"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["timeouts"].as_u64().unwrap() >= 1, "{s}");
    // Back: healthy again.
    redis.resume();
    let back = wait_until(Duration::from_secs(20), || {
        call();
        let s = &data(fg.admin)["store"];
        s["healthy"] == true && s["breaker"] == "closed"
    });
    assert!(back, "{}", data(fg.admin));
}
