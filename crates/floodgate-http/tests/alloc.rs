//! Building descriptors allocates nothing once the buffers have grown:
//! a counting global allocator (per thread, so parallel tests do not
//! interfere) proves it.

use crate::common;
use crate::counting;

use common::{identity, peer, request};
use counting::allocations;
use floodgate_http::identity::{Attributes, RequestDescriptors};

const CONFIG: &str = r#"domain: api
client_ip:
  trusted_hops: 2
  trusted_proxies: [10.0.0.0/8, "2001:db8:ffff::/48"]
  header: forwarded
  ipv6_prefix: 64
routes: ["/users/{id}", "/orders/{id}/items/{item}", "/static/{*rest}"]
cost: {header: x-request-cost, max: 100}
max_value_len: 64
descriptors:
  - [{generic: {key: scope, value: global}}]
  - [client_ip]
  - [{api_key: {header: x-api-key, hash: true}}]
  - [{api_key: {key: raw_key}}]
  - [{bearer: {hash: true}}]
  - [{tier: {header: x-plan, values: [free, pro, enterprise], default: free}}, {api_key: {header: x-api-key}}]
  - [{user: {header: x-user-id}}, {route: {unmatched: other}}]
  - [{tenant: {extension: tenant}}, method]
  - [path]"#;

fn requests() -> Vec<(http::Request<()>, std::net::SocketAddr)> {
    let long = "v".repeat(500);
    let mut out = Vec::new();
    let heads = [
        request(
            "GET",
            "/users/42?q=1",
            &[
                (
                    "forwarded",
                    r#"for="[2001:db8:1:2::99]:4711";proto=https, for=10.1.1.1"#,
                ),
                ("x-api-key", "k-1"),
                ("x-plan", "PRO"),
                ("x-user-id", "alice"),
                ("x-request-cost", "7"),
                ("authorization", "Bearer abc.def.ghi"),
            ],
        ),
        request(
            "POST",
            "/orders/1/items/2",
            &[
                ("forwarded", "for=unknown"),
                ("x-api-key", &long),
                ("x-user-id", &long),
                ("x-plan", "platinum"),
            ],
        ),
        request(
            "DELETE",
            &format!("/nowhere/{long}"),
            &[("x-request-cost", "99999999")],
        ),
        request(
            "GET",
            "/static/a/b/c.css",
            &[
                ("forwarded", "for=203.0.113.1"),
                ("forwarded", "for=10.0.0.9"),
            ],
        ),
    ];
    for (i, parts) in heads.into_iter().enumerate() {
        let mut req = http::Request::from_parts(parts, ());
        if i % 2 == 0 {
            req.extensions_mut()
                .insert(Attributes::new().with("tenant", "acme"));
        }
        let from = if i == 2 {
            "[::ffff:192.0.2.1]:1"
        } else {
            "10.0.0.2:1"
        };
        out.push((req, peer(from)));
    }
    out
}

#[test]
fn steady_state_builds_allocate_nothing() {
    let id = identity(CONFIG);
    let reqs = requests();
    let mut out = RequestDescriptors::new();
    // Warm-up: the buffers grow.
    for (req, from) in &reqs {
        id.build(req, from.ip(), req.extensions(), &mut out);
    }
    // The counter counts.
    let before = allocations();
    drop(std::hint::black_box(String::from("x")));
    assert_eq!(allocations() - before, 1);

    let before = allocations();
    let mut built = 0;
    for _ in 0..100 {
        for (req, from) in &reqs {
            id.build(req, from.ip(), req.extensions(), &mut out);
            built += out.len();
        }
    }
    assert_eq!(allocations() - before, 0, "allocations in steady state");
    assert!(built > 400, "{built}");
}

#[test]
fn presized_buffers_allocate_nothing_from_the_first_request() {
    let id = identity(CONFIG);
    let reqs = requests();
    let mut out = id.new_output();
    let before = allocations();
    for (req, from) in &reqs {
        id.build(req, from.ip(), req.extensions(), &mut out);
    }
    assert_eq!(allocations() - before, 0);
    // The values are the expected ones.
    let (req, from) = &reqs[0];
    id.build(req, from.ip(), req.extensions(), &mut out);
    let ip = out.iter().find_map(|d| d.get("remote_address"));
    assert_eq!(ip, Some("2001:db8:1:2::/64"));
    assert_eq!(out.hits_addend(), 7);
}

/// A path already in normal form is checked without a copy (the gateway
/// normalises every request's path before limiting it).
#[test]
fn normal_paths_are_checked_without_allocating() {
    use floodgate_http::identity::{EncodedSlashes, normalize_path};
    let paths = ["/", "/users/42", "/static/a/b.css", "/q/a%20b/", "/x%2Fy"];
    let before = allocations();
    for p in paths {
        let n = normalize_path(p.as_bytes(), EncodedSlashes::Keep).unwrap();
        assert_eq!(&*n, p.as_bytes());
    }
    assert_eq!(allocations() - before, 0);
}
