//! The authority a request is for (`Host`, `:authority`, an absolute-form
//! target's), read one way wherever it matters: the gateway's check of a
//! request's `Host`, the identity's `header: host` entries, the admin
//! listener's check that a request names it.
//!
//! [`valid_authority`] is the grammar (RFC 9110 §7.2, RFC 3986 §3.2.2);
//! [`Authority`] splits a valid one into its host and port, compared and
//! written normalised (RFC 3986 §6.2.2, §6.2.3): the host without regard
//! to case and without a name's final dot, a port that is empty or the
//! scheme's default the same as none.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The default port of a scheme, `http` (80) or `https` (443), in any
/// case; none for another scheme or none given.
pub fn default_port(scheme: Option<&str>) -> Option<&'static [u8]> {
    match scheme {
        Some(s) if s.eq_ignore_ascii_case("http") => Some(b"80"),
        Some(s) if s.eq_ignore_ascii_case("https") => Some(b"443"),
        _ => None,
    }
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
///
/// ```
/// use floodgate_http::authority::valid_authority;
/// assert!(valid_authority(b"App.Example.:8080"));
/// assert!(valid_authority(b"[::1]:80"));
/// assert!(!valid_authority(b"user@app.example"));
/// assert!(!valid_authority(b"app..example"));
/// ```
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
            && std::str::from_utf8(&a[1..close]).is_ok_and(|t| t.parse::<Ipv6Addr>().is_ok());
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

/// An authority split into its host and port, normalised as RFC 3986
/// §6.2 compares them: read with [`Authority::new`] from bytes that
/// [`valid_authority`] accepts (others are split all the same, without
/// meaning).
///
/// ```
/// use floodgate_http::authority::Authority;
/// let a = Authority::new(b"App.Example.:80", Some(b"80"));
/// let mut key = String::new();
/// a.write_host(&mut key);
/// assert_eq!(key, "app.example");
/// assert!(a.same(&Authority::new(b"app.example", Some(b"80"))));
/// assert!(!a.same(&Authority::new(b"app.example:81", Some(b"80"))));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Authority<'a> {
    /// The host as sent, without a name's final dot; an IP literal keeps
    /// its brackets.
    host: &'a [u8],
    /// The port, none when absent, empty or the default one.
    port: Option<&'a [u8]>,
}

impl<'a> Authority<'a> {
    /// Splits `a` (`host[:port]`), dropping a name's final dot, a port's
    /// leading zeros, and a port that is empty or `default_port`.
    pub fn new(a: &'a [u8], default_port: Option<&[u8]>) -> Self {
        let host_end = if a.first() == Some(&b'[') {
            a.iter().position(|&b| b == b']').map_or(a.len(), |i| i + 1)
        } else {
            a.iter().position(|&b| b == b':').unwrap_or(a.len())
        };
        let port = match a.get(host_end) {
            // Without leading zeros (`080` is port 80), but one digit.
            Some(b':') => {
                let p = &a[host_end + 1..];
                let zeros = p.iter().take_while(|&&b| b == b'0').count();
                Some(&p[zeros.min(p.len().saturating_sub(1))..])
            }
            _ => None,
        };
        let mut host = &a[..host_end];
        if let [name @ .., b'.'] = host
            && !name.is_empty()
        {
            host = name;
        }
        Authority {
            host,
            port: port.filter(|p| !p.is_empty() && Some(*p) != default_port),
        }
    }

    /// The host as sent (any case), without a name's final dot.
    pub fn host(&self) -> &'a [u8] {
        self.host
    }

    /// The port, none when absent, empty or the default one.
    pub fn port(&self) -> Option<&'a [u8]> {
        self.port
    }

    /// Whether both name the same host (without regard to case) and port.
    pub fn same(&self, other: &Authority<'_>) -> bool {
        self.host.eq_ignore_ascii_case(other.host) && self.port == other.port
    }

    /// The host as an IP address: a bracketed IPv6 literal or a dotted
    /// IPv4 address.
    pub fn ip(&self) -> Option<IpAddr> {
        let text = std::str::from_utf8(self.host).ok()?;
        match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
            None => text.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        }
    }

    /// Appends the host lowercase: the key of `header: host` entries, as
    /// nginx's `$host` (for bytes [`valid_authority`] accepts: ASCII; any
    /// other byte is written as U+FFFD).
    pub fn write_host(&self, out: &mut String) {
        out.extend(self.host.iter().map(|&b| match b.is_ascii() {
            true => b.to_ascii_lowercase() as char,
            false => char::REPLACEMENT_CHARACTER,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(a: &str) -> String {
        let mut s = String::new();
        Authority::new(a.as_bytes(), None).write_host(&mut s);
        s
    }

    #[test]
    fn normalised_spellings() {
        let http = Some(&b"80"[..]);
        let app = Authority::new(b"app.example", http);
        for same in [
            "app.example",
            "APP.example",
            "app.example.",
            "App.Example.:80",
            "app.example:",
            "app.example:080",
            "app.example:00080",
        ] {
            assert_eq!(host(same), "app.example", "{same}");
            assert!(Authority::new(same.as_bytes(), http).same(&app), "{same}");
        }
        for other in [
            "app.example:443",
            "app.example:8080",
            "b.example",
            "app.example.org",
        ] {
            assert!(
                !Authority::new(other.as_bytes(), http).same(&app),
                "{other}"
            );
        }
        let tls = Authority::new(b"app.example", Some(b"443"));
        assert!(Authority::new(b"app.example:443", Some(b"443")).same(&tls));
        assert_eq!(Authority::new(b"a:08080", http).port(), Some(&b"8080"[..]));
        assert_eq!(Authority::new(b"a:000", http).port(), Some(&b"0"[..]));
        assert_eq!(host("[2001:DB8::1]:8080"), "[2001:db8::1]");
        assert_eq!(host("127.0.0.1.:81"), "127.0.0.1");
        // A lone dot is not a name's final dot.
        assert_eq!(host("."), ".");
    }

    #[test]
    fn ip_literals() {
        let ip = |a: &str| Authority::new(a.as_bytes(), None).ip();
        assert_eq!(ip("127.0.0.1:6070"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(ip("[::1]:6070"), Some("::1".parse().unwrap()));
        assert_eq!(
            ip("[::ffff:10.0.0.1]"),
            Some("::ffff:10.0.0.1".parse().unwrap())
        );
        for name in [
            "localhost",
            "1.2.3",
            "0x7f.1",
            "::1",
            "[v1.x]",
            "1.2.3.4.example",
        ] {
            assert_eq!(ip(name), None, "{name}");
        }
    }

    #[test]
    fn the_grammar() {
        for bad in [
            "", "a b", "a/b", "a\\b", "u@a", "a..b", ".a", ".", "a:x", "a:65536", "a:123456",
            "[::1", "[zz]", "[v1.x]", "a%2", "a%zz", "a%41", "a:1:2", "a\"b", "[::1]x", "[::1]:x",
            "[::1]80", "[]",
        ] {
            assert!(!valid_authority(bad.as_bytes()), "{bad:?}");
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
            assert!(valid_authority(good.as_bytes()), "{good:?}");
        }
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
                .is_some_and(|t| t.parse::<Ipv6Addr>().is_ok())
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

        #[test]
        fn a_normalised_host_is_valid_and_normalises_to_itself(
            a in "(\\[[0-9a-fA-F:]{2,9}\\]|[a-zA-Z0-9-]{1,4}(\\.[a-zA-Z0-9-]{1,4}){0,3}\\.?)(:[0-9]{0,5})?",
            tls in proptest::bool::ANY,
        ) {
            let a = a.as_bytes();
            proptest::prop_assume!(valid_authority(a));
            let default = Some(if tls { &b"443"[..] } else { b"80" });
            let first = Authority::new(a, default);
            let mut once = String::new();
            first.write_host(&mut once);
            proptest::prop_assert!(valid_authority(once.as_bytes()));
            let again = Authority::new(once.as_bytes(), default);
            proptest::prop_assert!(again.host().eq_ignore_ascii_case(first.host()));
            let mut twice = String::new();
            again.write_host(&mut twice);
            proptest::prop_assert_eq!(&once, &twice);
        }
    }
}
