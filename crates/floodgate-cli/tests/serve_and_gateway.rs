//! Both frontends in one process: the rate limit service and the gateway
//! on one engine and one store, started and stopped by one host.

use std::time::Duration;

use floodgate_gateway::{Parts, Proxying};
use floodgate_runtime::host::{self, Both, Frontend};
use floodgate_runtime::settings::{Env, Flags};
use floodgate_server::{Rls, RlsSettings};
use floodgate_testkit::Upstream;
use floodgate_testkit::{free_port, http_request, wait_until};

#[test]
fn the_service_and_the_gateway_run_in_one_process() {
    let up = Upstream::start(|l| floodgate_gateway::demo::serve_demo(l, "upstream".into()));
    let (grpc, http) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.yaml");
    let config = format!(
        "server: {{grpc: 127.0.0.1:{grpc}, http: 127.0.0.1:{http}, admin: off, reload_interval: 0}}\n\
         gateway: {{listen: 127.0.0.1:0, upstream: http://{}}}\n\
         domains:\n  - domain: api\n    descriptors:\n      - key: user\n        \
         rate_limit: {{requests: 5, per: 1m}}\n",
        up.addr
    );
    std::fs::write(&path, config).unwrap();
    let flags = Flags::new().with("config", path.display().to_string());
    let env = Env::new(&|_| None);
    let loaded = floodgate_gateway::load_beside(&flags, &env, &Rls::sections()).unwrap();
    let parts = Parts::of(&loaded).unwrap();
    let documents = &loaded.runtime.compiled.loaded.documents;
    let rls = RlsSettings::resolve(&flags, &env, documents).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let running = runtime
        .block_on(host::start::<Both<Rls, Proxying>>(
            loaded.runtime,
            (rls, parts),
            None,
        ))
        .unwrap();
    // The service's listeners, then the gateway's.
    let gateway = running.addrs()[2].port();
    assert!(wait_until(Duration::from_secs(10), || {
        http_request(http, "GET", "/healthcheck", None, b"").is_some_and(|(s, _)| s == 200)
    }));
    let (status, body) = http_request(gateway, "GET", "/", None, b"").unwrap();
    assert_eq!((status, body.as_str()), (200, "upstream"));
    // One engine: the gateway's is the service's.
    let (rls, proxying) = (&running.frontend().0, &running.frontend().1);
    assert!(std::ptr::eq(rls.engine(), &**proxying.gateway().engine()));
    assert!(runtime.block_on(running.shutdown()));
}
