//! A file may configure both binaries: `floodgate gateway` ignores the
//! service's keys of the `server:` section (`server.grpc`, ...), saying at
//! WARN which, and where; `floodgate serve` reads them.

use std::path::Path;

use floodgate_testkit::{Gateway, wait_until};

use crate::gateway_lifecycle::upstream;

#[test]
fn the_gateway_names_the_service_settings_it_ignores() {
    let up = upstream();
    let config = format!(
        "gateway: {{upstream: 'http://{}'}}\nserver:\n  reload_interval: 0\n  grpc: 127.0.0.1:1\n  limits: {{max_requests: 5}}\n{}",
        up.addr,
        "domains:\n  - domain: gateway\n    descriptors:\n      - key: remote_address\n        rate_limit: {requests: 5, per: 1m}\nhttp: {domain: gateway, descriptors: [[client_ip]]}\n",
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let gw = Gateway::start(bin, &config, &[], &[]);
    let warned = |log: &str| {
        log.lines().any(|l| {
            l.contains(" WARN ")
                && l.contains("settings of `floodgate serve` only")
                && l.contains("server.grpc (")
                && l.contains("gateway.yaml:4:")
                && l.contains("server.limits.max_requests (")
        })
    };
    assert!(
        wait_until(std::time::Duration::from_secs(5), || warned(&gw.log())),
        "{}",
        gw.log()
    );
}
