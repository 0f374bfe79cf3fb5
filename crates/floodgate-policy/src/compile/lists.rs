//! Allow and deny lists: descriptor entries never limited, or always
//! denied, by exact value or, for address-valued keys, by network.

use std::net::IpAddr;

use hashbrown::HashSet;

use crate::spec::ListSpec;

/// One compiled list entry.
#[derive(Debug)]
struct Entry {
    /// The descriptor entry key it applies to.
    key: Box<str>,
    /// The values it lists.
    values: HashSet<Box<str>>,
    /// The networks it lists (address, prefix length).
    networks: Box<[(IpAddr, u8)]>,
}

/// A compiled allow or deny list.
#[derive(Debug, Default)]
pub struct List {
    /// Its entries, in file order.
    entries: Box<[Entry]>,
}

impl List {
    /// Compiles the entries of `specs`.
    pub(crate) fn new(specs: &[ListSpec]) -> List {
        List {
            entries: specs
                .iter()
                .map(|s| Entry {
                    key: s.key.as_str().into(),
                    values: s.values.iter().map(|v| v.as_str().into()).collect(),
                    networks: s.networks.clone().into_boxed_slice(),
                })
                .collect(),
        }
    }

    /// True when the list is empty (nothing to check).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the entry `key` = `value` is on the list.
    pub fn contains(&self, key: &str, value: &str) -> bool {
        self.entries.iter().any(|e| {
            &*e.key == key
                && (e.values.contains(value)
                    || (!e.networks.is_empty()
                        && parse_ip(value)
                            .is_some_and(|ip| e.networks.iter().any(|n| in_network(ip, *n)))))
        })
    }
}

/// An address, accepting the bracketed IPv6 form and the network form
/// `addr/len` that grouped client addresses take (its network address is
/// checked).
fn parse_ip(value: &str) -> Option<IpAddr> {
    let v = value.split('/').next().unwrap_or(value);
    let v = v.trim_start_matches('[').trim_end_matches(']');
    v.parse().ok()
}

/// Whether `ip` is inside `net` (`addr/prefix`). IPv4-mapped IPv6 addresses
/// match IPv4 networks.
pub fn in_network(ip: IpAddr, (net, prefix): (IpAddr, u8)) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 @ IpAddr::V4(_) => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let net = |s: &str, p| (s.parse::<IpAddr>().unwrap(), p);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_network(ip("10.1.2.3"), net("10.0.0.0", 8)));
        assert!(!in_network(ip("11.1.2.3"), net("10.0.0.0", 8)));
        assert!(in_network(ip("::ffff:10.1.2.3"), net("10.0.0.0", 8)));
        assert!(in_network(ip("2001:db8::1"), net("2001:db8::", 32)));
        assert!(!in_network(ip("2001:db9::1"), net("2001:db8::", 32)));
        assert!(in_network(ip("1.2.3.4"), net("0.0.0.0", 0)));
        assert!(!in_network(ip("1.2.3.4"), net("::", 0)));
    }

    #[test]
    fn grouped_addresses_match_by_their_network_address() {
        let list = List::new(&[crate::spec::ListSpec {
            at: Default::default(),
            key: "remote_address".into(),
            values: vec![],
            networks: vec![("2001:db8::".parse().unwrap(), 32)],
        }]);
        assert!(list.contains("remote_address", "2001:db8:1:2::/64"));
        assert!(list.contains("remote_address", "[2001:db8::1]"));
        assert!(!list.contains("remote_address", "2001:db9::/64"));
    }
}
