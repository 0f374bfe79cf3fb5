//! An `http:` section, any bytes: reading it never panics; one that reads
//! builds the descriptors of a few requests, hostile headers included.
#![no_main]

use std::net::SocketAddr;

use floodgate_http::identity::{HttpIdentity, NoExtensions};
use libfuzzer_sys::fuzz_target;

/// A request: method, path and headers.
type Head<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(identity) = HttpIdentity::from_yaml_str("fuzz.yaml", text) else {
        return;
    };
    let mut out = identity.new_output();
    let long = "v".repeat(4096);
    let heads: [Head<'_>; 4] = [
        ("GET", "/", &[]),
        (
            "POST",
            "/users/42/items/7?x=1",
            &[
                ("x-forwarded-for", "203.0.113.9, 10.0.0.1"),
                (
                    "forwarded",
                    "for=\"[2001:db8::1]:80\";proto=https, for=10.1.1.1",
                ),
                ("x-api-key", "k-123"),
                ("authorization", "Bearer abc.def"),
                ("x-request-cost", "7"),
            ],
        ),
        (
            "DELETE",
            "/%ff/../a//b",
            &[
                ("x-forwarded-for", "unknown, , ::ffff:1.2.3.4"),
                ("forwarded", "for=;;,,for=\"\""),
                ("x-request-cost", "99999999999999999999"),
                ("authorization", "Basic"),
            ],
        ),
        (
            "GET",
            "/static/a/b/c",
            &[("x-api-key", &long), ("x-user-id", &long)],
        ),
    ];
    let peers: [SocketAddr; 2] = [
        "10.0.0.2:4000".parse().unwrap(),
        "[2001:db8::2]:4000".parse().unwrap(),
    ];
    for (method, path, headers) in heads {
        let mut b = http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (parts, ()) = b.body(()).expect("a valid request").into_parts();
        for peer in peers {
            identity.build(&parts, peer.ip(), &NoExtensions, &mut out);
            let _ = identity.client_ip(&parts, peer.ip());
            assert!(out.hits_addend() >= 1, "every request costs at least 1");
            let _ = identity.route(parts.uri.path());
        }
    }
});
