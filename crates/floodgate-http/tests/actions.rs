//! Every action, composite descriptors, the skip-if-absent rule, route
//! templates, tiers, secrets and costs.

use crate::common;

use common::{e, identity, peer, plain, request, run, run_request};
use floodgate_http::identity::{Attributes, NoExtensions, RequestDescriptors, secret_hash};
use floodgate_policy::Descriptor;

#[test]
fn constants_methods_and_client() {
    let id = identity(
        "domain: api
descriptors:
  - [{generic: {key: scope, value: global}}]
  - [{generic: {value: everyone}}]
  - [client_ip]
  - [{client_ip: {key: ip}}]
  - [method]
  - [{method: {key: verb}}, {generic: {key: g, value: v}}]",
    );
    assert_eq!(id.domain(), "api");
    let got = run_request(&id, &request("DELETE", "/x", &[]), "192.0.2.1");
    assert_eq!(
        got,
        e(&[
            &[("scope", "global")],
            &[("generic_key", "everyone")],
            &[("remote_address", "192.0.2.1")],
            &[("ip", "192.0.2.1")],
            &[("method", "DELETE")],
            &[("verb", "DELETE"), ("g", "v")],
        ])
    );
}

#[test]
fn headers_skip_their_descriptor_when_absent() {
    let id = identity(
        "domain: api
descriptors:
  - [{header: {name: X-Plan, key: plan}}]
  - [{header: {name: x-region}}]
  - [{header: {name: x-plan, key: plan}}, client_ip]
  - [client_ip]",
    );
    let got = run(&id, "192.0.2.1", &[("x-plan", " pro ")]);
    assert_eq!(
        got,
        e(&[
            &[("plan", "pro")],
            &[("plan", "pro"), ("remote_address", "192.0.2.1")],
            &[("remote_address", "192.0.2.1")],
        ])
    );
    let got = run(&id, "192.0.2.1", &[("x-region", "eu"), ("x-plan", "")]);
    assert_eq!(
        got,
        e(&[&[("x-region", "eu")], &[("remote_address", "192.0.2.1")]])
    );
    // Several lines: the first.
    let got = run(&id, "192.0.2.1", &[("x-region", "eu"), ("x-region", "us")]);
    assert_eq!(got[0], e(&[&[("x-region", "eu")]])[0]);
}

#[test]
fn secrets_plain_and_hashed() {
    let id = identity(
        "domain: api
descriptors:
  - [api_key]
  - [{api_key: {header: x-token, key: token, hash: true}}]
  - [bearer]
  - [{bearer: {key: jwt, hash: true}}]",
    );
    let got = run(
        &id,
        "192.0.2.1",
        &[
            ("x-api-key", "k-123"),
            ("x-token", "t-456"),
            ("authorization", "Bearer eyJhbGciOi.payload.sig"),
        ],
    );
    let jwt = "eyJhbGciOi.payload.sig";
    assert_eq!(
        got,
        e(&[
            &[("api_key", "k-123")],
            &[("token", &secret_hash("t-456"))],
            &[("bearer", jwt)],
            &[("jwt", &secret_hash(jwt))],
        ])
    );
    assert!(!got.concat().iter().any(|(_, v)| v.contains("t-456")));
    // Other schemes and malformed tokens yield nothing.
    for auth in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "Token x"] {
        let got = run(&id, "192.0.2.1", &[("authorization", auth)]);
        assert!(got.is_empty(), "{auth}: {got:?}");
    }
}

#[test]
fn users_tenants_and_extensions() {
    let id = identity(
        "domain: api
descriptors:
  - [{user: {header: x-user-id}}]
  - [{tenant: {extension: tenant, key: org}}]
  - [{extension: {name: user}}]
  - [{user: {extension: user}}, {tenant: {header: x-tenant}}]",
    );
    let mut req = http::Request::get("/")
        .header("x-user-id", "u-from-header")
        .header("x-tenant", "t1")
        .body(())
        .unwrap();
    let mut out = RequestDescriptors::new();
    id.build(&req, peer("192.0.2.1").ip(), req.extensions(), &mut out);
    assert_eq!(plain(&out), e(&[&[("user", "u-from-header")]]));

    req.extensions_mut().insert(
        Attributes::new()
            .with("user", "alice")
            .with("tenant", "acme"),
    );
    id.build(&req, peer("192.0.2.1").ip(), req.extensions(), &mut out);
    assert_eq!(
        plain(&out),
        e(&[
            &[("user", "u-from-header")],
            &[("org", "acme")],
            &[("user", "alice")],
            &[("user", "alice"), ("tenant", "t1")],
        ])
    );

    // Any ExtensionSource works with `build`.
    let (parts, ()) = req.into_parts();
    let attrs = Attributes::new().with("user", "bob");
    id.build(&parts, peer("192.0.2.1").ip(), &attrs, &mut out);
    assert_eq!(
        plain(&out),
        e(&[
            &[("user", "u-from-header")],
            &[("user", "bob")],
            &[("user", "bob"), ("tenant", "t1")],
        ])
    );
}

#[test]
fn routes_share_one_key() {
    let id = identity(
        r#"domain: api
routes: ["/users/{id}", "/users/me", "/orders/{id}/items/{item}", "/static/{*rest}"]
descriptors:
  - [route]
  - [{route: {key: endpoint, unmatched: other}}]
  - [method, route]"#,
    );
    let route_of = |path: &str| run_request(&id, &request("GET", path, &[]), "192.0.2.1");
    assert_eq!(
        route_of("/users/42?x=1"),
        e(&[
            &[("route", "/users/{id}")],
            &[("endpoint", "/users/{id}")],
            &[("method", "GET"), ("route", "/users/{id}")],
        ])
    );
    assert_eq!(route_of("/users/7")[0], route_of("/users/8")[0]);
    assert_eq!(route_of("/users/me")[0][0].1, "/users/me");
    assert_eq!(
        route_of("/orders/1/items/2")[0][0].1,
        "/orders/{id}/items/{item}"
    );
    assert_eq!(route_of("/static/css/site.css")[0][0].1, "/static/{*rest}");
    assert_eq!(route_of("//users/42/")[0][0].1, "/users/{id}");
    // Unmatched: only the descriptor with a constant is sent; never the path.
    assert_eq!(route_of("/admin/secret"), e(&[&[("endpoint", "other")]]));
    assert_eq!(
        route_of("/users/1/../../admin"),
        e(&[&[("endpoint", "other")]])
    );
    assert_eq!(id.route("/users/5"), Some("/users/{id}"));
}

#[test]
fn raw_paths_only_when_asked() {
    let id = identity("domain: api\nmax_value_len: 40\ndescriptors: [[path], [{path: {key: p}}]]");
    let got = run_request(&id, &request("GET", "/a/b?q=secret", &[]), "192.0.2.1");
    assert_eq!(got, e(&[&[("path", "/a/b")], &[("p", "/a/b")]]));
    let long = format!("/{}", "x".repeat(100));
    let got = run_request(&id, &request("GET", &long, &[]), "192.0.2.1");
    assert_eq!(got[0][0].1.len(), 40);
}

#[test]
fn tiers() {
    let id = identity(
        "domain: api
descriptors:
  - [{tier: {header: x-plan, values: [free, pro, enterprise], default: free}}]
  - [{tier: {header: x-plan, key: plan, values: [Pro]}}, api_key]
  - [{tier: {extension: plan, values: [gold], default: GOLD}}]",
    );
    let tier = |h: &[(&str, &str)]| run(&id, "192.0.2.1", h);
    assert_eq!(
        tier(&[("x-plan", "pro"), ("x-api-key", "k")]),
        e(&[
            &[("tier", "pro")],
            &[("plan", "Pro"), ("api_key", "k")],
            &[("tier", "gold")],
        ])
    );
    assert_eq!(tier(&[("x-plan", "ENTERPRISE")])[0][0].1, "enterprise");
    // Unknown or absent: the default; without a default, nothing.
    assert_eq!(
        tier(&[("x-plan", "platinum"), ("x-api-key", "k")])[0][0].1,
        "free"
    );
    assert_eq!(tier(&[("x-plan", "platinum"), ("x-api-key", "k")]).len(), 2);
    assert_eq!(tier(&[])[0], e(&[&[("tier", "free")]])[0]);
}

#[test]
fn cost_bounds() {
    let id = identity(
        "domain: api
cost: {header: x-request-cost, max: 100}
descriptors: [[client_ip]]",
    );
    let hits = |v: Option<&str>| {
        let h: Vec<(&str, &str)> = v.map(|v| ("x-request-cost", v)).into_iter().collect();
        let mut out = RequestDescriptors::new();
        id.build(
            &request("GET", "/", &h),
            peer("192.0.2.1").ip(),
            &NoExtensions,
            &mut out,
        );
        assert_eq!(out[0].hits_addend(), Some(u64::from(out.hits_addend())));
        out.hits_addend()
    };
    assert_eq!(hits(Some("5")), 5);
    assert_eq!(hits(Some("100")), 100);
    assert_eq!(hits(Some("101")), 100);
    assert_eq!(hits(Some("99999999999999999999999")), 100);
    for bad in ["0", "-1", "1.5", "abc", "", " "] {
        assert_eq!(hits(Some(bad)), 1, "{bad}");
    }
    assert_eq!(hits(None), 1);

    let id = identity(
        "domain: api\ncost: {extension: cost, max: 10, default: 3}\ndescriptors: [[method]]",
    );
    let attrs = Attributes::new().with("cost", "7");
    let mut out = RequestDescriptors::new();
    id.build(
        &request("GET", "/", &[]),
        peer("192.0.2.1").ip(),
        &attrs,
        &mut out,
    );
    assert_eq!(out.hits_addend(), 7);
    id.build(
        &request("GET", "/", &[]),
        peer("192.0.2.1").ip(),
        &NoExtensions,
        &mut out,
    );
    assert_eq!(out.hits_addend(), 3);
    // Without a cost source: 1, and descriptors carry no addend of their own.
    let id = identity("domain: api\ndescriptors: [[method]]");
    id.build(
        &request("GET", "/", &[]),
        peer("192.0.2.1").ip(),
        &NoExtensions,
        &mut out,
    );
    assert_eq!((out.hits_addend(), out[0].hits_addend()), (1, None));
}

#[test]
fn long_and_binary_values_are_bounded_and_distinct() {
    let id = identity(
        "domain: api\nmax_value_len: 32\ndescriptors: [[{header: {name: x-id}}], [api_key]]",
    );
    let long_a = "a".repeat(100);
    let long_b = format!("{}b", "a".repeat(99));
    let a = run(
        &id,
        "192.0.2.1",
        &[("x-id", &long_a), ("x-api-key", &long_a)],
    );
    let b = run(&id, "192.0.2.1", &[("x-id", &long_b)]);
    assert_eq!(a[0][0].1.len(), 32);
    assert_eq!(a[1][0].1.len(), 32);
    assert!(a[0][0].1.starts_with("aaaaaaaaaaaaaaa~"));
    assert_ne!(a[0][0].1, b[0][0].1);
    // Not UTF-8: hashed, never lost.
    let mut parts = request("GET", "/", &[]);
    parts
        .headers
        .insert("x-id", http::HeaderValue::from_bytes(b"caf\xe9").unwrap());
    let got = run_request(&id, &parts, "192.0.2.1");
    assert!(got[0][0].1.starts_with("caf~"), "{got:?}");
}

#[test]
fn buffers_are_reused_and_reset() {
    let id =
        identity("domain: api\ndescriptors: [[{header: {name: x-a}}], [{header: {name: x-b}}]]");
    let mut out = id.new_output();
    assert!(out.is_empty());
    id.build(
        &request("GET", "/", &[("x-a", "1"), ("x-b", "2")]),
        peer("192.0.2.1").ip(),
        &NoExtensions,
        &mut out,
    );
    assert_eq!(out.len(), 2);
    id.build(
        &request("GET", "/", &[("x-b", "3")]),
        peer("192.0.2.1").ip(),
        &NoExtensions,
        &mut out,
    );
    assert_eq!(plain(&out), e(&[&[("x-b", "3")]]));
    assert_eq!(out.as_slice()[0].get("x-b"), Some("3"));
    id.build(
        &request("GET", "/", &[]),
        peer("192.0.2.1").ip(),
        &NoExtensions,
        &mut out,
    );
    assert!(out.is_empty());
    assert_eq!(id.descriptor_count(), 2);
}

#[test]
fn shareable_across_threads() {
    fn check<T: Send + Sync + Clone>() {}
    check::<floodgate_http::HttpIdentity>();
    check::<RequestDescriptors>();
}

#[test]
fn connect_requests_have_no_path() {
    let id = identity("domain: api\ndescriptors: [[path], [method]]");
    let got = run_request(
        &id,
        &request("CONNECT", "example.com:443", &[]),
        "192.0.2.1",
    );
    assert_eq!(got, e(&[&[("method", "CONNECT")]]));
}

#[test]
fn default_keys() {
    let id = identity(
        "domain: api
descriptors:
  - [{header: {name: X-Region}}]
  - [{extension: {name: Plan}}]
  - [{route: {unmatched: none}}]
routes: ['/x']",
    );
    let mut out = RequestDescriptors::new();
    let attrs = Attributes::new().with("Plan", "gold");
    let parts = request("GET", "/", &[("x-region", "eu")]);
    id.build(&parts, peer("192.0.2.1").ip(), &attrs, &mut out);
    assert_eq!(
        plain(&out),
        e(&[
            &[("x-region", "eu")],
            &[("Plan", "gold")],
            &[("route", "none")]
        ])
    );
}
