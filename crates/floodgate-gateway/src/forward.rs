//! Header rewriting between the client and the upstream: hop-by-hop
//! fields removed (RFC 9110 §7.6.1) in both directions, and the
//! forwarding fields (`X-Forwarded-For`, `X-Forwarded-Proto`,
//! `Forwarded`) appended on the way up.

use std::net::IpAddr;

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{
    CONNECTION, CONTENT_LENGTH, Entry, FORWARDED, HOST, HeaderName, HeaderValue, TE,
    TRANSFER_ENCODING, UPGRADE,
};

/// `X-Forwarded-For`.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
/// The settings of an HTTP/2 upgrade (`h2c`), hop-by-hop (RFC 7540 §3.2.1).
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// End-to-end fields `Connection` cannot remove: the authority, the body's
/// framing and the forwarding fields the gateway extends. A client naming
/// them would have the limiter read one request and the upstream receive
/// another (`Connection: host` would replace the client's `Host` with the
/// upstream's).
const KEPT: [HeaderName; 6] = [
    HOST,
    CONTENT_LENGTH,
    TRANSFER_ENCODING,
    FORWARDED,
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
];

/// What [`strip_hop_by_hop`] took out that the message still needs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Stripped {
    /// The `Upgrade` removed when `Connection` names it (an upgrade asked
    /// for).
    pub upgrade: Option<HeaderValue>,
    /// The transfer codings when they are more than `chunked` (`gzip,
    /// chunked`; its lines joined): the body's bytes are still in the
    /// others, so they are forwarded as sent.
    pub codings: Option<HeaderValue>,
}

/// Removes the hop-by-hop fields: `Connection` and every field it names
/// (but those of [`KEPT`]), `Keep-Alive`, `Proxy-Connection`,
/// `Transfer-Encoding`, `Upgrade`, `HTTP2-Settings`, and `TE` unless it is
/// exactly `trailers` (which gRPC needs end to end and HTTP/2 allows); and
/// `also`, a field of the message's own to drop.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, also: Option<HeaderName>) -> Stripped {
    // One pass over the names first (most messages carry none of them)
    // rather than a lookup per field.
    let mut connection = false;
    let mut others = false;
    let mut coded = false;
    for name in headers.keys() {
        if name == CONNECTION {
            connection = true;
        } else if name == TRANSFER_ENCODING {
            coded = true;
        } else if name == TE
            || name == UPGRADE
            || name == KEEP_ALIVE
            || name == PROXY_CONNECTION
            || name == HTTP2_SETTINGS
            || also.as_ref() == Some(name)
        {
            others = true;
        }
    }
    if !connection && !others && !coded {
        return Stripped::default();
    }
    let codings = if coded { codings(headers) } else { None };
    let mut upgrade = None;
    if connection {
        let named: Vec<HeaderName> = named_fields(headers, &CONNECTION).collect();
        for name in named.into_iter().filter(|n| !KEPT.contains(n)) {
            let removed = headers.remove(&name);
            if name == UPGRADE {
                upgrade = upgrade.or(removed);
            }
        }
        headers.remove(CONNECTION);
    }
    let named = [
        KEEP_ALIVE,
        PROXY_CONNECTION,
        TRANSFER_ENCODING,
        UPGRADE,
        HTTP2_SETTINGS,
    ];
    for name in named.into_iter().chain(also) {
        if headers.contains_key(&name) {
            headers.remove(name);
        }
    }
    if let Some(te) = headers.get(TE)
        && !te.as_bytes().eq_ignore_ascii_case(b"trailers")
    {
        headers.remove(TE);
    }
    Stripped { upgrade, codings }
}

/// The transfer codings of `headers` when they are more than `chunked`
/// (see [`Stripped::codings`]).
fn codings(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut lines = headers.get_all(TRANSFER_ENCODING).iter();
    let first = lines.next()?;
    let mut rest = lines.peekable();
    if rest.peek().is_none() {
        return (!first.as_bytes().eq_ignore_ascii_case(b"chunked")).then(|| first.clone());
    }
    // Rare: several lines, joined.
    let mut all = first.as_bytes().to_vec();
    for line in rest {
        all.extend_from_slice(b", ");
        all.extend_from_slice(line.as_bytes());
    }
    HeaderValue::from_bytes(&all).ok()
}

/// The field names a list field (`Connection`, `Trailer`) names:
/// comma-separated tokens, over all its lines.
pub(crate) fn named_fields<'a>(
    headers: &'a HeaderMap,
    list: &HeaderName,
) -> impl Iterator<Item = HeaderName> + 'a {
    (headers.get_all(list).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
}

/// This hop's forwarding values for the requests of one client
/// connection, rendered once: the peer's address (`X-Forwarded-For`), and
/// the RFC 7239 element up to its host, `for=<peer>;proto=http[s]` (IPv6
/// addresses quoted and bracketed; `https` when the connection is TLS).
#[derive(Debug)]
pub(crate) struct Hop {
    peer: Bytes,
    element: String,
}

impl Hop {
    /// The values of a connection from `peer` (`https`: over TLS).
    pub(crate) fn new(peer: IpAddr, https: bool) -> Self {
        let proto = if https { "https" } else { "http" };
        let element = match peer {
            IpAddr::V4(a) => format!("for={a};proto={proto}"),
            IpAddr::V6(a) => format!("for=\"[{a}]\";proto={proto}"),
        };
        let peer = Bytes::from(peer.to_string());
        Hop { peer, element }
    }
}

/// Appends the peer to `X-Forwarded-For` (all existing lines joined into
/// one, as nginx's `$proxy_add_x_forwarded_for`). The value is the hop's
/// own, or split off `buf` (the forwarding values of a request share one
/// buffer, empty between two values).
pub(crate) fn append_x_forwarded_for(headers: &mut HeaderMap, hop: &Hop, buf: &mut BytesMut) {
    let field = headers.entry(X_FORWARDED_FOR);
    join_existing(&field, buf);
    if buf.is_empty() {
        return set(field, hop.peer.clone());
    }
    buf.put_slice(&hop.peer);
    set(field, buf.split().freeze());
}

/// Appends this hop's element to `Forwarded`:
/// `for=<peer>;proto=http[s][;host="<host>"]`, split off `buf`.
pub(crate) fn append_forwarded(
    headers: &mut HeaderMap,
    hop: &Hop,
    host: Option<&[u8]>,
    buf: &mut BytesMut,
) {
    let field = headers.entry(FORWARDED);
    join_existing(&field, buf);
    buf.put_slice(hop.element.as_bytes());
    if let Some(h) = host.filter(|h| !h.is_empty()) {
        // A quoted-string: visible ASCII with `"` and `\` escaped.
        if h.iter().all(|&b| (0x21..0x7f).contains(&b)) {
            buf.put_slice(b";host=\"");
            for &b in h {
                if b == b'"' || b == b'\\' {
                    buf.put_u8(b'\\');
                }
                buf.put_u8(b);
            }
            buf.put_u8(b'"');
        }
    }
    set(field, buf.split().freeze());
}

/// Sets `X-Forwarded-Proto` to the client connection's scheme (`http`, or
/// `https` over TLS), unless `keep` (the request came through a trusted
/// proxy) and the field is present.
pub(crate) fn set_x_forwarded_proto(headers: &mut HeaderMap, keep: bool, https: bool) {
    if keep && headers.contains_key(&X_FORWARDED_PROTO) {
        return;
    }
    let proto = if https { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
}

/// Writes the existing lines of `field`, joined by `, `, then `, `
/// (nothing when absent). The field is looked up once, for reading and
/// writing it.
fn join_existing(field: &Entry<'_, HeaderValue>, buf: &mut BytesMut) {
    if let Entry::Occupied(lines) = field {
        for v in lines.iter().map(|v| v.as_bytes().trim_ascii()) {
            if !v.is_empty() {
                buf.put_slice(v);
                buf.put_slice(b", ");
            }
        }
    }
}

/// Replaces `field`'s lines with `value`.
fn set(field: Entry<'_, HeaderValue>, value: Bytes) {
    // Existing values were valid field values, and so is what was added.
    if let Ok(v) = HeaderValue::from_maybe_shared(value) {
        match field {
            Entry::Occupied(mut lines) => _ = lines.insert(v),
            Entry::Vacant(e) => _ = e.insert(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_fields_go() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("connection", "close"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("upgrade", "websocket"),
            ("te", "gzip"),
            ("transfer-encoding", "chunked"),
            ("x-kept", "yes"),
        ]);
        assert_eq!(strip_hop_by_hop(&mut h, None), Stripped::default());
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
        let mut h = map(&[
            (
                "connection",
                "host, content-length, forwarded, x-forwarded-for",
            ),
            ("connection", "x-forwarded-proto, http2-settings, upgrade"),
            ("host", "a.example"),
            ("content-length", "3"),
            ("forwarded", "for=192.0.2.1"),
            ("x-forwarded-for", "192.0.2.1"),
            ("x-forwarded-proto", "https"),
            ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"),
            ("upgrade", "h2c"),
        ]);
        assert_eq!(strip_hop_by_hop(&mut h, None).upgrade.unwrap(), "h2c");
        assert_eq!(h.len(), 5, "{h:?}");
        assert_eq!(h["host"], "a.example");
        let mut h = map(&[("http2-settings", "AAMAAABk")]);
        strip_hop_by_hop(&mut h, None);
        assert!(h.is_empty(), "{h:?}");
        let mut h = map(&[("te", "trailers"), ("expect", "100-continue")]);
        strip_hop_by_hop(&mut h, None);
        assert_eq!((h.len(), h["expect"].as_bytes()), (2, &b"100-continue"[..]));
        strip_hop_by_hop(&mut h, Some(http::header::EXPECT));
        assert_eq!((h.len(), h["te"].as_bytes()), (1, &b"trailers"[..]));
    }

    #[test]
    fn forwarding_fields_are_appended() {
        let mut h = map(&[
            ("x-forwarded-for", "203.0.113.1"),
            ("x-forwarded-for", "198.51.100.2"),
        ]);
        let mut buf = BytesMut::new();
        let hop = |ip: &str, https| Hop::new(ip.parse().unwrap(), https);
        append_x_forwarded_for(&mut h, &hop("10.0.0.1", false), &mut buf);
        assert_eq!(h["x-forwarded-for"], "203.0.113.1, 198.51.100.2, 10.0.0.1");
        let mut h = HeaderMap::new();
        append_x_forwarded_for(&mut h, &hop("::1", false), &mut buf);
        assert_eq!(h["x-forwarded-for"], "::1");
        for ip in ["0.0.0.0", "9.10.99.100", "255.254.1.200"] {
            let mut h = HeaderMap::new();
            append_x_forwarded_for(&mut h, &hop(ip, false), &mut buf);
            assert_eq!(h["x-forwarded-for"], ip);
        }
        let mut h = map(&[("x-forwarded-for", " ")]);
        append_x_forwarded_for(&mut h, &hop("::1", false), &mut buf);
        assert_eq!(h["x-forwarded-for"], "::1");

        let mut h = map(&[("forwarded", "for=192.0.2.60;proto=https")]);
        append_forwarded(&mut h, &hop("2001:db8::1", false), Some(b"a\"b"), &mut buf);
        assert_eq!(
            h["forwarded"],
            "for=192.0.2.60;proto=https, for=\"[2001:db8::1]\";proto=http;host=\"a\\\"b\""
        );

        let mut h = HeaderMap::new();
        append_forwarded(&mut h, &hop("192.0.2.1", true), None, &mut buf);
        assert_eq!(h["forwarded"], "for=192.0.2.1;proto=https");

        let mut h = map(&[("x-forwarded-proto", "https")]);
        set_x_forwarded_proto(&mut h, true, false);
        assert_eq!(h["x-forwarded-proto"], "https");
        set_x_forwarded_proto(&mut h, false, false);
        assert_eq!(h["x-forwarded-proto"], "http");
        set_x_forwarded_proto(&mut h, false, true);
        assert_eq!(h["x-forwarded-proto"], "https");
    }
}
