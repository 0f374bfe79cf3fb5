//! The client address: the socket peer, or the address trusted proxies say
//! they saw.
//!
//! The addresses form a chain, `[entry 1, ..., entry n, peer]`: each proxy
//! appends the address that connected to it. Walking from the right (the
//! peer), an address is trusted when it is among the `trusted_hops`
//! rightmost of the chain or inside a trusted network; the client is the
//! first address that is not. Entries to its left were written by the
//! client and are never read. So:
//!
//! - nothing trusted (the default): the peer, whatever the headers say;
//! - `trusted_proxies` set: the header is read only when the peer is in
//!   them;
//! - an unreadable entry on the walk (garbage, `unknown`, an obfuscated
//!   identifier, an invalid address or port), or a trusted walk longer than
//!   32 entries: the peer (never a guess);
//! - the walk runs out of entries while all are trusted: the leftmost
//!   (written by a trusted proxy).

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use floodgate_policy::compile::in_network;
use http::header::FORWARDED;

use super::config::{ClientIpConfig, X_REAL_IP};
use super::forwarded::{Chain, entry_address, normalize};
use super::request::RequestHead;

/// Longest rendered client value (`ffff:...:ffff/128`).
pub(crate) const MAX_RENDERED: usize = 43;

impl ClientIpConfig {
    fn in_proxies(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|&net| in_network(ip, net))
    }

    /// The client address of a request from `peer`.
    pub(crate) fn resolve<H: RequestHead + ?Sized>(&self, head: &H, peer: IpAddr) -> IpAddr {
        let peer = normalize(peer);
        let trusted_peer = if self.trusted_proxies.is_empty() {
            self.trusted_hops > 0
        } else {
            self.in_proxies(peer)
        };
        if !trusted_peer {
            return peer;
        }
        let mut chain = Chain::new();
        let lines = head.header_lines(&self.header);
        let forwarded = self.header == FORWARDED;
        if forwarded {
            chain.read_forwarded(lines);
        } else {
            chain.read_list(lines);
            if self.header == X_REAL_IP {
                chain.keep_last();
            }
        }
        // Position `k` of the chain (0 is the peer) is a trusted proxy when
        // among the `trusted_hops` rightmost or in a trusted network.
        let mut current = peer;
        for k in 1..=chain.total {
            let Some(entry) = chain.nth_from_right(k) else {
                return peer; // a trusted walk longer than we keep
            };
            let Some(ip) = entry_address(entry, forwarded) else {
                return peer;
            };
            if k >= self.trusted_hops as usize && !self.in_proxies(ip) {
                return ip;
            }
            current = ip;
        }
        current
    }

    /// Appends the key of `ip`: the address, or its network
    /// (`2001:db8:1:2::/64`) when grouped.
    pub(crate) fn render(&self, ip: IpAddr, out: &mut String) {
        let (prefix, full) = match ip {
            IpAddr::V4(_) => (self.ipv4_prefix.unwrap_or(32), 32),
            IpAddr::V6(_) => (self.ipv6_prefix.unwrap_or(128), 128),
        };
        if prefix >= full {
            write_ip(ip, out);
            return;
        }
        let net = match ip {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        write_ip(net, out);
        out.push('/');
        push_decimal(prefix, out);
    }
}

/// Appends `ip` as text (IPv4 by hand: the formatting machinery costs more
/// than the rest of a request's descriptors).
fn write_ip(ip: IpAddr, out: &mut String) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_decimal(octet, out);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn push_decimal(n: u8, out: &mut String) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(c: &ClientIpConfig, ip: &str) -> String {
        let mut s = String::new();
        c.render(ip.parse().unwrap(), &mut s);
        s
    }

    #[test]
    fn rendering() {
        let mut c = ClientIpConfig::default();
        assert_eq!(render(&c, "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2:3:4:5:6");
        c.ipv6_prefix = Some(64);
        c.ipv4_prefix = Some(24);
        assert_eq!(render(&c, "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
        assert_eq!(render(&c, "192.0.2.77"), "192.0.2.0/24");
        c.ipv6_prefix = Some(128);
        c.ipv4_prefix = Some(32);
        assert_eq!(render(&c, "192.0.2.77"), "192.0.2.77");
        for ip in ["0.0.0.0", "9.10.99.100", "255.255.255.255", "1.20.255.3"] {
            assert_eq!(render(&c, ip), ip);
        }
        c.ipv4_prefix = Some(9);
        assert_eq!(render(&c, "255.255.255.255"), "255.128.0.0/9");
        c.ipv6_prefix = Some(100);
        assert_eq!(render(&c, "2001:db8::ffff:ffff"), "2001:db8::f000:0/100");
        let longest = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        c.ipv6_prefix = Some(127);
        assert_eq!(render(&c, longest).len(), MAX_RENDERED);
    }
}
