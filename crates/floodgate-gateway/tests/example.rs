//! The bundled quick start (examples/gateway.yaml) loads, and behaves as
//! the README and docs/gateway.md say: three answers from the upstream with
//! rate-limit headers (`t=60`), then 429 whose `t` is its `Retry-After`.

use crate::support;

use std::path::PathBuf;

use floodgate_runtime::settings::{Env, Flags};
use support::{h1, header, upstream};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.yaml")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_works() {
    let config = example().display().to_string();
    let plain = floodgate_gateway::load(
        &Flags::new().with("config", config.clone()),
        &Env::new(&|_| None),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plain.gateway.listen, "127.0.0.1:8000".parse().unwrap());
    assert_eq!(
        plain.gateway.upstream.urls[0].authority.as_str(),
        "127.0.0.1:9000"
    );
    assert!(plain.http.is_some());

    // The same file, on free ports, in front of a real upstream.
    let up = upstream().await;
    let flags = Flags::new()
        .with("config", config)
        .with("gateway.listen", "127.0.0.1:0")
        .with("gateway.upstream.url", format!("http://{}", up.addr))
        .with("server.admin", "off");
    let loaded = floodgate_gateway::load(&flags, &Env::new(&|_| None)).unwrap();
    let gw = floodgate_gateway::start(loaded, None).await.unwrap();
    let c = h1();
    for i in 0..4 {
        let r = c
            .get(format!("http://{}/", gw.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"per-ip\";q=3;w=60"));
        let current = header(&r, "ratelimit").unwrap().to_owned();
        if i < 3 {
            // An admitted request's `t`: until the limit is whole again,
            // when this request leaves the sliding minute.
            assert_eq!(r.status(), 200);
            assert_eq!(current, format!("\"per-ip\";r={};t=60", 2 - i));
        } else {
            // A rejection's `t` is its Retry-After: when the first request
            // leaves the minute (the four are sent within seconds).
            assert_eq!(r.status(), 429);
            let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
            assert!((50..=60).contains(&retry), "{retry}");
            assert_eq!(current, format!("\"per-ip\";r=0;t={retry}"));
        }
    }
    gw.shutdown().await;
}
