//! The authority a request is for, made exactly one before anything else
//! reads the request (the limiter's identity, the forwarding fields, the
//! upstream's `Host`):
//!
//! * HTTP/1.x (RFC 9112 §3.2): at most one `Host` field line, and exactly
//!   one in HTTP/1.1; its value a valid `uri-host [":" port]` (RFC 9110
//!   §7.2). An absolute-form (or authority-form) request target names the
//!   authority itself, and the `Host` sent beside it is replaced by it
//!   (RFC 9112 §3.2.2).
//! * HTTP/2 (RFC 9113 §8.3.1): `:authority`, or else one `Host`; a `Host`
//!   beside `:authority` must name the same authority (compared as
//!   RFC 3986 §6.2 normalises them: the host without regard to case, a
//!   default port the same as none).
//!
//! Anything else is a client error (400), refused before it is limited or
//! forwarded. Pure: a request in, a verdict out.

use http::header::HOST;
use http::{HeaderValue, Request, Version};

/// Why a request's authority was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// An HTTP/1.1 request without `Host`, or an HTTP/2 one with neither
    /// `:authority` nor `Host`.
    #[error("the request has no Host")]
    Missing,
    /// More than one `Host` field line.
    #[error("the request has more than one Host")]
    Duplicate,
    /// A `Host` (or request-target authority) that is not
    /// `uri-host [":" port]`, or names a user (`userinfo@`).
    #[error("the request's Host is not a valid host[:port]")]
    Invalid,
    /// An HTTP/2 `Host` naming another authority than `:authority`.
    #[error("the request's Host differs from its :authority")]
    Conflict,
}

/// Checks `req`'s authority and leaves it in exactly one place the
/// forwarding reads: the `Host` field, or (HTTP/2 without `Host`) the
/// request target's authority.
pub fn normalize_host<B>(req: &mut Request<B>) -> Result<(), HostError> {
    let mut lines = req.headers().get_all(HOST).iter();
    let host = lines.next();
    if lines.next().is_some() {
        return Err(HostError::Duplicate);
    }
    if let Some(h) = host
        && !valid_authority(h.as_bytes())
    {
        return Err(HostError::Invalid);
    }
    let target = req.uri().authority();
    if let Some(a) = target
        && !valid_authority(a.as_str().as_bytes())
    {
        return Err(HostError::Invalid);
    }
    if req.version() == Version::HTTP_2 || req.version() == Version::HTTP_3 {
        return match (target, host) {
            (None, None) => Err(HostError::Missing),
            (Some(a), Some(h)) => {
                let default = default_port(req.uri().scheme_str());
                if same_authority(a.as_str().as_bytes(), h.as_bytes(), default) {
                    Ok(())
                } else {
                    Err(HostError::Conflict)
                }
            }
            _ => Ok(()),
        };
    }
    if host.is_none() && req.version() != Version::HTTP_10 && req.version() != Version::HTTP_09 {
        return Err(HostError::Missing);
    }
    // Absolute-form: the target's authority is the request's, whatever
    // `Host` says.
    if let Some(a) = target {
        let same = host.is_some_and(|h| h.as_bytes() == a.as_str().as_bytes());
        if !same {
            // A valid authority is a valid field value.
            let value = HeaderValue::from_str(a.as_str()).map_err(|_| HostError::Invalid)?;
            req.headers_mut().insert(HOST, value);
        }
    }
    Ok(())
}

/// The default port of a scheme (none: unknown scheme, or none given).
fn default_port(scheme: Option<&str>) -> Option<&'static [u8]> {
    match scheme {
        Some(s) if s.eq_ignore_ascii_case("http") => Some(b"80"),
        Some(s) if s.eq_ignore_ascii_case("https") => Some(b"443"),
        _ => None,
    }
}

/// Splits `host[:port]` (an IP literal keeps its brackets).
fn split_port(a: &[u8]) -> (&[u8], Option<&[u8]>) {
    let host_end = if a.first() == Some(&b'[') {
        a.iter().position(|&b| b == b']').map_or(a.len(), |i| i + 1)
    } else {
        a.iter().position(|&b| b == b':').unwrap_or(a.len())
    };
    match a.get(host_end) {
        Some(b':') => (&a[..host_end], Some(&a[host_end + 1..])),
        _ => (&a[..host_end], None),
    }
}

/// Whether two valid authorities name the same host and port.
fn same_authority(a: &[u8], b: &[u8], default: Option<&[u8]>) -> bool {
    let (ha, pa) = split_port(a);
    let (hb, pb) = split_port(b);
    // An empty port is the default one (RFC 3986 §6.2.3).
    fn port<'a>(p: Option<&'a [u8]>, default: Option<&[u8]>) -> Option<&'a [u8]> {
        p.filter(|p| !p.is_empty() && Some(*p) != default)
    }
    ha.eq_ignore_ascii_case(hb) && port(pa, default) == port(pb, default)
}

/// `uri-host [":" port]` (RFC 9110 §7.2, RFC 3986 §3.2.2): an IP literal
/// in brackets (IPv6; IPvFuture is refused), or a name of unreserved and
/// sub-delimiter characters whose labels are not empty (a final dot
/// allowed), then an optional port of at most five digits up to 65535.
/// Never `userinfo@`; no percent-encoding either (no host name needs it,
/// and the `http` crate, which reads absolute-form targets, refuses it).
///
/// Every request's `Host` goes through it: a name is checked in one pass
/// over its bytes.
pub fn valid_authority(a: &[u8]) -> bool {
    if a.first() == Some(&b'[') {
        let Some(close) = a.iter().position(|&b| b == b']') else {
            return false;
        };
        let port = match &a[close + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            // Bytes after the literal that are no port.
            _ => return false,
        };
        return valid_port(port)
            && std::str::from_utf8(&a[1..close])
                .is_ok_and(|t| t.parse::<std::net::Ipv6Addr>().is_ok());
    }
    // The name, up to the port: labels separated by single dots, none
    // empty but the one after a final dot.
    let mut label_start = true;
    let mut end = a.len();
    for (i, &b) in a.iter().enumerate() {
        if b == b':' {
            end = i;
            break;
        }
        if b == b'.' {
            if label_start {
                return false;
            }
            label_start = true;
        } else if NAME[b as usize] {
            label_start = false;
        } else {
            return false;
        }
    }
    end > 0 && valid_port(a.get(end + 1..))
}

/// A port: none, empty (`host:`, the default one, RFC 3986 §3.2.3), or at
/// most five digits up to 65535.
fn valid_port(port: Option<&[u8]>) -> bool {
    let Some(p) = port else {
        return true;
    };
    p.len() <= 5
        && p.iter().all(u8::is_ascii_digit)
        && p.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65535
}

/// The bytes of a host name besides the dot: unreserved and sub-delimiter
/// characters (RFC 3986 §3.2.2 `reg-name`, without percent-encoding).
static NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-_~!$&'()*+,;=";
    let mut i = 0;
    while i < others.len() {
        t[others[i] as usize] = true;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: Version, target: &str, hosts: &[&str]) -> Request<()> {
        let mut r = Request::builder().version(version).uri(target);
        for h in hosts {
            r = r.header(HOST, *h);
        }
        r.body(()).unwrap()
    }

    fn host_of(r: &Request<()>) -> Option<&str> {
        r.headers().get(HOST).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn http11_needs_exactly_one_valid_host() {
        let v = Version::HTTP_11;
        let mut r = req(v, "/", &["a.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), Some("a.example"));
        assert_eq!(
            normalize_host(&mut req(v, "/", &[])),
            Err(HostError::Missing)
        );
        assert_eq!(
            normalize_host(&mut req(v, "/", &["a.example", "a.example"])),
            Err(HostError::Duplicate)
        );
        assert_eq!(
            normalize_host(&mut req(v, "http://a.example/", &[])),
            Err(HostError::Missing),
            "RFC 9112 §3.2: whatever the target's form"
        );
        for bad in [
            "", "a b", "a/b", "a\\b", "u@a", "a..b", ".a", ".", "a:x", "a:65536", "a:123456",
            "[::1", "[zz]", "[v1.x]", "a%2", "a%zz", "a%41", "a:1:2", "a\"b", "[::1]x", "[::1]:x",
            "[::1]80", "[]",
        ] {
            let Ok(value) = HeaderValue::from_str(bad) else {
                continue;
            };
            let mut r = Request::builder().uri("/").body(()).unwrap();
            r.headers_mut().insert(HOST, value);
            assert_eq!(normalize_host(&mut r), Err(HostError::Invalid), "{bad:?}");
        }
        for good in [
            "a.example",
            "A.Example.",
            "a.example:8080",
            "a.example:",
            "127.0.0.1:1",
            "[::1]:80",
            "[2001:db8::1]",
            "xn--bcher-kva.example",
            "a_b~c!$&'()*+,;=",
            "localhost:65535",
        ] {
            let mut r = req(v, "/", &[good]);
            assert_eq!(normalize_host(&mut r), Ok(()), "{good:?}");
            assert_eq!(host_of(&r), Some(good), "kept as sent");
        }
    }

    #[test]
    fn http10_may_omit_host() {
        let v = Version::HTTP_10;
        let mut r = req(v, "/", &[]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), None);
        assert_eq!(
            normalize_host(&mut req(v, "/", &["a", "b"])),
            Err(HostError::Duplicate)
        );
        let mut r = req(v, "http://a.example:81/x", &[]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), Some("a.example:81"));
    }

    #[test]
    fn the_absolute_form_authority_wins() {
        let v = Version::HTTP_11;
        let mut r = req(v, "http://a.example/x?y", &["b.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), Some("a.example"));
        let mut r = req(v, "https://a.example:8443/", &["a.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), Some("a.example:8443"));
        // CONNECT's authority-form too.
        let mut r = req(v, "a.example:443", &["b.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), Some("a.example:443"));
        // The Host beside it is still a field line to check.
        assert_eq!(
            normalize_host(&mut req(v, "http://a.example/", &["b", "c"])),
            Err(HostError::Duplicate)
        );
        assert_eq!(
            normalize_host(&mut req(v, "http://a.example/", &["b c"])),
            Err(HostError::Invalid)
        );
        // A user in the target is refused (RFC 9110 §4.2.4).
        assert_eq!(
            normalize_host(&mut req(v, "http://u:p@a.example/", &["a.example"])),
            Err(HostError::Invalid)
        );
    }

    #[test]
    fn http2_authority_and_host_agree() {
        let v = Version::HTTP_2;
        let mut r = req(v, "http://a.example/", &[]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(host_of(&r), None, ":authority stays where it is");
        for same in ["a.example", "A.EXAMPLE", "a.example:80", "a.example:"] {
            let mut r = req(v, "http://a.example/", &[same]);
            assert_eq!(normalize_host(&mut r), Ok(()), "{same}");
        }
        let mut r = req(v, "https://a.example:443/", &["a.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        for other in ["b.example", "a.example:81", "a.example.org"] {
            assert_eq!(
                normalize_host(&mut req(v, "http://a.example/", &[other])),
                Err(HostError::Conflict),
                "{other}"
            );
        }
        assert_eq!(
            normalize_host(&mut req(v, "https://a.example/", &["a.example:80"])),
            Err(HostError::Conflict)
        );
        // No :authority: one Host.
        let mut r = req(v, "/", &["a.example"]);
        assert_eq!(normalize_host(&mut r), Ok(()));
        assert_eq!(
            normalize_host(&mut req(v, "/", &[])),
            Err(HostError::Missing)
        );
        assert_eq!(
            normalize_host(&mut req(
                v,
                "http://a.example/",
                &["a.example", "a.example"]
            )),
            Err(HostError::Duplicate)
        );
    }

    /// The grammar written as the RFCs state it, piece by piece: the
    /// one-pass reading must agree with it on every input.
    fn authority_as_specified(a: &[u8]) -> bool {
        let (host, port) = if a.first() == Some(&b'[') {
            let Some(close) = a.iter().position(|&b| b == b']') else {
                return false;
            };
            match &a[close + 1..] {
                [] => (&a[..=close], None),
                [b':', port @ ..] => (&a[..=close], Some(port)),
                _ => return false,
            }
        } else {
            match a.iter().position(|&b| b == b':') {
                Some(i) => (&a[..i], Some(&a[i + 1..])),
                None => (a, None),
            }
        };
        let port_ok = match port {
            None | Some([]) => true,
            Some(p) => {
                p.len() <= 5
                    && p.iter().all(u8::is_ascii_digit)
                    && std::str::from_utf8(p)
                        .ok()
                        .and_then(|t| t.parse::<u32>().ok())
                        .is_some_and(|n| n <= 65535)
            }
        };
        let host_ok = if let Some(inner) = host.strip_prefix(b"[") {
            inner
                .strip_suffix(b"]")
                .and_then(|t| std::str::from_utf8(t).ok())
                .is_some_and(|t| t.parse::<std::net::Ipv6Addr>().is_ok())
        } else {
            let name = host.strip_suffix(b".").unwrap_or(host);
            !name.is_empty()
                && !name.split(|&b| b == b'.').any(<[u8]>::is_empty)
                && name
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b))
        };
        port_ok && host_ok
    }

    proptest::proptest! {
        #[test]
        fn the_one_pass_reading_agrees_with_the_grammar(
            a in proptest::collection::vec(
                proptest::sample::select(b"aZ09.-_~!$&'()*+,;=:[]@%/ \x7f\xc3".to_vec()),
                0..24,
            ),
            n in 0u32..100_000,
        ) {
            proptest::prop_assert_eq!(valid_authority(&a), authority_as_specified(&a), "{:?}", String::from_utf8_lossy(&a));
            for candidate in [
                format!("a.b:{n}"),
                format!("[::1]:{n}"),
                format!("{}:{n}", String::from_utf8_lossy(&a)),
                format!("[::{n}]"),
            ] {
                let c = candidate.as_bytes();
                proptest::prop_assert_eq!(valid_authority(c), authority_as_specified(c), "{}", candidate);
            }
        }
    }
}
