//! Any request target, version and `Host` lines, as the gateway checks a
//! request's authority before limiting it. No panic; whatever is accepted
//! is one `Host` that the `http` crate reads as an authority (the
//! forwarding fields and the upstream request are built from it), equal to
//! the absolute-form target's authority when there is one; and a request
//! once accepted is accepted again unchanged. The host the identity keys
//! on (`floodgate_http::authority`) is a valid authority naming the same
//! host, and normalises to itself.
#![no_main]

use floodgate_gateway::host::{normalize_host, valid_authority};
use floodgate_http::authority::Authority;
use http::header::HOST;
use http::{HeaderValue, Request, Uri, Version};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    version: u8,
    target: &'a [u8],
    hosts: Vec<&'a [u8]>,
}

fuzz_target!(|input: Input<'_>| {
    // What hyper would hand over: a target it parsed, values it accepted.
    let Ok(uri) = Uri::try_from(input.target) else {
        return;
    };
    let version = match input.version % 4 {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        2 => Version::HTTP_2,
        _ => Version::HTTP_09,
    };
    let mut req = Request::builder()
        .version(version)
        .uri(uri)
        .body(())
        .unwrap();
    for h in input.hosts.iter().take(3) {
        let Ok(v) = HeaderValue::from_bytes(h) else {
            return;
        };
        req.headers_mut().append(HOST, v);
    }
    for h in &input.hosts {
        if valid_authority(h) {
            http::uri::Authority::try_from(*h).expect("a valid Host is an authority");
            normalizes_to_itself(h, input.version & 4 != 0);
        }
    }
    if normalize_host(&mut req).is_err() {
        return;
    }
    let hosts: Vec<HeaderValue> = req.headers().get_all(HOST).iter().cloned().collect();
    assert!(hosts.len() <= 1, "{hosts:?}");
    for h in &hosts {
        assert!(valid_authority(h.as_bytes()), "{h:?}");
    }
    if let Some(a) = req.uri().authority()
        && version < Version::HTTP_2
    {
        assert_eq!(hosts[0].as_bytes(), a.as_str().as_bytes());
    }
    if version < Version::HTTP_2 && version > Version::HTTP_10 {
        assert_eq!(hosts.len(), 1);
    }
    let before = req.headers().clone();
    assert!(
        normalize_host(&mut req).is_ok(),
        "accepted once, accepted again"
    );
    assert_eq!(req.headers(), &before);
});

/// The host the identity keys a valid authority on: valid, the same host,
/// lowercase, written once whatever the spelling.
fn normalizes_to_itself(h: &[u8], tls: bool) {
    let default = Some(if tls { &b"443"[..] } else { b"80" });
    let a = Authority::new(h, default);
    let mut once = String::new();
    a.write_host(&mut once);
    assert!(valid_authority(once.as_bytes()), "{once:?}");
    assert_eq!(once, once.to_ascii_lowercase());
    let again = Authority::new(once.as_bytes(), default);
    assert!(again.host().eq_ignore_ascii_case(a.host()), "{once:?}");
    assert!(again.port().is_none());
    let mut twice = String::new();
    again.write_host(&mut twice);
    assert_eq!(once, twice);
}
