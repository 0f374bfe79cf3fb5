//! Arbitrary header bytes and paths never panic, never produce unbounded
//! values, and never let a client-written entry through.

use crate::common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::{identity, peer};
use floodgate_http::HttpIdentity;
use floodgate_http::identity::{NoExtensions, RequestDescriptors};
use floodgate_policy::Descriptor;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

const MAX: usize = 48;

fn identities() -> &'static [HttpIdentity] {
    static IDS: OnceLock<Vec<HttpIdentity>> = OnceLock::new();
    IDS.get_or_init(build_identities)
}

fn build_identities() -> Vec<HttpIdentity> {
    let actions = r#"descriptors:
  - [client_ip]
  - [api_key, {bearer: {hash: true}}]
  - [{tier: {header: x-plan, values: [free, pro], default: free}}]
  - [{user: {header: x-user-id}}, {route: {unmatched: other}}]
  - [method, path]"#;
    [
        "client_ip: {}",
        "client_ip: {trusted_hops: 1, ipv6_prefix: 64, ipv4_prefix: 24}",
        "client_ip: {trusted_hops: 2, header: forwarded}",
        "client_ip: {trusted_proxies: [0.0.0.0/0, '::/0'], header: x-real-ip}",
        "client_ip: {trusted_proxies: [10.0.0.0/8], trusted_hops: 3}",
    ]
    .iter()
    .map(|c| {
        identity(&format!(
            "domain: api\n{c}\nmax_value_len: {MAX}\nroutes: ['/u/{{id}}', '/s/{{*r}}']\ncost: {{header: x-request-cost, max: 10}}\n{actions}"
        ))
    })
    .collect()
}

const HEADERS: &[&str] = &[
    "x-forwarded-for",
    "forwarded",
    "x-real-ip",
    "authorization",
    "x-api-key",
    "x-plan",
    "x-user-id",
    "x-request-cost",
];

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        "[0-9a-fA-F:.\\[\\], ;=\"_\\\\forunkwn]{0,80}".prop_map(String::into_bytes),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(usize, Vec<u8>)>> {
    proptest::collection::vec((0..HEADERS.len(), header_value()), 0..8)
}

fn header_map(list: &[(usize, Vec<u8>)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (i, bytes) in list {
        if let Ok(v) = HeaderValue::from_bytes(bytes) {
            h.append(HeaderName::from_static(HEADERS[*i]), v);
        }
    }
    h
}

/// A GET of `uri` with `headers`.
fn request(headers: HeaderMap, uri: http::Uri) -> http::Request<()> {
    let mut req = http::Request::get(uri).body(()).unwrap();
    *req.headers_mut() = headers;
    req
}

fn peers() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| SocketAddr::from((o, 1))),
        any::<[u16; 8]>().prop_map(|s| SocketAddr::from((s, 1))),
        Just(peer("10.0.0.2")),
        Just(peer("[::ffff:10.0.0.2]:1")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_requests_never_panic(
        list in headers(),
        from in peers(),
        path in "/[ -~]{0,60}",
    ) {
        let uri: http::Uri = path.parse().unwrap_or_else(|_| "/".parse().unwrap());
        let head = request(header_map(&list), uri);
        let mut out = RequestDescriptors::new();
        for id in identities() {
            id.build(&head, from.ip(), &NoExtensions, &mut out);
            prop_assert!((1..=10).contains(&out.hits_addend()));
            for d in out.iter() {
                for j in 0..d.len() {
                    let (k, v) = d.entry(j);
                    prop_assert!(!k.is_empty());
                    prop_assert!(!v.is_empty() && v.len() <= MAX, "{k}={v:?}");
                }
            }
            prop_assert_eq!(out.client_ip(), Some(id.client_ip(&head, from.ip())));
        }
    }

    #[test]
    fn without_trust_headers_change_nothing(list in headers(), from in peers()) {
        let id = &identities()[0];
        let ip = id.client_ip(&request(header_map(&list), "/".parse().unwrap()), from.ip());
        prop_assert_eq!(ip, id.client_ip(&http::Request::new(()), from.ip()));
    }

    #[test]
    fn client_written_entries_never_win(spoof in header_value()) {
        let real = "203.0.113.9".parse::<std::net::IpAddr>().unwrap();
        let lb = peer("10.0.0.2");
        // X-Forwarded-For, one trusted hop: whatever the client sent, on its
        // own line or on the proxy's, the proxy's entry wins.
        let id = &identities()[1];
        if let Ok(v) = HeaderValue::from_bytes(&spoof) {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", v);
            h.append("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
            prop_assert_eq!(id.client_ip(&request(h, "/".parse().unwrap()), lb.ip()), real);
        }
        let mut joined = spoof.clone();
        joined.extend_from_slice(b", 203.0.113.9");
        if let Ok(v) = HeaderValue::from_bytes(&joined) {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", v);
            prop_assert_eq!(id.client_ip(&request(h, "/".parse().unwrap()), lb.ip()), real);
        }
        // Forwarded, two trusted hops: the proxies' entries win, or (when the
        // client's bytes break the proxy's line) the peer: never a guess.
        let id = &identities()[2];
        let mut joined = spoof;
        joined.extend_from_slice(b", for=203.0.113.9, for=10.9.9.9");
        if let Ok(v) = HeaderValue::from_bytes(&joined) {
            let mut h = HeaderMap::new();
            h.append("forwarded", v);
            let ip = id.client_ip(&request(h, "/".parse().unwrap()), lb.ip());
            prop_assert!(ip == real || ip == lb.ip(), "{}", ip);
        }
    }
}
