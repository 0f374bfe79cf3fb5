//! A request head, any method, path, headers and peer, against an `http:`
//! section that uses every kind of descriptor: building its descriptors,
//! client address, cost and route never panics.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::LazyLock;

use floodgate_http::identity::{HttpIdentity, NoExtensions};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

const CONFIG: &str = r#"http:
  domain: api
  client_ip:
    trusted_hops: 2
    trusted_proxies: [10.0.0.0/8, "2001:db8:ffff::/48", 127.0.0.1]
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
    - [path]
"#;

static XFF: LazyLock<HttpIdentity> = LazyLock::new(|| {
    HttpIdentity::from_yaml_str(
        "fuzz.yaml",
        &CONFIG.replace("header: forwarded", "header: x-forwarded-for"),
    )
    .expect("the fuzz configuration reads")
});
static FORWARDED: LazyLock<HttpIdentity> = LazyLock::new(|| {
    HttpIdentity::from_yaml_str("fuzz.yaml", CONFIG).expect("the fuzz configuration reads")
});

/// Header names the configuration reads, and a few it does not.
const NAMES: [&str; 10] = [
    "forwarded",
    "x-forwarded-for",
    "x-api-key",
    "authorization",
    "x-plan",
    "x-user-id",
    "x-request-cost",
    "x-real-ip",
    "host",
    "cookie",
];

#[derive(Arbitrary, Debug)]
struct Head<'a> {
    method: &'a [u8],
    path: &'a [u8],
    headers: Vec<(u8, &'a [u8])>,
    peer: ([u8; 16], bool, u16),
}

fuzz_target!(|head: Head<'_>| {
    let method = http::Method::from_bytes(head.method).unwrap_or(http::Method::GET);
    let uri = http::Uri::try_from(head.path).unwrap_or_else(|_| http::Uri::from_static("/"));
    let mut b = http::Request::builder().method(method).uri(uri);
    for (name, value) in &head.headers {
        let Ok(value) = http::HeaderValue::from_bytes(value) else {
            continue;
        };
        b = b.header(NAMES[*name as usize % NAMES.len()], value);
    }
    let Ok(request) = b.body(()) else {
        return;
    };
    let (parts, ()) = request.into_parts();
    let (octets, v4, port) = head.peer;
    let ip = if v4 {
        IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let peer = SocketAddr::new(ip, port);
    for identity in [&*XFF, &*FORWARDED] {
        let mut out = identity.new_output();
        identity.build(&parts, peer.ip(), &NoExtensions, &mut out);
        let client = identity.client_ip(&parts, ip);
        if !identity_trusts(ip) {
            assert_eq!(
                client.to_canonical(),
                ip.to_canonical(),
                "an untrusted peer's headers are not believed"
            );
        }
        let cost = out.hits_addend();
        assert!(cost <= 100, "the cost is capped at its max");
        let _ = identity.route(parts.uri.path());
    }
});

/// Whether the configuration's trusted proxies include `ip`.
fn identity_trusts(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 10 || v4 == Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.octets()[0] == 10 || v4 == Ipv4Addr::LOCALHOST;
            }
            let s = v6.segments();
            s[0] == 0x2001 && s[1] == 0x0db8 && s[2] == 0xffff
        }
    }
}
