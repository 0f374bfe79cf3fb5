//! Header rewriting between the client and the upstream: hop-by-hop
//! fields removed (RFC 9110 §7.6.1) in both directions, and the
//! forwarding fields (`X-Forwarded-For`, `X-Forwarded-Proto`,
//! `Forwarded`) appended on the way up.

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{
    CONNECTION, Entry, FORWARDED, HeaderName, HeaderValue, TE, TRANSFER_ENCODING, UPGRADE,
};

/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Removes the hop-by-hop fields: `Connection` and every field it names,
/// `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, and
/// `TE` unless it is exactly `trailers` (which gRPC needs end to end and
/// HTTP/2 allows); and `also`, a field of the message's own to drop.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, also: Option<HeaderName>) {
    // One pass over the names first (most messages carry none of them)
    // rather than a lookup per field.
    let mut connection = false;
    let mut others = false;
    for name in headers.keys() {
        if name == CONNECTION {
            connection = true;
        } else if name == TE
            || name == TRANSFER_ENCODING
            || name == UPGRADE
            || name == KEEP_ALIVE
            || name == PROXY_CONNECTION
            || also.as_ref() == Some(name)
        {
            others = true;
        }
    }
    if !connection && !others {
        return;
    }
    if connection {
        let named: Vec<HeaderName> = named_fields(headers, &CONNECTION).collect();
        for name in named {
            headers.remove(name);
        }
        headers.remove(CONNECTION);
    }
    let named = [KEEP_ALIVE, PROXY_CONNECTION, TRANSFER_ENCODING, UPGRADE];
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
}

/// The field names a list field (`Connection`, `Trailer`) names:
/// comma-separated tokens, over all its lines.
pub fn named_fields<'a>(
    headers: &'a HeaderMap,
    list: &HeaderName,
) -> impl Iterator<Item = HeaderName> + 'a {
    (headers.get_all(list).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
}

/// Appends `peer` to `X-Forwarded-For` (all existing lines joined into one,
/// as nginx's `$proxy_add_x_forwarded_for`). The value is split off `buf`
/// (the forwarding values of a request share one buffer).
pub fn append_x_forwarded_for(headers: &mut HeaderMap, peer: IpAddr, buf: &mut BytesMut) {
    let field = headers.entry(X_FORWARDED_FOR);
    join_existing(&field, buf);
    push_ip(buf, peer);
    set(field, buf.split().freeze());
}

/// Writes an IP address (IPv4 without the formatting machinery, in one
/// copy).
fn push_ip(buf: &mut BytesMut, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            let mut text = [0u8; 15];
            let n = ipv4_text(a.octets(), &mut text);
            buf.put_slice(&text[..n]);
        }
        IpAddr::V6(a) => {
            let _ = write!(buf, "{a}");
        }
    }
}

/// The dotted-decimal text of an IPv4 address in `out`; its length.
fn ipv4_text(octets: [u8; 4], out: &mut [u8; 15]) -> usize {
    let mut n = 0;
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            out[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            out[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            out[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        out[n] = b'0' + octet % 10;
        n += 1;
    }
    n
}

/// Appends an RFC 7239 element for this hop to `Forwarded`:
/// `for=<peer>;proto=http[s][;host="<host>"]` (IPv6 addresses quoted and
/// bracketed; `https` when the client connection is TLS), split off `buf`.
pub fn append_forwarded(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    host: Option<&[u8]>,
    https: bool,
    buf: &mut BytesMut,
) {
    let field = headers.entry(FORWARDED);
    join_existing(&field, buf);
    match peer.ip() {
        IpAddr::V4(a) => {
            buf.put_slice(b"for=");
            push_ip(buf, IpAddr::V4(a));
        }
        IpAddr::V6(a) => {
            let _ = write!(buf, "for=\"[{a}]\"");
        }
    }
    buf.put_slice(if https {
        b";proto=https"
    } else {
        b";proto=http"
    });
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
pub fn set_x_forwarded_proto(headers: &mut HeaderMap, keep: bool, https: bool) {
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
    fn ipv4_text_is_the_standard_form() {
        for a in [
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [10, 0, 99, 100],
            [1, 20, 109, 9],
            [127, 0, 0, 1],
        ] {
            let mut out = [0u8; 15];
            let n = ipv4_text(a, &mut out);
            assert_eq!(
                &out[..n],
                std::net::Ipv4Addr::from(a).to_string().as_bytes()
            );
        }
        for x in 0..=255u8 {
            let a = [x, 255 - x, x / 3, x.wrapping_mul(7)];
            let mut out = [0u8; 15];
            let n = ipv4_text(a, &mut out);
            assert_eq!(
                &out[..n],
                std::net::Ipv4Addr::from(a).to_string().as_bytes()
            );
        }
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
        strip_hop_by_hop(&mut h, None);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
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
        append_x_forwarded_for(&mut h, "10.0.0.1".parse().unwrap(), &mut buf);
        assert_eq!(h["x-forwarded-for"], "203.0.113.1, 198.51.100.2, 10.0.0.1");
        let mut h = HeaderMap::new();
        append_x_forwarded_for(&mut h, "::1".parse().unwrap(), &mut buf);
        assert_eq!(h["x-forwarded-for"], "::1");
        for ip in ["0.0.0.0", "9.10.99.100", "255.254.1.200"] {
            let mut h = HeaderMap::new();
            append_x_forwarded_for(&mut h, ip.parse().unwrap(), &mut buf);
            assert_eq!(h["x-forwarded-for"], ip);
        }
        let mut h = HeaderMap::new();
        append_x_forwarded_for(&mut h, "::1".parse().unwrap(), &mut buf);
        assert_eq!(h["x-forwarded-for"], "::1");

        let mut h = map(&[("forwarded", "for=192.0.2.60;proto=https")]);
        append_forwarded(
            &mut h,
            "[2001:db8::1]:4711".parse().unwrap(),
            Some(b"a\"b"),
            false,
            &mut buf,
        );
        assert_eq!(
            h["forwarded"],
            "for=192.0.2.60;proto=https, for=\"[2001:db8::1]\";proto=http;host=\"a\\\"b\""
        );

        let mut h = HeaderMap::new();
        append_forwarded(&mut h, "192.0.2.1:1".parse().unwrap(), None, true, &mut buf);
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
