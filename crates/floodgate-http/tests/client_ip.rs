//! The client address: trusted hops and networks, header syntaxes,
//! malformed input, IPv4-mapped peers and prefix grouping.

use crate::common;

use common::{client, identity};
use floodgate_http::HttpIdentity;

fn with_client_ip(settings: &str) -> HttpIdentity {
    identity(&format!(
        "domain: api\nclient_ip: {settings}\ndescriptors: [[client_ip]]"
    ))
}

const XFF: &str = "x-forwarded-for";

#[test]
fn without_trusted_proxies_the_peer_is_the_client() {
    let id = identity("domain: api\ndescriptors: [[client_ip]]");
    assert_eq!(client(&id, "192.0.2.1", &[]), "192.0.2.1");
    for spoof in ["198.51.100.1", "10.0.0.1, 198.51.100.1", "garbage", "::1"] {
        assert_eq!(client(&id, "192.0.2.1", &[(XFF, spoof)]), "192.0.2.1");
        assert_eq!(
            client(&id, "192.0.2.1", &[("forwarded", spoof)]),
            "192.0.2.1"
        );
        assert_eq!(
            client(&id, "192.0.2.1", &[("x-real-ip", spoof)]),
            "192.0.2.1"
        );
    }
    // trusted_hops: 0 reads nothing either.
    let id = with_client_ip("{trusted_hops: 0}");
    assert_eq!(
        client(&id, "192.0.2.1", &[(XFF, "198.51.100.1")]),
        "192.0.2.1"
    );
}

#[test]
fn one_trusted_hop_takes_the_rightmost_entry() {
    let id = with_client_ip("{trusted_hops: 1}");
    let lb = "10.0.0.2";
    assert_eq!(client(&id, lb, &[(XFF, "203.0.113.9")]), "203.0.113.9");
    // Whatever the client prepends, the entry our proxy appended wins.
    let spoofed = "1.1.1.1, 8.8.8.8, 203.0.113.9";
    assert_eq!(client(&id, lb, &[(XFF, spoofed)]), "203.0.113.9");
    // No header: the peer.
    assert_eq!(client(&id, lb, &[]), lb);
    assert_eq!(client(&id, lb, &[(XFF, "")]), lb);
    assert_eq!(client(&id, lb, &[(XFF, " , ")]), lb);
}

#[test]
fn several_trusted_hops() {
    let id = with_client_ip("{trusted_hops: 2}");
    let chain = "6.6.6.6, 203.0.113.9, 10.1.0.1";
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, chain)]), "203.0.113.9");
    // Fewer entries than hops: the leftmost (written by a trusted proxy).
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, "10.1.0.1")]), "10.1.0.1");
}

#[test]
fn trusted_networks() {
    let id = with_client_ip(r#"{trusted_proxies: [10.0.0.0/8, "::1"]}"#);
    // The peer is a trusted proxy: trusted entries are skipped.
    let chain = "6.6.6.6, 203.0.113.9, 10.7.0.1, 10.0.0.9";
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, chain)]), "203.0.113.9");
    assert_eq!(client(&id, "::1", &[(XFF, chain)]), "203.0.113.9");
    // The peer is not: the header is not read.
    assert_eq!(client(&id, "192.0.2.7", &[(XFF, chain)]), "192.0.2.7");
    // Only trusted addresses: the leftmost.
    assert_eq!(
        client(&id, "10.0.0.2", &[(XFF, "10.3.3.3, 10.4.4.4")]),
        "10.3.3.3"
    );
}

#[test]
fn hops_and_networks_together() {
    let id = with_client_ip("{trusted_hops: 1, trusted_proxies: [10.0.0.0/8]}");
    // The peer must be in the networks.
    assert_eq!(
        client(&id, "192.0.2.7", &[(XFF, "203.0.113.9")]),
        "192.0.2.7"
    );
    assert_eq!(
        client(&id, "10.0.0.2", &[(XFF, "203.0.113.9")]),
        "203.0.113.9"
    );
    // Past the hops, entries in the networks are skipped as well.
    let chain = "6.6.6.6, 203.0.113.9, 10.9.9.9";
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, chain)]), "203.0.113.9");
}

#[test]
fn several_header_lines_are_one_list_in_order() {
    let id = with_client_ip("{trusted_hops: 1}");
    let lines = [(XFF, "6.6.6.6"), (XFF, "203.0.113.9")];
    assert_eq!(client(&id, "10.0.0.2", &lines), "203.0.113.9");
    let id = with_client_ip("{trusted_hops: 2}");
    let lines = [(XFF, "6.6.6.6, 203.0.113.9"), (XFF, "10.1.1.1")];
    assert_eq!(client(&id, "10.0.0.2", &lines), "203.0.113.9");
}

#[test]
fn forwarded_syntax() {
    let id = with_client_ip("{trusted_hops: 1, header: forwarded}");
    let lb = "10.0.0.2";
    let cases = [
        ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
        ("For=192.0.2.60", "192.0.2.60"),
        (r#"for="[2001:db8:cafe::17]:4711""#, "2001:db8:cafe::17"),
        (r#"for="[2001:db8:cafe::17]""#, "2001:db8:cafe::17"),
        (r#"for="192.0.2.60:8080""#, "192.0.2.60"),
        (r#"for="192.0.2.60:_port""#, "192.0.2.60"),
        ("proto=https;for=192.0.2.60", "192.0.2.60"),
        (r#"for=6.6.6.6, for="198.51.100.4""#, "198.51.100.4"),
        (r#"for="6.6.6.6,7.7.7.7", for=198.51.100.4"#, "198.51.100.4"),
        (r#"for="\"quoted\"", for=198.51.100.4"#, "198.51.100.4"),
        (r#"for="[::ffff:192.0.2.5]""#, "192.0.2.5"),
    ];
    for (header, want) in cases {
        assert_eq!(client(&id, lb, &[("forwarded", header)]), want, "{header}");
    }
    let lines = [
        ("forwarded", "for=6.6.6.6"),
        ("forwarded", "for=198.51.100.4"),
    ];
    assert_eq!(client(&id, lb, &lines), "198.51.100.4");
    // Unusable nodes in the trusted position: the peer.
    for bad in [
        "for=unknown",
        r#"for="_hidden""#,
        "for=_hidden",
        "proto=https",
        "for=1.1.1.1;for=2.2.2.2",
        r#"for="[2001:db8::1"#,
        r#"for="[2001:db8::1]:99999""#,
        "for 192.0.2.60",
        "for=192.0.2.60 junk",
        r#"for=198.51.100.4, for="unterminated"#,
    ] {
        assert_eq!(client(&id, lb, &[("forwarded", bad)]), lb, "{bad}");
    }
    // X-Forwarded-For is not read when Forwarded is configured.
    assert_eq!(client(&id, lb, &[(XFF, "198.51.100.4")]), lb);
}

#[test]
fn x_real_ip() {
    let id = with_client_ip("{trusted_hops: 1, header: x-real-ip}");
    // The header's name in any case means the same syntax.
    assert_eq!(id, with_client_ip("{trusted_hops: 1, header: X-Real-IP}"));
    let lb = "10.0.0.2";
    assert_eq!(
        client(&id, lb, &[("x-real-ip", "198.51.100.4")]),
        "198.51.100.4"
    );
    let lines = [("x-real-ip", "6.6.6.6"), ("x-real-ip", "198.51.100.4")];
    assert_eq!(client(&id, lb, &lines), "198.51.100.4");
    assert_eq!(
        client(&id, lb, &[("x-real-ip", "6.6.6.6, 198.51.100.4")]),
        "198.51.100.4"
    );
    assert_eq!(client(&id, lb, &[("x-real-ip", "nope")]), lb);
    assert_eq!(client(&id, lb, &[(XFF, "198.51.100.4")]), lb);
}

#[test]
fn another_header_is_read_like_x_forwarded_for() {
    let id = with_client_ip("{trusted_hops: 1, header: X-Envoy-External-Address}");
    let h = [("x-envoy-external-address", "198.51.100.4")];
    assert_eq!(client(&id, "10.0.0.2", &h), "198.51.100.4");
}

#[test]
fn malformed_entries_fall_back_to_the_peer() {
    let id = with_client_ip("{trusted_hops: 1}");
    let lb = "10.0.0.2";
    for bad in [
        "garbage",
        "unknown",
        "_obfuscated",
        "1.2.3",
        "1.2.3.256",
        "01.2.3.4",
        "1.2.3.4:99999",
        "1.2.3.4:port",
        "1.2.3.4:",
        "[1.2.3.4]",
        "[2001:db8::1",
        "fe80::1%eth0",
        "6.6.6.6, garbage",
        "6.6.6.6 203.0.113.9",
        "\"203.0.113.9\"",
        &"1".repeat(1000),
    ] {
        assert_eq!(client(&id, lb, &[(XFF, bad)]), lb, "{bad}");
    }
    // Garbage the client wrote to the left of the trusted entry is never read.
    assert_eq!(
        client(&id, lb, &[(XFF, "garbage, 203.0.113.9")]),
        "203.0.113.9"
    );
    // Ports and brackets that proxies add are accepted.
    for (h, want) in [
        ("203.0.113.9:4711", "203.0.113.9"),
        ("[2001:db8::9]:443", "2001:db8::9"),
        ("[2001:db8::9]", "2001:db8::9"),
        ("  2001:db8::9  ", "2001:db8::9"),
    ] {
        assert_eq!(client(&id, lb, &[(XFF, h)]), want);
    }
}

#[test]
fn long_trusted_walks_fall_back_to_the_peer() {
    let id = with_client_ip("{trusted_proxies: [10.0.0.0/8]}");
    let trusted: Vec<String> = (0..40).map(|i| format!("10.0.1.{i}")).collect();
    let chain = format!("203.0.113.9, {}", trusted.join(", "));
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, &chain)]), "10.0.0.2");
    // A long list of client-written entries costs nothing: only the
    // rightmost matter.
    let spoof: Vec<String> = (0..5000)
        .map(|i| format!("6.6.{}.{}", i / 256, i % 256))
        .collect();
    let chain = format!("{}, 203.0.113.9, 10.0.0.7", spoof.join(","));
    assert_eq!(client(&id, "10.0.0.2", &[(XFF, &chain)]), "203.0.113.9");
}

#[test]
fn ipv4_mapped_addresses_are_ipv4() {
    let id = identity("domain: api\ndescriptors: [[client_ip]]");
    assert_eq!(client(&id, "[::ffff:192.0.2.1]:80", &[]), "192.0.2.1");
    let id = with_client_ip("{trusted_proxies: [10.0.0.0/8]}");
    let h = [(XFF, "::ffff:203.0.113.9")];
    assert_eq!(client(&id, "[::ffff:10.0.0.2]:80", &h), "203.0.113.9");
    // Not IPv4-compatible (deprecated) or loopback addresses.
    let id = identity("domain: api\ndescriptors: [[client_ip]]");
    assert_eq!(client(&id, "[::1]:80", &[]), "::1");
    assert_eq!(client(&id, "[::192.0.2.1]:80", &[]), "::c000:201");
}

#[test]
fn ipv6_prefix_grouping() {
    let id = with_client_ip("{ipv6_prefix: 64}");
    let a = client(&id, "2001:db8:1:2::1", &[]);
    let b = client(&id, "2001:db8:1:2:ffff:ffff:ffff:ffff", &[]);
    let c = client(&id, "2001:db8:1:3::1", &[]);
    assert_eq!(a, "2001:db8:1:2::/64");
    assert_eq!(a, b);
    assert_ne!(a, c);
    // IPv4 is not grouped unless asked.
    assert_eq!(client(&id, "192.0.2.77", &[]), "192.0.2.77");
    // `true` means /64.
    let id = with_client_ip("{ipv6_prefix: true, ipv4_prefix: 24}");
    assert_eq!(client(&id, "2001:db8:1:2:3::4", &[]), "2001:db8:1:2::/64");
    assert_eq!(client(&id, "192.0.2.77", &[]), "192.0.2.0/24");
    assert_eq!(client(&id, "192.0.3.77", &[]), "192.0.3.0/24");
    // Grouping applies to addresses from headers too.
    let id = with_client_ip("{trusted_hops: 1, ipv6_prefix: 48}");
    let h = [(XFF, "2001:db8:aa:bb::1")];
    assert_eq!(client(&id, "10.0.0.2", &h), "2001:db8:aa::/48");
    // /128 and /32 are the plain address.
    let id = with_client_ip("{ipv6_prefix: 128, ipv4_prefix: 32}");
    assert_eq!(client(&id, "2001:db8::1", &[]), "2001:db8::1");
}

#[test]
fn the_resolved_address_is_reported() {
    use floodgate_http::identity::{NoExtensions, RequestDescriptors};
    let id = with_client_ip("{trusted_hops: 1, ipv6_prefix: 64}");
    let parts = common::request("GET", "/", &[(XFF, "2001:db8::5")]);
    let mut out = RequestDescriptors::new();
    id.build(
        &parts,
        common::peer("10.0.0.2").ip(),
        &NoExtensions,
        &mut out,
    );
    assert_eq!(out.client_ip(), Some("2001:db8::5".parse().unwrap()));
    let ip = id.client_ip(&parts, "10.0.0.2".parse().unwrap());
    assert_eq!(ip.to_string(), "2001:db8::5");
}
