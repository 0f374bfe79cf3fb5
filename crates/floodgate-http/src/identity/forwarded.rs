//! Reading the addresses proxies wrote: `X-Forwarded-For`-style lists and
//! RFC 7239 `Forwarded` elements, every line of the header in order, keeping
//! only the rightmost entries (the only ones the client address is taken
//! from), without allocating.

use std::net::{IpAddr, Ipv6Addr};

/// Entries kept from the right: the most a trusted chain can be walked.
pub(crate) const CHAIN: usize = 33;
/// Longest node (address and port) accepted, in bytes.
const MAX_NODE: usize = 64;

/// One entry: the node text (for `Forwarded`, the `for=` value; empty for
/// an element we cannot read: bad syntax, no `for=`, a repeated `for=`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Entry<'a> {
    bytes: &'a [u8],
    /// A quoted-string whose escapes are still in `bytes`.
    quoted: bool,
}

/// The rightmost [`CHAIN`] entries of a header and how many there were.
pub(crate) struct Chain<'a> {
    ring: [Entry<'a>; CHAIN],
    /// Number of entries in the header.
    pub(crate) total: usize,
}

impl<'a> Chain<'a> {
    /// An empty chain.
    pub(crate) fn new() -> Self {
        Chain {
            ring: [Entry::default(); CHAIN],
            total: 0,
        }
    }

    fn push(&mut self, e: Entry<'a>) {
        self.ring[self.total % CHAIN] = e;
        self.total += 1;
    }

    /// Entry `k` from the right (1 is the rightmost), if kept.
    pub(crate) fn nth_from_right(&self, k: usize) -> Option<Entry<'a>> {
        (k >= 1 && k <= self.total && k <= CHAIN).then(|| self.ring[(self.total - k) % CHAIN])
    }

    /// Keeps only the rightmost entry.
    pub(crate) fn keep_last(&mut self) {
        if self.total > 1 {
            self.ring[0] = self.ring[(self.total - 1) % CHAIN];
            self.total = 1;
        }
    }

    /// Adds the comma-separated entries of `lines` (empty ones are not
    /// entries).
    pub(crate) fn read_list<I: Iterator<Item = &'a [u8]>>(&mut self, lines: I) {
        for line in lines {
            for part in line.split(|&b| b == b',') {
                let bytes = part.trim_ascii();
                if !bytes.is_empty() {
                    let quoted = false;
                    self.push(Entry { bytes, quoted });
                }
            }
        }
    }

    /// Adds the `for=` nodes of the `Forwarded` elements of `lines` (empty
    /// elements are not entries).
    pub(crate) fn read_forwarded<I: Iterator<Item = &'a [u8]>>(&mut self, lines: I) {
        for element in lines.flat_map(|line| split_unquoted(line, b',')) {
            let mut node = None;
            let mut invalid = false;
            let mut empty = true;
            for pair in split_unquoted(element, b';') {
                let pair = trim_ows(pair);
                if pair.is_empty() {
                    continue;
                }
                empty = false;
                let name_len = pair.iter().position(|&b| !is_tchar(b));
                let (name, value) = pair.split_at(name_len.unwrap_or(pair.len()));
                let value = value.strip_prefix(b"=").and_then(pair_value);
                match value {
                    Some(v) if !name.is_empty() && name.eq_ignore_ascii_case(b"for") => {
                        invalid |= node.replace(v).is_some();
                    }
                    Some(_) if !name.is_empty() => {}
                    _ => invalid = true,
                }
            }
            if !empty {
                self.push(node.filter(|_| !invalid).unwrap_or_default());
            }
        }
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim_ows(b: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b != b' ' && *b != b'\t';
    let start = b.iter().position(ows).unwrap_or(b.len());
    let end = b.iter().rposition(ows).map_or(start, |e| e + 1);
    &b[start..end]
}

/// The end of a quoted-string starting at `i` (the closing quote), if any.
fn quoted_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The parts of `b` between the `sep` bytes outside quoted-strings (an
/// unterminated one runs to the end).
fn split_unquoted(b: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(b);
    std::iter::from_fn(move || {
        let b = rest?;
        let mut i = 0;
        while i < b.len() && b[i] != sep {
            i = match b[i] {
                b'"' => quoted_end(b, i).map_or(b.len(), |end| end + 1),
                _ => i + 1,
            };
        }
        rest = b.get(i + 1..);
        b.get(..i)
    })
}

/// The value of a `Forwarded` pair: a whole quoted-string (escapes kept) or
/// a token.
fn pair_value(v: &[u8]) -> Option<Entry<'_>> {
    if v.first() == Some(&b'"') {
        let end = quoted_end(v, 0).filter(|&end| end + 1 == v.len())?;
        let (bytes, quoted) = (&v[1..end], true);
        return Some(Entry { bytes, quoted });
    }
    // Lenient: unquoted IPv6 nodes are accepted too.
    let token = |b: &u8| is_tchar(*b) || matches!(b, b':' | b'[' | b']');
    let (bytes, quoted) = (v, false);
    v.iter().all(token).then_some(Entry { bytes, quoted })
}

/// The address of an entry: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:443` (for `Forwarded`, also obfuscated
/// ports `:_x`); IPv4-mapped IPv6 addresses become IPv4. None for anything
/// else (`unknown`, obfuscated identifiers, garbage).
pub(crate) fn entry_address(e: Entry<'_>, forwarded: bool) -> Option<IpAddr> {
    if e.bytes.len() > MAX_NODE {
        return None;
    }
    let mut buf = [0u8; MAX_NODE];
    let text: &[u8] = if e.quoted {
        let mut n = 0;
        let mut it = e.bytes.iter();
        while let Some(&c) = it.next() {
            buf[n] = if c == b'\\' { *it.next()? } else { c };
            n += 1;
        }
        &buf[..n]
    } else {
        e.bytes
    };
    parse_node(std::str::from_utf8(text).ok()?.trim(), forwarded).map(normalize)
}

fn parse_node(text: &str, forwarded: bool) -> Option<IpAddr> {
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = addr.parse().ok()?;
        return match after {
            "" => Some(IpAddr::V6(ip)),
            _ => valid_port(after.strip_prefix(':')?, forwarded).then_some(IpAddr::V6(ip)),
        };
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = text.split_once(':')?;
    let ip: std::net::Ipv4Addr = addr.parse().ok()?;
    valid_port(port, forwarded).then_some(IpAddr::V4(ip))
}

fn valid_port(p: &str, forwarded: bool) -> bool {
    let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if digits {
        return p.parse::<u32>().is_ok_and(|n| n <= 65535);
    }
    // RFC 7239 obfuscated port: "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
    forwarded
        && p.len() > 1
        && p.starts_with('_')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) as IPv4.
pub(crate) fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn list(lines: &[&str]) -> Vec<Option<String>> {
        let values: Vec<HeaderValue> = lines.iter().map(|l| l.parse().unwrap()).collect();
        let mut c = Chain::new();
        c.read_list(values.iter().map(HeaderValue::as_bytes));
        entries(&c, false)
    }

    fn forwarded(lines: &[&str]) -> Vec<Option<String>> {
        let values: Vec<HeaderValue> = lines.iter().map(|l| l.parse().unwrap()).collect();
        let mut c = Chain::new();
        c.read_forwarded(values.iter().map(HeaderValue::as_bytes));
        entries(&c, true)
    }

    fn entries(c: &Chain<'_>, fwd: bool) -> Vec<Option<String>> {
        (1..=c.total.min(CHAIN))
            .rev()
            .map(|k| entry_address(c.nth_from_right(k).unwrap(), fwd).map(|ip| ip.to_string()))
            .collect()
    }

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn lists() {
        assert_eq!(list(&["1.2.3.4, 5.6.7.8"]), some(&["1.2.3.4", "5.6.7.8"]));
        assert_eq!(list(&["1.2.3.4", "5.6.7.8,9.9.9.9"]).len(), 3);
        assert_eq!(list(&[" , 1.2.3.4 ,, "]), some(&["1.2.3.4"]));
        assert_eq!(
            list(&["[2001:db8::1]:443, 2001:db8::2, 1.2.3.4:8080, ::ffff:10.0.0.1"]),
            some(&["2001:db8::1", "2001:db8::2", "1.2.3.4", "10.0.0.1"])
        );
        assert_eq!(
            list(&["unknown, _hidden, 1.2.3, 1.2.3.4:99999, 1.2.3.4:x, [1.2.3.4]"]),
            vec![None; 6]
        );
    }

    #[test]
    fn forwarded_elements() {
        assert_eq!(
            forwarded(&[
                r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#
            ]),
            some(&["192.0.2.60", "2001:db8:cafe::17"])
        );
        assert_eq!(
            forwarded(&[r#"for="_gazonk", for=unknown, for="198.51.100.17:_x", for="1.2.3.4:80""#]),
            vec![
                None,
                None,
                Some("198.51.100.17".into()),
                Some("1.2.3.4".into())
            ]
        );
        // A quoted comma does not split elements; escapes are read.
        assert_eq!(
            forwarded(&[r#"for="a,b";by=x, for="1.2.\3.4""#]),
            vec![None, Some("1.2.3.4".into())]
        );
        // No for=, a repeated for=, bad syntax, an unterminated quote.
        assert_eq!(
            forwarded(&["proto=https, for=1.1.1.1;for=2.2.2.2, for 3.3.3.3, for=\"4.4.4.4"]),
            vec![None; 4]
        );
        assert_eq!(
            forwarded(&["for=1.1.1.1", "for=[::1]"]),
            some(&["1.1.1.1", "::1"])
        );
        assert_eq!(
            forwarded(&[" , ;, for=1.1.1.1 ; proto=http"]),
            some(&["1.1.1.1"])
        );
    }

    #[test]
    fn keeps_the_rightmost() {
        let line = (0..100)
            .map(|i| format!("10.0.0.{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let v: HeaderValue = line.parse().unwrap();
        let mut c = Chain::new();
        c.read_list(std::iter::once(v.as_bytes()));
        assert_eq!(c.total, 100);
        let last = entry_address(c.nth_from_right(1).unwrap(), false).unwrap();
        assert_eq!(last.to_string(), "10.0.0.99");
        assert!(c.nth_from_right(CHAIN + 1).is_none());
        c.keep_last();
        assert_eq!(c.total, 1);
        assert_eq!(
            entry_address(c.nth_from_right(1).unwrap(), false),
            Some(last)
        );
    }
}
