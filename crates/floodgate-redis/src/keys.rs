//! Key layout: `<prefix>{<tag>}<name>`.
//!
//! * `<tag>` is 16 hex digits of the SHA-1 of the item's group, so every key
//!   of a group lands in one hash slot whatever bytes the group holds
//!   (binary, `{`/`}`, megabytes), and groups spread evenly over slots.
//! * `<name>` is `:` followed by the key's own bytes when it is at most
//!   [`MAX_RAW_KEY`] bytes long, and `#` followed by the 40 hex digits of its
//!   SHA-1 otherwise (so a 1 MB key costs 60 bytes in Redis).
//!
//! The prefix may not contain `{` or `}`, so the tag is always the key's
//! first hash tag.

use sha1_smol::Sha1;

/// Keys longer than this are stored under their SHA-1.
pub const MAX_RAW_KEY: usize = 256;

/// Builds state keys and computes their hash slots.
#[derive(Clone, Debug)]
pub(crate) struct KeyLayout {
    prefix: Vec<u8>,
}

/// A state key and its hash slot.
pub(crate) struct StateKey {
    pub name: Vec<u8>,
    pub slot: u16,
}

fn hex(bytes: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

impl KeyLayout {
    /// `prefix` has been checked to hold no `{` or `}`.
    pub(crate) fn new(prefix: &str) -> Self {
        KeyLayout {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    pub(crate) fn key(&self, group: &[u8], key: &[u8]) -> StateKey {
        let mut name = Vec::with_capacity(self.prefix.len() + 19 + key.len().min(MAX_RAW_KEY));
        name.extend_from_slice(&self.prefix);
        name.push(b'{');
        let tag_at = name.len();
        hex(&Sha1::from(group).digest().bytes()[..8], &mut name);
        let slot = crc16(&name[tag_at..]) % 16384;
        name.push(b'}');
        if key.len() <= MAX_RAW_KEY {
            name.push(b':');
            name.extend_from_slice(key);
        } else {
            name.push(b'#');
            hex(&Sha1::from(key).digest().bytes(), &mut name);
        }
        StateKey { name, slot }
    }
}

/// CRC16-XMODEM, Redis Cluster's slot hash.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn layout() {
        let l = KeyLayout::new("fg:");
        let a = l.key(b"g", b"g:user");
        let b = l.key(b"g", b"g:other");
        assert_eq!(a.slot, b.slot);
        assert!(a.name.starts_with(b"fg:{"));
        assert!(a.name.ends_with(b"}:g:user"));
        // Binary and brace-laden groups still give one clean tag.
        let c = l.key(b"{\0}", b"{\0}x");
        assert_eq!(c.name.iter().filter(|&&b| b == b'{').count(), 2);
        assert_eq!(&c.name[4 + 16..4 + 17], b"}");
        let big = vec![7u8; 1 << 20];
        let d = l.key(b"g", &big);
        assert_eq!(d.name.len(), 3 + 18 + 41);
        assert_ne!(l.key(b"g", &big[1..]).name, d.name);
    }
}
