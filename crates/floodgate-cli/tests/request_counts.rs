//! `floodgate_requests_total` counts requests, not rule decisions: with
//! two rules disagreeing on every request (one allows, one denies), the
//! metric's allowed and denied equal the answers the client counted (and
//! the gateway's access log), while the allowing rule's own counter still
//! counts each request it allowed — on the gateway, over gRPC and on
//! `/v1/check`. The dashboard's headline reads the same metric.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::browser::Browser;
use floodgate_testkit::{Floodgate, Gateway, http_request, wait_until};
use serde_json::json;

use crate::gateway_lifecycle::upstream;
use crate::serve_support::json_api::post_json;
use crate::serve_support::{DAY, clear_of_boundary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// Requests sent per test; the strict rule allows the first [`STRICT`].
const N: u64 = 10;
const STRICT: u64 = 3;

/// Two rules on every request: `strict` (per user, [`STRICT`] a day) and
/// `lenient` (per tenant, plenty), under `descriptors:`.
fn rules() -> String {
    format!(
        "      - key: user\n        rate_limit: {{name: strict, requests_per_unit: {STRICT}, unit: day}}\n      - key: tenant\n        rate_limit: {{name: lenient, requests_per_unit: 100000, unit: day}}\n"
    )
}

fn gateway_config(upstream: std::net::SocketAddr) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\n  access_log: true\nhttp:\n  domain: edge\n  descriptors:\n    - [{{header: {{name: x-user, key: user}}}}]\n    - [{{header: {{name: x-tenant, key: tenant}}}}]\ndomains:\n  - domain: edge\n    descriptors:\n{}server: {{log: {{level: warn, format: json}}}}\n",
        rules()
    )
}

fn service_config() -> String {
    format!("domains:\n  - domain: api\n    descriptors:\n{}", rules())
}

/// The `floodgate_requests_total` sample of `api` and `result`.
fn requests(metric: impl Fn(&str) -> f64, api: &str, result: &str) -> u64 {
    metric(&format!(
        "floodgate_requests_total{{api=\"{api}\",result=\"{result}\"}}"
    )) as u64
}

/// The rule decisions of `rule` with `outcome` (the domain's only label
/// set for it).
fn rule_decisions(metric: impl Fn(&str) -> f64, domain: &str, rule: &str, outcome: &str) -> u64 {
    metric(&format!(
        "floodgate_rule_decisions_total{{domain=\"{domain}\",rule=\"{rule}\",outcome=\"{outcome}\"}}"
    )) as u64
}

/// The status of `GET /` for user `user` of tenant `acme`.
fn get(port: u16, user: &str) -> u16 {
    crate::dashboard::get_with(port, &[("x-user", user), ("x-tenant", "acme")])
}

#[test]
fn the_gateway_counts_requests_as_its_clients_and_access_log_saw_them() {
    let up = upstream();
    let gw = Gateway::start(bin(), &gateway_config(up.addr), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(60));
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..N {
        match get(gw.port, "ann") {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("answered {other}"),
        }
    }
    assert_eq!((ok, limited), (STRICT, N - STRICT));
    // The access log's statuses, one line per request.
    let statuses = || -> Vec<u64> {
        gw.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "floodgate::access")
            .filter_map(|v| v["status"].as_u64())
            .collect()
    };
    let logged = wait_until(Duration::from_secs(10), || statuses().len() as u64 == N);
    assert!(logged, "{:?}\n{}", statuses(), gw.log());
    let logged_429 = statuses().iter().filter(|&&s| s == 429).count() as u64;
    assert_eq!(logged_429, limited);

    let m = |p: &str| gw.metric(p);
    assert_eq!(requests(m, "http", "allowed"), ok);
    assert_eq!(requests(m, "http", "denied"), limited);
    for result in ["delayed", "shed", "failed_open", "failed_closed", "error"] {
        assert_eq!(requests(m, "http", result), 0, "{result}");
    }
    // The rules disagreed on every denied request: the lenient one
    // allowed all of them.
    assert_eq!(rule_decisions(m, "edge", "lenient", "within_limit"), N);
    assert_eq!(
        rule_decisions(m, "edge", "strict", "over_limit"),
        N - STRICT
    );
    // Their help says which counts what.
    let (_, text) = http_request(gw.admin, "GET", "/metrics", None, b"").unwrap();
    for help in [
        "# HELP floodgate_requests_total Requests by API and final outcome",
        "# HELP floodgate_rule_decisions_total A rule's verdict on each request it matched",
    ] {
        assert!(text.contains(help), "{help}\n{text}");
    }
}

fn rls_request(user: &str) -> RateLimitRequest {
    let descriptor = |key: &str, value: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..Default::default()
    };
    RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![descriptor("user", user), descriptor("tenant", "acme")],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn serve_counts_requests_over_grpc_and_v1_check() {
    let fg = Floodgate::start(bin(), &service_config(), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(60));
    let mut grpc = RateLimitServiceClient::connect(format!("http://{}", fg.grpc_addr()))
        .await
        .unwrap();
    let (mut ok, mut over) = (0, 0);
    for _ in 0..N {
        let answer = grpc.should_rate_limit(rls_request("ann")).await.unwrap();
        // 1: OK, 2: OVER_LIMIT.
        match answer.into_inner().overall_code {
            1 => ok += 1,
            2 => over += 1,
            other => panic!("code {other}"),
        }
    }
    assert_eq!((ok, over), (STRICT, N - STRICT));
    let client = reqwest::Client::new();
    let body = json!({"domain": "api", "descriptors": [{"entries": {"user": "bob"}}, {"entries": {"tenant": "acme"}}]});
    let (mut allowed, mut denied) = (0, 0);
    for _ in 0..N {
        match post_json(&client, fg.http, "/v1/check", &body).await.0 {
            200 => allowed += 1,
            429 => denied += 1,
            other => panic!("answered {other}"),
        }
    }
    assert_eq!((allowed, denied), (STRICT, N - STRICT));

    let m = |p: &str| fg.metric(p);
    assert_eq!(requests(m, "grpc", "allowed"), ok);
    assert_eq!(requests(m, "grpc", "denied"), over);
    assert_eq!(requests(m, "check", "allowed"), allowed);
    assert_eq!(requests(m, "check", "denied"), denied);
    assert_eq!(rule_decisions(m, "api", "lenient", "within_limit"), 2 * N);
}

/// Every request denied: the headline shows none allowed and the denials,
/// while the rule table still shows the allowing rule's decisions.
#[test]
fn the_dashboard_headline_counts_requests() {
    let up = upstream();
    let config = gateway_config(up.addr).replace(
        &format!("requests_per_unit: {STRICT},"),
        "requests_per_unit: 0,",
    );
    let gw = Gateway::start(bin(), &config, &[], &[]);
    let browser = Browser::start();
    let page = browser.open(&format!("http://127.0.0.1:{}/dashboard", gw.admin));
    let updated = || page.eval("document.getElementById('updated').textContent");
    let started = wait_until(Duration::from_secs(20), || updated() != "never");
    assert!(started, "the page never updated: {:?}", page.problems());
    let number = |id: &str| -> f64 {
        let v = page.eval(&format!("document.getElementById('{id}').textContent"));
        v.as_str().unwrap().parse().unwrap()
    };
    let lenient_allowed = || -> f64 {
        let v = page.eval(
            "[...document.querySelectorAll('#rates tbody tr')].find(tr => tr.children[1].textContent === 'lenient')?.children[2].textContent ?? '-1'",
        );
        v.as_str().unwrap().parse().unwrap()
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (stop, port) = (stop.clone(), gw.port);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(get(port, "ann"), 429);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // A render covering the traffic: the denials shown, and the lenient
    // rule's allowed ones.
    let mut seen = (0.0, 0.0, 0.0);
    let shown = wait_until(Duration::from_secs(20), || {
        seen = (
            number("allowed-rate"),
            number("denied-rate"),
            lenient_allowed(),
        );
        seen.1 > 0.0 && seen.2 > 0.0
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    assert!(shown, "{seen:?} {:?}", page.problems());
    assert_eq!(seen.0, 0.0, "requests shown allowed: {seen:?}");
    assert_eq!(page.problems(), Vec::<String>::new());
}

/// The generation counts the configurations applied: 1 at start, one
/// more per reload applied, none for a refused or unchanged one.
#[test]
fn the_generation_counts_applied_configurations() {
    let up = upstream();
    let config = gateway_config(up.addr).replace("server: {", "server: {reload_interval: 100ms, ");
    let gw = Gateway::start(bin(), &config, &[], &[]);
    let data = || -> serde_json::Value {
        let (status, body) = http_request(gw.admin, "GET", "/dashboard/data", None, b"").unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let reloads = |result: &str| {
        gw.metric(&format!(
            "floodgate_config_reloads_total{{result=\"{result}\"}}"
        )) as u64
    };
    assert_eq!(data()["config"]["generation"], 1);
    // Refused twice: a file emptied of its rules (compiled, then
    // refused), then YAML that does not parse.
    let domains = config.find("domains:").unwrap();
    let server = config.find("server:").unwrap();
    gw.write_config(&format!(
        "{}domains: []\n{}",
        &config[..domains],
        &config[server..]
    ));
    let refused = wait_until(Duration::from_secs(10), || reloads("error") == 1);
    assert!(refused, "{}", gw.log());
    gw.write_config("domains: [not: valid");
    let refused = wait_until(Duration::from_secs(10), || reloads("error") == 2);
    assert!(refused, "{}", gw.log());
    assert_eq!(data()["config"]["generation"], 1);
    // Applied twice: 2, then 3.
    for (n, limit) in [(2, 5), (3, 6)] {
        let text = config.replace(
            &format!("requests_per_unit: {STRICT},"),
            &format!("requests_per_unit: {limit},"),
        );
        gw.write_config(&text);
        let applied = wait_until(Duration::from_secs(10), || reloads("ok") == n - 1);
        assert!(applied, "{}", gw.log());
        assert_eq!(data()["config"]["generation"], n);
    }
    // The same bytes again: unchanged, still 3.
    let unchanged = reloads("unchanged");
    let text = config.replace(
        &format!("requests_per_unit: {STRICT},"),
        "requests_per_unit: 6,",
    );
    gw.write_config(&text);
    let seen = wait_until(Duration::from_secs(10), || reloads("unchanged") > unchanged);
    assert!(seen, "{}", gw.log());
    assert_eq!(data()["config"]["generation"], 3);
}

/// A shaper on `/v1/check`: the requests it delays are counted delayed,
/// as their answers say (`outcome: delayed`), apart from those it admits
/// at once and those it denies.
#[tokio::test]
async fn serve_counts_delayed_requests_as_their_answers_say() {
    let config = "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {name: smooth, algorithm: shaper, rate: 1r/m, burst: 3}\n";
    let fg = Floodgate::start(bin(), config, &[], &[]);
    let client = reqwest::Client::new();
    let body = json!({"domain": "api", "descriptors": [{"entries": {"user": "cy"}}]});
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..6 {
        let (status, _, answer) = post_json(&client, fg.http, "/v1/check", &body).await;
        let outcome = answer["statuses"][0]["decision"]["outcome"].as_str();
        let outcome = outcome.unwrap_or_else(|| panic!("{answer}")).to_owned();
        assert_eq!(status == 429, outcome == "denied", "{status} {answer}");
        *seen.entry(outcome).or_insert(0u64) += 1;
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["allowed", "delayed", "denied"],
        "{seen:?}"
    );
    let m = |p: &str| fg.metric(p);
    for (outcome, n) in &seen {
        assert_eq!(requests(m, "check", outcome), *n, "{outcome}: {seen:?}");
    }
}

/// A gateway limiting nothing counts what it forwards as allowed, and a
/// request it refuses before any limit (no `Host`) as an error.
#[test]
fn a_gateway_without_limits_counts_its_requests_too() {
    let up = upstream();
    let config = format!("gateway:\n  upstream: http://{}\n", up.addr);
    let env = [("FLOODGATE_ALLOW_EMPTY_CONFIG", "true")];
    let gw = Gateway::start(bin(), &config, &[], &env);
    for _ in 0..3 {
        assert_eq!(get(gw.port, "ann"), 200);
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let m = |p: &str| gw.metric(p);
    assert_eq!(requests(m, "http", "allowed"), 3);
    assert_eq!(requests(m, "http", "error"), 1);
}
