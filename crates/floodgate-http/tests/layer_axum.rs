//! The tower layer in a real axum app on a real socket, with a real client.

use crate::support;

use floodgate::SystemClock;
use support::{app, client, engine_with, header, layer_for, serve};

const PER_IP: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: sliding_log, requests: 3, per: 1m}
http:
  domain: api
  descriptors:
    - [client_ip]
"#;

async fn server(
    text: &str,
) -> (
    String,
    floodgate_http::FloodgateLayer<floodgate_policy::MemoryBackend, SystemClock>,
) {
    let layer = layer_for(engine_with(text, SystemClock), text);
    let url = serve(app(layer.clone())).await;
    (url, layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_is_429_with_headers_and_problem_json() {
    let (url, _) = server(PER_IP).await;
    let c = client();
    for left in (0..3).rev() {
        let r = c.get(format!("{url}/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "ratelimit-policy"), Some(r#""per-ip";q=3;w=60"#));
        let rl = header(&r, "ratelimit").unwrap().to_owned();
        assert!(rl.starts_with(&format!(r#""per-ip";r={left};t="#)), "{rl}");
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(
        header(&r, "ratelimit").unwrap(),
        format!(r#""per-ip";r=0;t={retry}"#)
    );
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    assert_eq!(body["retry-after"], retry);
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"per-ip\": 3 requests per 60 seconds"),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_when_the_client_prefers_it() {
    let (url, _) = server(PER_IP).await;
    let c = client();
    for _ in 0..3 {
        c.get(format!("{url}/")).send().await.unwrap();
    }
    let r = c
        .get(format!("{url}/"))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let text = r.text().await.unwrap();
    assert!(
        text.starts_with("429 Too Many Requests\nRate limit exceeded for policy \"per-ip\""),
        "{text}"
    );
    // JSON still wins when both are acceptable.
    let r = c
        .get(format!("{url}/"))
        .header("accept", "text/plain;q=0.5, application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_headers_and_per_rule_status() {
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {name: secret, algorithm: sliding_log, requests: 1, per: 1m}
      - key: generic_key
        value: shed
        rate_limit: {name: shed-me, algorithm: sliding_log, requests: 1, per: 1h}
http:
  domain: api
  routes: ["/charges"]
  descriptors:
    - [client_ip]
    - [{route: {unmatched: other}}, {generic: {key: generic_key, value: shed}}]
  responses:
    rules:
      secret: {hide: true}
      shed-me: {status: 503}
"#;
    let text = text.replace(
        "[{route: {unmatched: other}}, {generic: {key: generic_key, value: shed}}]",
        "[{generic: {key: generic_key, value: shed}}]",
    );
    let (url, _) = server(&text).await;
    let c = client();
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The hidden rule is not disclosed; the other one is.
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""shed-me";q=1;w=3600"#)
    );
    let r = c.get(format!("{url}/")).send().await.unwrap();
    // Both deny: the status comes from the rule that sets one.
    assert_eq!(r.status(), 503);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(retry > 60, "the longest wait wins: {retry}");
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert_eq!(body["violated-policies"], serde_json::json!(["shed-me"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn globally_hidden_headers() {
    let text = format!("{PER_IP}  responses: {{hide_headers: true}}\n");
    let (url, _) = server(&text).await;
    let c = client();
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for name in floodgate_http::contract::ALL {
        assert!(r.headers().get(&name).is_none(), "{name}");
    }
    c.get(format!("{url}/")).send().await.unwrap();
    c.get(format!("{url}/")).send().await.unwrap();
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(header(&r, "retry-after").is_some(), "Retry-After stays");
    assert!(header(&r, "ratelimit").is_none());
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!([]));
    assert!(!body["detail"].as_str().unwrap().contains("per-ip"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authenticated_user_keys_the_limit() {
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, algorithm: sliding_log, requests: 2, per: 1m}
http:
  domain: api
  descriptors:
    - [{user: {extension: user}}]
"#;
    let (url, _) = server(text).await;
    let c = client();
    let get = |who: Option<&'static str>| {
        let mut b = c.get(format!("{url}/me"));
        if let Some(w) = who {
            b = b.header("authorization", format!("User {w}"));
        }
        b.send()
    };
    assert_eq!(get(Some("alice")).await.unwrap().status(), 200);
    assert_eq!(get(Some("alice")).await.unwrap().status(), 200);
    assert_eq!(get(Some("alice")).await.unwrap().status(), 429);
    let bob = get(Some("bob")).await.unwrap();
    assert_eq!(bob.status(), 200);
    assert_eq!(
        header(&bob, "ratelimit").map(|v| v.starts_with(r#""per-user";r=1;"#)),
        Some(true)
    );
    // Anonymous: no user, no descriptor, no limit and no headers.
    for _ in 0..4 {
        let r = get(None).await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(header(&r, "ratelimit").is_none());
    }
}
