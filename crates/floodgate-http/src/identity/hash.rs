//! Hashing values that must not reach counters as they are: secrets (API
//! keys, bearer tokens) and values too long or not UTF-8.
//!
//! The hash is SHA-256, the same in every process and version, so instances
//! sharing counters (e.g. through Redis) agree, and operators can compute it
//! themselves (`printf %s "$KEY" | sha256sum | cut -c1-32`) to write per-key
//! rules.

use sha2::{Digest, Sha256};

/// Hex digits of a hashed secret (128 bits).
pub const SECRET_HASH_LEN: usize = 32;
/// Hex digits of the hash that ends a shortened value (64 bits).
const SHORTENED_HASH_LEN: usize = 16;
/// Marks a shortened value: `<prefix>~<16 hex digits>`.
pub(super) const SHORTENED_MARK: char = '~';
/// Shortest `max_value_len` allowed (room for the mark and the hash).
pub const MIN_VALUE_LEN: usize = 1 + SHORTENED_HASH_LEN + 15;

/// The value a hashed secret is replaced by: the first 32 hex digits of the
/// SHA-256 of its bytes.
///
/// ```
/// use floodgate_http::identity::secret_hash;
/// assert_eq!(
///     secret_hash("abc"),
///     "ba7816bf8f01cfea414140de5dae2223"
/// );
/// ```
pub fn secret_hash(secret: &str) -> String {
    let mut out = String::with_capacity(SECRET_HASH_LEN);
    write_secret_hash(&mut out, secret.as_bytes());
    out
}

/// Appends the hash of `secret` to `out` (no allocation when `out` has room).
pub(crate) fn write_secret_hash(out: &mut String, secret: &[u8]) {
    let digest = Sha256::digest(secret);
    write_hex(out, &digest[..SECRET_HASH_LEN / 2]);
}

/// Appends `bytes` to `out` as they are when they are UTF-8 and at most
/// `max` bytes long; otherwise a shortened form of at most `max` bytes: the
/// longest UTF-8 prefix that fits, `~`, and 16 hex digits of the SHA-256 of
/// all the bytes (so distinct long values stay distinct).
pub(crate) fn write_bounded(out: &mut String, bytes: &[u8], max: usize) {
    let valid = match std::str::from_utf8(bytes) {
        Ok(s) if s.len() <= max => {
            out.push_str(s);
            return;
        }
        Ok(s) => s,
        Err(e) => {
            // The prefix up to the first invalid byte is valid UTF-8.
            std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()
        }
    };
    let room = max.saturating_sub(1 + SHORTENED_HASH_LEN);
    let mut cut = valid.len().min(room);
    while !valid.is_char_boundary(cut) {
        cut -= 1;
    }
    out.push_str(&valid[..cut]);
    out.push(SHORTENED_MARK);
    let digest = Sha256::digest(bytes);
    write_hex(out, &digest[..SHORTENED_HASH_LEN / 2]);
}

fn write_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(bytes: &[u8], max: usize) -> String {
        let mut s = String::new();
        write_bounded(&mut s, bytes, max);
        s
    }

    #[test]
    fn secrets() {
        assert_eq!(secret_hash(""), "e3b0c44298fc1c149afbf4c8996fb924");
        assert_eq!(secret_hash("abc").len(), SECRET_HASH_LEN);
        assert_ne!(secret_hash("a"), secret_hash("b"));
    }

    #[test]
    fn short_values_are_kept() {
        assert_eq!(bounded(b"alice", 32), "alice");
        assert_eq!(bounded(&[b'x'; 32], 32), "x".repeat(32));
    }

    #[test]
    fn long_values_are_shortened_and_distinct() {
        let a = bounded(&[b'x'; 100], 32);
        let b = bounded(&[b'x'; 101], 32);
        assert_eq!(a.len(), 32);
        assert!(a.starts_with(&"x".repeat(15)));
        assert_eq!(a.as_bytes()[15], b'~');
        assert_ne!(a, b);
    }

    #[test]
    fn multibyte_cut_on_a_boundary() {
        let long = "é".repeat(40);
        let s = bounded(long.as_bytes(), 32);
        assert!(s.len() <= 32);
        assert!(s.starts_with("ééééééé~"));
    }

    #[test]
    fn invalid_utf8_is_hashed() {
        let s = bounded(b"ab\xffcd", 64);
        assert!(s.starts_with("ab~"));
        assert_eq!(s.len(), 3 + 16);
        assert_ne!(s, bounded(b"ab\xfecd", 64));
    }
}
