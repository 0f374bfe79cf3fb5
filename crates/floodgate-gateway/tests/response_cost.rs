//! Costs known after the response through the gateway, on a real clock
//! against a real upstream: the tokens it says it used (a header, or a
//! trailer over HTTP/1.1 chunked and HTTP/2) put the user in debt; the
//! next request is 429 with `Retry-After` until the refill repays it; in
//! memory and with Redis.

use crate::support;

use std::time::{Duration, Instant};

use floodgate_gateway::Running;
use floodgate_runtime::settings::{Env, Flags};
use floodgate_testkit::Redis;
use support::{ConfigFile, Upstream, gateway, h1, h2, header, upstream};

/// 10 tokens a second per user (one every 100 ms, a burst of 10).
fn config(field: &str, protocol: &str) -> String {
    format!(
        r#"
http:
  domain: llm
  descriptors:
    - [{{user: {{header: x-user}}}}]
  response_cost: {{{field}: x-tokens-used, cap: 1000}}
domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {{name: tokens, algorithm: token_bucket, requests: 10, per: 1s}}
gateway: {{upstream: {{url: http://127.0.0.1:1, protocol: {protocol}}}}}
server: {{reload_interval: 0}}
"#
    )
}

/// `GET url` as `user`, its body read to the end: the status and its
/// `Retry-After`.
async fn ask(c: &reqwest::Client, url: &str, user: &str) -> (u16, Option<u64>) {
    let r = c
        .get(url)
        .header("x-user", user)
        .header("te", "trailers")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = header(&r, "retry-after").map(|v| v.parse().unwrap());
    r.bytes().await.unwrap();
    (status, retry)
}

/// A gateway of `file` in front of `up` whose store is the Redis server
/// `redis`.
async fn gateway_on_redis(file: &ConfigFile, up: &Upstream, redis: &Redis) -> Running {
    let flags = Flags::new()
        .with("config", file.path.display().to_string())
        .with("gateway.listen", "127.0.0.1:0")
        .with("gateway.upstream.url", format!("http://{}", up.addr))
        .with("server.admin", "off")
        .with("store.backend", "redis")
        .with("store.url", redis.addr());
    let loaded = floodgate_gateway::load(&flags, &Env::new(&|_| None)).unwrap();
    floodgate_gateway::start(loaded, None).await.unwrap()
}

/// How the upstream tells its cost: the field (`header` or `trailer`),
/// the path that answers so, the protocol to it.
type How<'a> = (&'a str, &'a str, &'a str);

/// 30 tokens used on a bucket of 10: 20 owed, about 2 s of refill.
async fn debt_through_the_gateway(how: How<'_>, client: reqwest::Client) {
    let up = upstream().await;
    let file = ConfigFile::new(&config(how.0, how.2));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    owes_then_repays(&gw, &up, how, client).await;
    gw.shutdown().await;
}

/// Through `gw`, 30 tokens put a user 20 in debt, repaid by the refill.
async fn owes_then_repays(gw: &Running, up: &Upstream, how: How<'_>, client: reqwest::Client) {
    let (field, path, protocol) = how;
    let url = format!("http://{}{path}?n=30", gw.addr());
    let ctx = format!("{field} over {protocol}");
    let user = format!("{field}-{protocol}");
    let charged = Instant::now();
    assert_eq!(ask(&client, &url, &user).await.0, 200, "{ctx}");
    let (status, retry) = ask(&client, &url, &user).await;
    assert_eq!(status, 429, "{ctx}: in debt");
    assert_eq!(retry, Some(2), "{ctx}: 20 tokens owed at 10 a second");
    assert_eq!(ask(&client, &url, "someone-else").await.0, 200, "{ctx}");
    let requests = up.requests();
    loop {
        let (status, _) = ask(&client, &url, &user).await;
        if status == 200 {
            break;
        }
        let late = charged.elapsed() > Duration::from_secs(6);
        assert!(!late, "{ctx}: never repaid");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = charged.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "{ctx}: repaid after {waited:?}"
    );
    let reached = up.requests() - requests;
    assert_eq!(
        reached, 1,
        "{ctx}: denied requests never reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_in_a_header_put_a_user_in_debt_until_refill_repays_it() {
    debt_through_the_gateway(("header", "/tokens", "http1"), h1()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_in_a_trailer_are_charged_over_http1_and_http2() {
    debt_through_the_gateway(("trailer", "/tokens/trailer", "http1"), h1()).await;
    debt_through_the_gateway(("trailer", "/tokens/trailer", "http2"), h2()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debt_is_kept_in_redis_too() {
    let redis = Redis::start();
    let up = upstream().await;
    let file = ConfigFile::new(&config("trailer", "http1"));
    let gw = gateway_on_redis(&file, &up, &redis).await;
    owes_then_repays(&gw, &up, ("trailer", "/tokens/trailer", "http1"), h1()).await;
    gw.shutdown().await;
}
