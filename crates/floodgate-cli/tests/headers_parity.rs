//! The rate limit headers both binaries send for the same decision:
//! `floodgate serve` (`--x-ratelimit-headers`, here on `/v1/check`) and
//! `floodgate gateway` (`headers: [draft-03]`) render Envoy's draft-03
//! `X-RateLimit-*` with `floodgate-http`'s one renderer and one picker: a
//! rule's name holding a quote and a backslash is escaped alike, and the
//! values are the same request after request — checked end to end, through
//! each binary's settings and listeners. Where Floodgate chooses the form
//! (`/v1/check`, the gateway), a limit is stated in its own window (3 per
//! 10 s is `q=3;w=10`, `3, 3;w=10`, `RateLimit-Limit: 3`), a shadow-mode
//! rule is never shown, a concurrency limit has no reset, and a request
//! that can never pass gets no wait.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Gateway, Upstream};
use reqwest::header::HeaderMap;
use serde_json::json;

use crate::gateway_lifecycle::upstream;
use crate::serve_support::clear_of_boundary;

/// One rule, limited per user, named with a quote and a backslash.
const DOMAINS: &str = r#"domains:
  - domain: gw
    descriptors:
      - key: user
        rate_limit: {name: 'per"user\x', requests: 3, per: 1m}
"#;

const NAMES: [&str; 3] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// `floodgate serve` (with `flags`) and `floodgate gateway` (keyed by
/// `x-user` under each of `keys`, sending the header `forms`) on the same
/// `domains`, and a client of both.
struct Both {
    serve: Floodgate,
    gateway: Gateway,
    _upstream: Upstream,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Both {
    fn start(domains: &str, flags: &[&str], keys: &[&str], forms: &str) -> Both {
        let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
        let serve = Floodgate::start(bin, domains, flags, &[]);
        let upstream = upstream();
        let descriptors: String = keys
            .iter()
            .map(|k| format!("    - [{{header: {{name: x-user, key: {k}}}}}]\n"))
            .collect();
        let config = format!(
            "gateway:\n  upstream: http://{}\nhttp:\n  domain: gw\n  descriptors:\n{descriptors}  responses:\n    headers: [{forms}]\n{domains}",
            upstream.addr
        );
        Both {
            serve,
            gateway: Gateway::start(bin, &config, &[], &[]),
            _upstream: upstream,
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// `floodgate serve`'s answer to a `/v1/check` of `request`.
    fn check(&self, request: &serde_json::Value) -> reqwest::Response {
        let url = format!("http://127.0.0.1:{}/v1/check", self.serve.http);
        let sent = self.client.post(url).json(request).send();
        self.runtime.block_on(sent).unwrap()
    }

    /// The gateway's answer to a request of `user`.
    fn proxy(&self, user: &str) -> reqwest::Response {
        let url = format!("http://127.0.0.1:{}/", self.gateway.port);
        let sent = self.client.get(url).header("x-user", user).send();
        self.runtime.block_on(sent).unwrap()
    }
}

/// The draft-03 headers of a response, in order.
fn draft03(headers: &HeaderMap) -> Vec<String> {
    NAMES
        .iter()
        .map(|n| {
            let v = headers
                .get(*n)
                .unwrap_or_else(|| panic!("no {n}: {headers:?}"));
            v.to_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn serve_and_gateway_send_the_same_draft03_headers() {
    let both = Both::start(DOMAINS, &["--x-ratelimit-headers"], &["user"], "draft-03");
    // The two requests of each step are answered within a second of one
    // another, in one window.
    clear_of_boundary(Duration::from_secs(60), Duration::from_secs(10));
    for step in 0..4 {
        let served =
            both.check(&json!({"domain": "gw", "descriptors": [{"entries": {"user": "alice"}}]}));
        let proxied = both.proxy("alice");
        let denied = step == 3;
        assert_eq!(served.status().as_u16(), if denied { 429 } else { 200 });
        assert_eq!(proxied.status().as_u16(), if denied { 429 } else { 200 });
        let (a, b) = (draft03(served.headers()), draft03(proxied.headers()));
        assert_eq!(a[0], r#"3, 3;w=60;name="per\"user\\x""#, "step {step}");
        assert_eq!(a[..2], b[..2], "step {step}");
        // The reset counts down to the same window end, read a moment
        // apart.
        let reset = |v: &[String]| v[2].parse::<u64>().unwrap();
        assert!(
            reset(&a).abs_diff(reset(&b)) <= 1,
            "step {step}: {a:?} {b:?}"
        );
    }
}

/// A rule of 3 per 10 s, and a dark-launched rule already over its limit
/// after one request: the client must see the first, in its own window,
/// and never the second.
const WINDOWED: &str = r#"domains:
  - domain: gw
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 10s}
      - key: dark
        shadow_mode: true
        rate_limit: {name: dark, requests: 1, per: 1m}
"#;

/// The value of header `name`, or a panic naming what was there.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    let v = headers.get(name);
    let v = v.unwrap_or_else(|| panic!("no {name}: {headers:?}"));
    v.to_str().unwrap()
}

/// No rate limit header names or counts the shadow-mode rule.
fn no_shadow_rule(headers: &HeaderMap) {
    for (name, value) in headers {
        let value = value.to_str().unwrap_or_default();
        assert!(!value.contains("dark"), "{name}: {value}");
    }
}

#[test]
fn both_binaries_state_a_limit_in_its_own_window_and_hide_shadow_rules() {
    let flags = ["--response-headers", "--x-ratelimit-headers"];
    let both = Both::start(WINDOWED, &flags, &["user", "dark"], "ietf, draft-03");
    clear_of_boundary(Duration::from_secs(10), Duration::from_secs(4));
    let limit = r#"3, 3;w=10;name="per-user""#;
    for step in 0..4u64 {
        let served = both.check(&json!({"domain": "gw", "descriptors": [
            {"entries": {"user": "alice"}}, {"entries": {"dark": "alice"}}]}));
        let proxied = both.proxy("alice");
        let denied = step == 3;
        assert_eq!(served.status().as_u16(), if denied { 429 } else { 200 });
        assert_eq!(proxied.status().as_u16(), if denied { 429 } else { 200 });
        let left = (2 - step.min(2)).to_string();
        let (s, p) = (served.headers(), proxied.headers());
        // floodgate serve: envoyproxy/ratelimit's names, draft-03.
        assert_eq!(header(s, "ratelimit-limit"), "3", "step {step}");
        assert_eq!(header(s, "ratelimit-remaining"), left, "step {step}");
        assert_eq!(header(s, "x-ratelimit-limit"), limit, "step {step}");
        assert_eq!(header(s, "x-ratelimit-remaining"), left, "step {step}");
        let reset: u64 = header(s, "ratelimit-reset").parse().unwrap();
        assert!((1..=10).contains(&reset), "step {step}: {reset}");
        // floodgate gateway: the IETF form, draft-03.
        assert_eq!(
            header(p, "ratelimit-policy"),
            r#""per-user";q=3;w=10"#,
            "step {step}"
        );
        let current = header(p, "ratelimit");
        assert!(
            current.starts_with(&format!(r#""per-user";r={left};t="#)),
            "step {step}: {current}"
        );
        assert_eq!(header(p, "x-ratelimit-limit"), limit, "step {step}");
        assert_eq!(header(p, "x-ratelimit-remaining"), left, "step {step}");
        no_shadow_rule(s);
        no_shadow_rule(p);
    }
}

/// A concurrency limit frees its units when a holder releases them, not at
/// a time: `floodgate serve`'s headers give it no reset (as the gateway's
/// and the IETF form's give none), and its body says no time either.
#[test]
fn a_concurrency_limit_has_no_reset_in_headers_or_body() {
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let domains = "domains:\n  - domain: jobs\n    descriptors:\n      - key: user\n        rate_limit: {name: in-flight, algorithm: concurrency, max: 1}\n";
    let flags = ["--response-headers", "--x-ratelimit-headers"];
    let serve = Floodgate::start(bin, domains, &flags, &[]);
    let client = reqwest::Client::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (step, code) in [(0, 200), (1, 429)] {
        let served = client
            .post(format!("http://127.0.0.1:{}/v1/check", serve.http))
            .json(&json!({"domain": "jobs", "descriptors": [{"entries": {"user": "bob"}}]}))
            .send();
        let served = runtime.block_on(served).unwrap();
        assert_eq!(served.status().as_u16(), code, "step {step}");
        let h = served.headers().clone();
        let body: serde_json::Value = runtime.block_on(served.json()).unwrap();
        assert_eq!(header(&h, "ratelimit-limit"), "1", "step {step}");
        assert_eq!(header(&h, "ratelimit-remaining"), "0", "step {step}");
        assert!(h.get("ratelimit-reset").is_none(), "step {step}: {h:?}");
        assert!(h.get("x-ratelimit-reset").is_none(), "step {step}: {h:?}");
        assert!(h.get("retry-after").is_none(), "step {step}: {h:?}");
        let st = &body["statuses"][0];
        assert_eq!(st["duration_until_reset_ms"], 0, "{body}");
        assert_eq!(st["decision"]["reset_after_ms"], 0, "{body}");
        assert_eq!(st["decision"]["retry_after_ms"], json!(null), "{body}");
    }
}

/// A request whose cost exceeds the limit itself can never pass: both
/// binaries say so alike — a rejection without `Retry-After` or a reset (no
/// wait lets it through), and what the limit still holds (it took nothing
/// of it), as `/v1/check`'s decision says it.
#[test]
fn a_request_that_can_never_pass_is_told_what_remains_and_no_wait() {
    let domains = "domains:\n  - domain: gw\n    descriptors:\n      - key: user\n        cost: 10\n        rate_limit: {name: export, algorithm: sliding_log, requests: 5, per: 1m}\n";
    let flags = ["--response-headers", "--x-ratelimit-headers"];
    let both = Both::start(domains, &flags, &["user"], "ietf, draft-03");
    let served =
        both.check(&json!({"domain": "gw", "descriptors": [{"entries": {"user": "carol"}}]}));
    assert_eq!(served.status().as_u16(), 429);
    let s = served.headers().clone();
    let body: serde_json::Value = both.runtime.block_on(served.json()).unwrap();
    let st = &body["statuses"][0];
    let d = &st["decision"];
    assert_eq!(d["outcome"], "never", "{body}");
    assert_eq!(
        (d["limit"].clone(), d["remaining"].clone()),
        (json!(5), json!(5))
    );
    assert_eq!(d["retry_after_ms"], json!(null), "{body}");
    assert!(body.get("retry_after_ms").is_none(), "{body}");
    // The RLS protocol's field: this status is over, nothing remains for
    // this request.
    assert_eq!(st["limit_remaining"], 0, "{body}");
    let proxied = both.proxy("carol");
    assert_eq!(proxied.status().as_u16(), 429);
    let p = proxied.headers();
    assert_eq!(header(&s, "ratelimit-limit"), "5");
    assert_eq!(header(&s, "ratelimit-remaining"), "5");
    assert_eq!(header(p, "ratelimit"), r#""export";r=5"#);
    for h in [&s, p] {
        assert_eq!(header(h, "x-ratelimit-limit"), r#"5, 5;w=60;name="export""#);
        assert_eq!(header(h, "x-ratelimit-remaining"), "5");
        for name in ["retry-after", "ratelimit-reset", "x-ratelimit-reset"] {
            assert!(h.get(name).is_none(), "{name}: {h:?}");
        }
    }
}
