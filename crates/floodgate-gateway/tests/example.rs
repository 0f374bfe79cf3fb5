//! The bundled quick start (examples/gateway.yaml) loads, and behaves as
//! the README says: three answers from the upstream with rate-limit
//! headers, then 429.

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
            assert_eq!(r.status(), 200);
            assert!(
                current.starts_with(&format!("\"per-ip\";r={};t=", 2 - i)),
                "{current}"
            );
        } else {
            assert_eq!(r.status(), 429);
            assert!(header(&r, "retry-after").is_some());
        }
    }
    gw.shutdown().await;
}
