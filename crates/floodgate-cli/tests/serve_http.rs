//! The HTTP API end to end with a Rust client (reqwest) and with curl:
//! envoyproxy/ratelimit's `/json`, Floodgate's `/v1/check` and
//! `/v1/release`, health, metrics, bad input, and settings from the
//! environment.
//!
//! The `quickstart` limit is a fixed window of a day: tests counting in it
//! first make sure 00:00 UTC is not about to pass.

use crate::serve_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Redis, http_request, require};
use serde_json::{Value, json};
use serve_support::json_api::post_json;
use serve_support::{DAY, clear_of_boundary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

fn config() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/http.yaml"))
        .unwrap()
}

async fn post(port: u16, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    post_json(&reqwest::Client::new(), port, path, body).await
}

fn descriptor(pairs: &[(&str, &str)]) -> Value {
    json!({"entries": pairs.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn json_endpoint_speaks_envoy_proto3_json() {
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(10));
    let req = json!({"domain": "quickstart", "descriptors": [descriptor(&[("user", "alice")])]});
    for left in [2, 1, 0] {
        let (status, _, body) = post(s.http, "/json", &req).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["overallCode"], "OK");
        let st = &body["statuses"][0];
        assert_eq!(st["code"], "OK");
        assert_eq!(st["currentLimit"]["requestsPerUnit"], 3);
        assert_eq!(st["currentLimit"]["unit"], "DAY");
        // proto3 JSON leaves zero values out.
        assert_eq!(
            st.get("limitRemaining").cloned().unwrap_or(json!(0)),
            json!(left)
        );
        assert!(st["durationUntilReset"].as_str().unwrap().ends_with('s'));
        assert_eq!(body["responseHeadersToAdd"][0]["key"], "RateLimit-Limit");
    }
    let (status, _, body) = post(s.http, "/json", &req).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");

    // proto field names and 64-bit numbers as strings are accepted too.
    let req = json!({"domain": "quickstart", "hits_addend": "2",
        "descriptors": [{"entries": [{"key": "user", "value": "bob"}], "hitsAddend": null}]});
    let (status, _, body) = post(s.http, "/json", &req).await;
    assert_eq!(
        (status, body["statuses"][0]["limitRemaining"].clone()),
        (200, json!(1)),
        "{body}"
    );

    // Unknown domain: OK, no limit.
    let (status, _, body) = post(
        s.http,
        "/json",
        &json!({"domain": "nope", "descriptors": [descriptor(&[("a", "b")])]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body["statuses"][0].get("currentLimit").is_none(), "{body}");

    // Errors are 400 with a message, as the reference service answers.
    for bad in [
        json!({"domain": "", "descriptors": [descriptor(&[("a", "b")])]}),
        json!({"domain": "quickstart", "descriptors": []}),
        json!({"domain": "quickstart", "descriptors": [descriptor(&[("a", "b")])], "colour": 1}),
        json!({"domain": "quickstart", "descriptors": [{"entries": [{"key": "user", "value": "x"}], "limit": {"requestsPerUnit": 1, "unit": "FORTNIGHT"}}]}),
    ] {
        let (status, _, body) = post(s.http, "/json", &bad).await;
        assert_eq!(status, 400, "{bad} -> {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().len() > 5,
            "{body}"
        );
    }
}

#[tokio::test]
async fn check_endpoint_exposes_every_decision() {
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(10));
    let user = |hits: u64, dry: bool| {
        json!({"domain": "api", "dry_run": dry, "hits": hits,
               "descriptors": [{"entries": {"user": "carol"}}]})
    };
    // Dry runs charge nothing, and report what the real call would get.
    for _ in 0..3 {
        let (status, _, b) = post(s.http, "/v1/check", &user(1, true)).await;
        assert_eq!(status, 200, "{b}");
        // Decided as if charged (4 left), nothing taken (4 again next time).
        assert_eq!(b["statuses"][0]["decision"]["remaining"], 4, "{b}");
        assert_eq!(b["statuses"][0]["limit_remaining"], 4, "{b}");
        assert_eq!(b["dry_run"], true);
    }
    // Several limits: the narrowest (the 5/hour bucket) is reported.
    let (status, _, b) = post(s.http, "/v1/check", &user(5, false)).await;
    assert_eq!(status, 200, "{b}");
    let st = &b["statuses"][0];
    assert_eq!(st["rule"], "per-user");
    assert_eq!(st["reason"], "limited");
    assert_eq!(st["decision"]["outcome"], "allowed");
    assert_eq!(st["decision"]["limit"], 5);
    assert_eq!(st["decision"]["remaining"], 0);
    // Every limit of the rule, each with its own decision: the bucket and
    // the day's fixed window.
    let limits = st["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2, "{b}");
    let (bucket, day) = (&limits[0], &limits[1]);
    assert_eq!(
        (&bucket["index"], &bucket["algorithm"], &bucket["allowed"]),
        (&json!(0), &json!("token_bucket"), &json!(true)),
        "{b}"
    );
    assert_eq!(
        bucket["current_limit"],
        json!({"requests_per_unit": 5, "unit": "HOUR", "name": "per-user"})
    );
    assert_eq!(
        (&bucket["limit"], &bucket["remaining"]),
        (&json!(5), &json!(0))
    );
    assert_eq!(
        (&day["index"], &day["algorithm"], &day["outcome"]),
        (&json!(1), &json!("fixed_window"), &json!("allowed")),
        "{b}"
    );
    assert_eq!(
        day["current_limit"],
        json!({"requests_per_unit": 100, "unit": "DAY", "name": "per-user"})
    );
    assert_eq!(
        (&day["limit"], &day["remaining"]),
        (&json!(100), &json!(95))
    );
    let reset = day["reset_after_ms"].as_u64().unwrap();
    assert!(reset > 0 && reset <= 86_400_000, "{b}");
    // Denied: 429, retry-after in ms and as a header, RateLimit headers.
    let (status, headers, b) = post(s.http, "/v1/check", &user(1, false)).await;
    assert_eq!(status, 429, "{b}");
    assert_eq!(b["allowed"], false);
    assert_eq!(b["statuses"][0]["decision"]["outcome"], "denied");
    let retry = b["retry_after_ms"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 720_000, "{b}");
    assert!(headers.get("retry-after").is_some());
    assert_eq!(headers["ratelimit-remaining"], "0");
    // The bucket denied it; the day's window would have admitted it and
    // was not charged.
    let limits = &b["statuses"][0]["limits"];
    assert_eq!(
        (&limits[0]["allowed"], &limits[0]["outcome"]),
        (&json!(false), &json!("denied")),
        "{b}"
    );
    assert!(limits[0]["retry_after_ms"].as_u64().unwrap() > 0, "{b}");
    assert_eq!(
        (&limits[1]["allowed"], &limits[1]["remaining"]),
        (&json!(true), &json!(95)),
        "{b}"
    );
    // A cost above the capacity can never pass.
    let (status, _, b) = post(s.http, "/v1/check", &user(50, true)).await;
    assert_eq!(status, 429);
    assert_eq!(b["statuses"][0]["decision"]["outcome"], "never", "{b}");
    // The shaper delays instead of denying.
    let up =
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "upload", "value": "u1"}]}]});
    let mut delayed = 0;
    for _ in 0..4 {
        let (status, _, b) = post(s.http, "/v1/check", &up).await;
        assert_eq!(status, 200, "{b}");
        if b["statuses"][0]["decision"]["outcome"] == "delayed" {
            assert!(b["statuses"][0]["decision"]["delay_ms"].as_u64().unwrap() > 0);
            delayed += 1;
        }
    }
    assert!(delayed >= 2, "{delayed}");
    // No match.
    let (_, _, b) = post(
        s.http,
        "/v1/check",
        &json!({"domain": "api", "descriptors": [{"entries": {"other": "x"}}]}),
    )
    .await;
    assert_eq!(b["statuses"][0]["reason"], "no_match");
    assert_eq!(b["statuses"][0]["limits"], json!([]));
}

#[tokio::test]
async fn release_gives_back_in_flight_units() {
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    let job = json!({"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}]});
    let check = || post(s.http, "/v1/check", &job);
    let release = |permit: &Value| {
        let mut body = job.clone();
        body["permit"] = permit.clone();
        async move { post(s.http, "/v1/release", &body).await }
    };
    // Limit 2: two checks admitted, the third denied.
    let mut permits = Vec::new();
    for left in [1, 0] {
        let (status, _, b) = check().await;
        assert_eq!(status, 200, "{b}");
        let l = &b["statuses"][0]["limits"][0];
        assert_eq!(
            (&l["algorithm"], &l["remaining"]),
            (&json!("concurrency"), &json!(left)),
            "{b}"
        );
        assert!(b["permit"].as_str().unwrap().parse::<u128>().is_ok(), "{b}");
        permits.push(b["permit"].clone());
    }
    let (status, _, b) = check().await;
    assert_eq!(status, 429, "{b}");
    assert!(b.get("permit").is_none(), "{b}");
    // One release: the next check is admitted, the one after is not.
    let (status, _, b) = release(&permits[0]).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["units"], 1, "{b}");
    assert_eq!(
        b["statuses"][0],
        json!({"reason": "limited", "rule": "in-flight", "hits": 1, "units": 1, "result": "released"})
    );
    let (status, _, b) = check().await;
    assert_eq!(status, 200, "{b}");
    permits.push(b["permit"].clone());
    assert_eq!(check().await.0, 429);

    // Released again: the permit holds nothing, nothing is freed, and the
    // answer says so.
    for _ in 0..3 {
        let (status, _, b) = release(&permits[0]).await;
        assert_eq!(status, 409, "{b}");
        assert_eq!(b["units"], 0, "{b}");
        assert_eq!(b["error"]["code"], "PERMIT_NOT_HELD", "{b}");
        assert_eq!(b["statuses"][0]["result"], "not_held", "{b}");
    }
    assert_eq!(check().await.0, 429);

    // A release gives back what its permit took, however many hits it
    // names: one that took 2 gives back 2, and `hits: 1000` no more.
    for p in &permits[1..] {
        assert_eq!(release(p).await.0, 200);
    }
    let two = json!({"domain": "jobs", "hits": 2, "descriptors": [{"entries": {"job": "render"}}]});
    let (status, _, b) = post(s.http, "/v1/check", &two).await;
    assert_eq!(status, 200, "{b}");
    let mut body = two.clone();
    body["permit"] = b["permit"].clone();
    body["hits"] = json!(1000);
    let (status, _, b) = post(s.http, "/v1/release", &body).await;
    assert_eq!((status, &b["units"]), (200, &json!(2)), "{b}");
    // A check's body is released as it is, with the permit it answered.
    let (status, _, b) = check().await;
    assert_eq!(status, 200, "{b}");
    let permit = b["permit"].clone();
    let (status, _, b) = post(
        s.http,
        "/v1/release",
        &json!({"domain": "jobs", "dry_run": false,
        "permit": permit, "descriptors": [{"entries": [{"key": "job", "value": "render"}]}]}),
    )
    .await;
    assert_eq!((status, &b["units"]), (200, &json!(1)), "{b}");
    // Limits that are not in-flight limits, unknown domains: nothing to
    // release.
    let (status, _, b) = post(
        s.http,
        "/v1/release",
        &json!({"domain": "quickstart", "permit": permit,
        "descriptors": [{"entries": {"user": "x"}}]}),
    )
    .await;
    assert_eq!((status, &b["units"]), (409, &json!(0)), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no concurrency limit"),
        "{b}"
    );
    assert_eq!(b["statuses"][0]["result"], "none", "{b}");
    let (status, _, b) = post(
        s.http,
        "/v1/release",
        &json!({"domain": "nope", "permit": permit,
        "descriptors": [{"entries": {"user": "x"}}]}),
    )
    .await;
    assert_eq!(
        (status, &b["statuses"][0]["reason"]),
        (409, &json!("no_match")),
        "{b}"
    );

    // Bad bodies: specific 4xx errors, as for /v1/check, and nothing
    // released.
    assert_eq!(check().await.0, 200);
    assert_eq!(check().await.0, 200);
    let c = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/v1/release", s.http);
    for (ct, body, want, says) in [
        ("application/json", "{not json", 400, "invalid JSON"),
        (
            "text/plain",
            r#"{"domain": "jobs"}"#,
            415,
            "application/json",
        ),
        (
            "application/json",
            r#"{"descriptors": [{"entries": {"job": "render"}}]}"#,
            400,
            "domain",
        ),
        (
            "application/json",
            r#"{"domain": "", "descriptors": [{"entries": {"job": "render"}}]}"#,
            400,
            "domain",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": []}"#,
            400,
            "descriptor",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}], "colour": 1}"#,
            400,
            "colour",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}, "hits": -1}]}"#,
            400,
            "non-negative",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}], "permit": "x"}"#,
            400,
            "decimal number",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}], "permit": 1.5}"#,
            400,
            "floating-point",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}]}"#,
            400,
            "permit",
        ),
        (
            "application/json",
            r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}], "dry_run": true}"#,
            400,
            "dry run",
        ),
    ] {
        let r = c
            .post(&url)
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(status, want, "{body} -> {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body} -> {message}");
    }
    assert_eq!(declared_body(s.http, "/v1/release", 2 << 20), 413);
    assert_eq!(c.get(&url).send().await.unwrap().status().as_u16(), 405);
    assert_eq!(check().await.0, 429);

    let (_, text) = http_request(s.admin, "GET", "/metrics", None, b"").unwrap();
    for needle in [
        "floodgate_requests_total{api=\"release\",result=\"allowed\"} 10",
        // The refusals above, the declared oversized body included.
        "floodgate_requests_total{api=\"release\",result=\"error\"} 12",
        "floodgate_releases_total{result=\"released\"} 5",
        "floodgate_releases_total{result=\"not_held\"} 3",
    ] {
        assert!(text.contains(needle), "{needle} not in:\n{text}");
    }
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_the_server_keeps_serving() {
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    let c = reqwest::Client::new();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", s.http);
    let send = |path: &str, ct: &str, body: Vec<u8>| {
        c.post(url(path))
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        ("/v1/check", "application/json", b"{not json".to_vec(), 400),
        (
            "/json",
            "application/json",
            b"{\"domain\": \"api\", \"descriptors\": [".to_vec(),
            400,
        ),
        ("/json", "application/json", vec![0xff, 0xfe, 0x00], 400),
        ("/v1/check", "text/plain", b"{}".to_vec(), 415),
        ("/json", "application/json", b"[]".to_vec(), 400),
        (
            "/json",
            "application/json",
            b"{\"domain\": 7}".to_vec(),
            400,
        ),
    ];
    for (path, ct, body, want) in cases {
        let r = send(path, ct, body).await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, want, "{path} {ct}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON error body: {text}"));
        assert!(v["error"]["message"].is_string(), "{text}");
    }
    // Bodies over the limit: refused from their declared length, before
    // any of it is read.
    for path in ["/json", "/v1/check"] {
        assert_eq!(declared_body(s.http, path, 2 << 20), 413, "{path}");
    }
    // 10 000 descriptors, and a huge value: refused by the engine's bounds.
    let many: Vec<Value> = (0..10_000)
        .map(|i| descriptor(&[("user", &i.to_string())]))
        .collect();
    let (status, _, b) = post(
        s.http,
        "/v1/check",
        &json!({"domain": "api", "descriptors": many}),
    )
    .await;
    assert_eq!(status, 400, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many descriptors")
    );
    let huge = "v".repeat(100_000);
    let (status, _, b) = post(
        s.http,
        "/json",
        &json!({"domain": "api", "descriptors": [descriptor(&[("user", &huge)])]}),
    )
    .await;
    assert_eq!(status, 400, "{b}");
    let (status, _, _) = post(s.http, "/v1/check", &json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "x"}], "hits": -1}]})).await;
    assert_eq!(status, 400);
    // Wrong method, unknown path.
    assert_eq!(
        c.get(url("/json")).send().await.unwrap().status().as_u16(),
        405
    );
    assert_eq!(
        c.get(url("/nowhere"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    // Still serving.
    let (status, _, _) = post(
        s.http,
        "/json",
        &json!({"domain": "quickstart", "descriptors": [descriptor(&[("user", "after")])]}),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn release_on_redis_gives_back_the_checks_permit() {
    let redis = Redis::start();
    // A timeout a loaded machine never reaches: each release is Redis's
    // answer, none queued.
    let s = Floodgate::start(
        bin(),
        &config(),
        &["--redis-url", &redis.addr()],
        &[("REDIS_TIMEOUT", "5s")],
    );
    let job = json!({"domain": "jobs", "descriptors": [{"entries": {"job": "encode"}}]});
    let check = || post(s.http, "/v1/check", &job);
    let release = |permit: &Value| {
        let mut body = job.clone();
        body["permit"] = permit.clone();
        async move { post(s.http, "/v1/release", &body).await }
    };
    let (_, _, first) = check().await;
    let (_, _, second) = check().await;
    let permits = [first["permit"].clone(), second["permit"].clone()];
    assert!(
        permits[0].is_string() && permits[0] != permits[1],
        "{permits:?}"
    );
    assert_eq!(check().await.0, 429);
    // The release must name the permit.
    let (status, _, b) = post(s.http, "/v1/release", &job).await;
    assert_eq!(status, 400, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("permit"),
        "{b}"
    );
    let (status, _, b) = release(&permits[0]).await;
    assert_eq!((status, &b["units"]), (200, &json!(1)), "{b}");
    // Released twice: the permit holds nothing any more, nothing more is
    // freed.
    let (status, _, b) = release(&permits[0]).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (409, &json!("PERMIT_NOT_HELD")),
        "{b}"
    );
    assert_eq!(check().await.0, 200);
    assert_eq!(check().await.0, 429);
    assert_eq!(release(&permits[1]).await.0, 200);
    assert_eq!(check().await.0, 200);
    assert_eq!(check().await.0, 429);
}

/// Sends only the headers of a POST declaring `len` bytes; the status.
fn declared_body(port: u16, path: &str, len: usize) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.contains("PAYLOAD_TOO_LARGE") || n < 512, "{text}");
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(10));
    assert_eq!(
        http_request(s.http, "GET", "/healthcheck", None, b"")
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        http_request(s.http, "GET", "/ready", None, b"").unwrap().0,
        200
    );
    // Metrics live on the admin listener only.
    assert_eq!(
        http_request(s.http, "GET", "/metrics", None, b"")
            .unwrap()
            .0,
        404
    );
    let req = json!({"domain": "quickstart", "descriptors": [descriptor(&[("user", "m")])]});
    for _ in 0..4 {
        post(s.http, "/json", &req).await;
    }
    let (status, text) = http_request(s.admin, "GET", "/metrics", None, b"").unwrap();
    assert_eq!(status, 200);
    for needle in [
        "floodgate_requests_total{api=\"json\",result=\"allowed\"} 3",
        "floodgate_requests_total{api=\"json\",result=\"denied\"} 1",
        "floodgate_request_duration_seconds_bucket{api=\"json\"",
        "floodgate_rule_decisions_total",
        "floodgate_backend_ready 1",
    ] {
        assert!(text.contains(needle), "{needle} not in:\n{text}");
    }
    // No request value ever becomes a label.
    assert!(!text.contains("\"m\""), "{text}");
    let (status, text) = http_request(s.admin, "GET", "/rlconfig", None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("quickstart"), "{text}");
}

#[test]
fn curl_quick_start() {
    require("curl");
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(10));
    let body =
        r#"{"domain":"quickstart","descriptors":[{"entries":[{"key":"user","value":"dave"}]}]}"#;
    let mut codes = Vec::new();
    for _ in 0..4 {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-d", body])
            .arg(format!("http://127.0.0.1:{}/json", s.http))
            .output()
            .unwrap();
        codes.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    assert_eq!(codes, ["200", "200", "200", "429"]);
    let out = Command::new("curl")
        .args(["-s", "-d", body])
        .arg(format!("http://127.0.0.1:{}/json", s.http))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"overallCode\":\"OVER_LIMIT\""));
}

#[tokio::test]
async fn environment_settings_and_flag_precedence() {
    // envoyproxy/ratelimit's variables: global shadow mode, JSON logs, the
    // header switch; PORT is overridden by the --http-addr flag.
    let s = Floodgate::start(
        bin(),
        &config(),
        &["--response-headers"],
        &[
            ("SHADOW_MODE", "true"),
            ("LOG_FORMAT", "json"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "false"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
            ("PORT", "1"),
        ],
    );
    let req = json!({"domain": "quickstart", "descriptors": [descriptor(&[("user", "shadow")])]});
    clear_of_boundary(DAY, Duration::from_secs(10));
    for _ in 0..5 {
        let (status, _, b) = post(s.http, "/json", &req).await;
        assert_eq!(status, 200, "{b}");
    }
    let (_, _, b) = post(s.http, "/json", &req).await;
    // The descriptor is reported over, the answer is OK.
    assert_eq!(b["overallCode"], "OK");
    assert_eq!(b["statuses"][0]["code"], "OVER_LIMIT");
    let names: Vec<&str> = b["responseHeadersToAdd"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"X-Left"), "{names:?}");
    let log = s.log();
    let first = log.lines().next().unwrap();
    let parsed: Value = serde_json::from_str(first).unwrap_or_else(|_| panic!("not JSON: {first}"));
    assert_eq!(parsed["level"], "INFO");
}

/// A caller's `limit` override lifts its limit by default, as in Envoy's
/// API; `--limit-overrides ignore` keeps the configured limit and
/// `FLOODGATE_LIMIT_OVERRIDES=refuse` refuses the request.
#[tokio::test]
async fn limit_overrides_can_be_ignored_or_refused() {
    clear_of_boundary(DAY, Duration::from_secs(20));
    let lifted = |user: &str| {
        json!({"domain": "quickstart", "descriptors": [{
            "entries": [{"key": "user", "value": user}],
            "limit": {"requestsPerUnit": 1000, "unit": "SECOND"}}]})
    };
    let admitted = |port: u16, user: &'static str| async move {
        let mut ok = 0;
        for _ in 0..5 {
            let (status, _, _) = post(port, "/json", &lifted(user)).await;
            if status == 200 {
                ok += 1;
            }
        }
        ok
    };
    let s = Floodgate::start(bin(), &config(), &[], &[]);
    assert_eq!(admitted(s.http, "a").await, 5, "allowed by default");
    let s = Floodgate::start(bin(), &config(), &["--limit-overrides", "ignore"], &[]);
    assert_eq!(
        admitted(s.http, "b").await,
        3,
        "ignored: the configured 3 a day"
    );
    let s = Floodgate::start(
        bin(),
        &config(),
        &[],
        &[("FLOODGATE_LIMIT_OVERRIDES", "refuse")],
    );
    let (status, _, body) = post(s.http, "/json", &lifted("c")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("limit overrides are not accepted"),
        "{body}"
    );
}
