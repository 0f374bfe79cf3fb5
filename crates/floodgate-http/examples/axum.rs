//! An axum app behind the Floodgate layer.
//!
//! ```sh
//! cargo run -p floodgate-http --example axum
//! curl -i http://127.0.0.1:3000/            # 200 with RateLimit headers
//! curl -i -H 'Authorization: User alice' http://127.0.0.1:3000/orders/1
//! ```
//!
//! Runs until stopped; `--once` serves on a free port, sends a few requests
//! to itself, prints the answers and exits (a runnable smoke check).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use floodgate_http::identity::Attributes;
use floodgate_http::{FloodgateLayer, HttpSection};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet};

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: token_bucket, requests: 5, per: 1s, burst: 10}
      - key: user
        descriptors:
          - key: route
            rate_limit:
              name: per-user
              limits:
                - {algorithm: token_bucket, requests: 2, per: 1s}
                - {requests: 100, per: 1h}
http:
  domain: api
  routes: ["/orders/{id}"]
  descriptors:
    - [client_ip]
    - [{user: {extension: user}}, {route: {unmatched: other}}]
  responses:
    headers: [ietf]
  layer:
    shedding:
      low_priority_above: 100
      low_priority: {header: {name: x-priority, values: [low]}}
"#;

/// Authentication: `Authorization: User <name>` becomes the `user` value
/// the limiter keys on.
async fn auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok()?.strip_prefix("User ").map(str::to_owned));
    if let Some(user) = user {
        req.extensions_mut()
            .insert(Attributes::new().with("user", user));
    }
    next.run(req).await
}

fn peer(ext: &http::Extensions) -> Option<SocketAddr> {
    ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    let policy = PolicySet::compile(&load_str("example.yaml", CONFIG, &options)?)
        .map_err(|e| format!("{e:?}"))?;
    let engine = Arc::new(Engine::new(policy, MemoryBackend::new(Default::default())?));
    let mut http = HttpSection::from_yaml_str("example.yaml", CONFIG)?;
    http.layer.peer = peer;
    let layer = FloodgateLayer::with(engine, http.identity, http.contract, http.layer);

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/orders/{id}", get(|| async { "an order\n" }))
        .layer(layer)
        .layer(middleware::from_fn(auth));

    let once = std::env::args().any(|a| a == "--once");
    let addr = if once {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    if !once {
        println!("listening on http://{local}");
        server.await?;
        return Ok(());
    }
    tokio::spawn(async move { server.await });
    let client = reqwest::Client::new();
    for i in 0..4 {
        let res = client
            .get(format!("http://{local}/orders/{i}"))
            .header("authorization", "User alice")
            .send()
            .await?;
        let h = |n: &str| {
            res.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "{} ratelimit: {} | retry-after: {}",
            res.status(),
            h("ratelimit"),
            h("retry-after")
        );
    }
    Ok(())
}
