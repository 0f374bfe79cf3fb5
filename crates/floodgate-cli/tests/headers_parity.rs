//! The rate limit headers both binaries send for the same decision:
//! `floodgate serve` (`--x-ratelimit-headers`, here on `/v1/check`) and
//! `floodgate gateway` (`headers: [draft-03]`) render Envoy's draft-03
//! `X-RateLimit-*` with `floodgate-http`'s one renderer and one picker: a
//! rule's name holding a quote and a backslash is escaped alike, and the
//! values are the same request after request — checked end to end, through
//! each binary's settings and listeners.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Gateway};
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
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let serve = Floodgate::start(bin, DOMAINS, &["--x-ratelimit-headers"], &[]);
    let up = upstream();
    let gateway = Gateway::start(
        bin,
        &format!(
            "gateway:\n  upstream: http://{}\nhttp:\n  domain: gw\n  descriptors:\n    - [{{header: {{name: x-user, key: user}}}}]\n  responses:\n    headers: [draft-03]\n{DOMAINS}",
            up.addr
        ),
        &[],
        &[],
    );
    let client = reqwest::Client::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The two requests of each step are answered within a second of one
    // another, in one window.
    clear_of_boundary(Duration::from_secs(60), Duration::from_secs(10));
    for step in 0..4 {
        let served = client
            .post(format!("http://127.0.0.1:{}/v1/check", serve.http))
            .json(&json!({"domain": "gw", "descriptors": [{"entries": {"user": "alice"}}]}))
            .send();
        let served = runtime.block_on(served).unwrap();
        let proxied = client
            .get(format!("http://127.0.0.1:{}/", gateway.port))
            .header("x-user", "alice")
            .send();
        let proxied = runtime.block_on(proxied).unwrap();
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
