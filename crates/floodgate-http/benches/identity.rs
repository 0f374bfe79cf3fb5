//! The cost of turning one request into descriptors.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate_http::HttpIdentity;
use floodgate_http::identity::NoExtensions;

const TYPICAL: &str = r#"http:
  domain: api
  client_ip: {trusted_hops: 1, ipv6_prefix: 64}
  routes: ["/users/{id}", "/users/me", "/orders/{id}/items/{item}", "/static/{*rest}"]
  cost: {header: x-request-cost, max: 100}
  descriptors:
    - [{generic: {key: scope, value: global}}]
    - [client_ip]
    - [{tier: {header: x-plan, values: [free, pro, enterprise], default: free}}, {api_key: {hash: true}}]
    - [{user: {header: x-user-id}}, route]
"#;

const PEER_ONLY: &str = "http: {domain: api, descriptors: [[client_ip]]}";

fn bench(c: &mut Criterion) {
    let (parts, ()) = http::Request::get("/orders/12/items/7?x=1")
        .header("x-forwarded-for", "198.51.100.1, 2001:db8:1:2::77")
        .header("x-api-key", "k-0123456789abcdef")
        .header("x-plan", "pro")
        .header("x-user-id", "alice")
        .header("x-request-cost", "3")
        .header("accept", "*/*")
        .header("user-agent", "bench")
        .body(())
        .unwrap()
        .into_parts();
    let peer = "10.0.0.2".parse().unwrap();
    for (name, yaml) in [("typical", TYPICAL), ("peer_only", PEER_ONLY)] {
        let id = HttpIdentity::from_yaml_str("bench.yaml", yaml).unwrap();
        let mut out = id.new_output();
        c.bench_function(&format!("descriptors/{name}"), |b| {
            b.iter(|| {
                id.build(black_box(&parts), peer, &NoExtensions, &mut out);
                black_box(out.len())
            });
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
