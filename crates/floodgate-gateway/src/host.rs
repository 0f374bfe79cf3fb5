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
//!   RFC 3986 §6.2 normalises them: the host without regard to case or a
//!   name's final dot, a default port the same as none).
//!
//! Anything else is a client error (400), refused before it is limited or
//! forwarded. The authority is forwarded as sent; the identity keys on its
//! normalised form (see [`floodgate_http::authority`], the one grammar of
//! both). Pure: a request in, a verdict out.

pub use floodgate_http::authority::valid_authority;
use floodgate_http::authority::{Authority, default_port};
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

/// Whether two valid authorities name the same host and port.
fn same_authority(a: &[u8], b: &[u8], default: Option<&[u8]>) -> bool {
    Authority::new(a, default).same(&Authority::new(b, default))
}

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
        for same in [
            "a.example",
            "A.EXAMPLE",
            "a.example.",
            "a.example:80",
            "a.example:",
        ] {
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
}
