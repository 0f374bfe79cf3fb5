//! Writing the pieces of Structured Field values (RFC 9651) the contract
//! emits: Integers (at most 15 digits), Strings (printable ASCII, escaped),
//! and whole seconds rounded up.

use std::time::Duration;

/// The largest Integer a Structured Field can carry (15 digits).
const MAX_SF_INTEGER: u64 = 999_999_999_999_999;

/// The longest policy name written, in bytes (longer names are cut).
pub const MAX_NAME_LEN: usize = 128;

/// `d` in whole seconds, rounded **up**: a client that waits this long never
/// comes back early. Zero stays zero.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `n` clamped to the Structured Field Integer range.
#[inline]
pub(super) fn clamp(n: u64) -> u64 {
    n.min(MAX_SF_INTEGER)
}

/// Appends `n` (clamped to 15 digits) in decimal.
#[inline]
pub(super) fn push_int(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(clamp(n)));
}

/// Appends `name` as an sf-string: quoted, `"` and `\` escaped, every byte
/// outside printable ASCII replaced by `_`, cut to [`MAX_NAME_LEN`] bytes.
/// An empty name is written as `"-"`.
pub(crate) fn push_string(out: &mut String, name: &str) {
    out.push('"');
    if name.is_empty() {
        out.push('-');
    }
    // The common name: short, printable, nothing to escape.
    if name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| matches!(b, 0x20..=0x7e) && b != b'"' && b != b'\\')
    {
        out.push_str(name);
        out.push('"');
        return;
    }
    for &b in name.as_bytes().iter().take(MAX_NAME_LEN) {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

/// Appends `name` for plain text and JSON-free contexts: printable ASCII,
/// other bytes replaced by `_`, cut to [`MAX_NAME_LEN`] bytes.
pub(crate) fn push_printable(out: &mut String, name: &str) {
    for &b in name.as_bytes().iter().take(MAX_NAME_LEN) {
        out.push(if (0x20..=0x7e).contains(&b) {
            b as char
        } else {
            '_'
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_printable() {
        let mut s = String::new();
        push_string(&mut s, "a\"b\\c\u{e9}\n");
        assert_eq!(s, r#""a\"b\\c___""#);
        s.clear();
        push_string(&mut s, "");
        assert_eq!(s, r#""-""#);
        s.clear();
        push_string(&mut s, &"x".repeat(500));
        assert_eq!(s.len(), MAX_NAME_LEN + 2);
    }

    #[test]
    fn seconds_are_rounded_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::from_millis(3001)), 4);
    }

    #[test]
    fn integers_are_clamped() {
        let mut s = String::new();
        push_int(&mut s, u64::MAX);
        assert_eq!(s, "999999999999999");
        for n in [0u64, 7, 10, 99, 100, 12_345, 999_999_999_999_998] {
            s.clear();
            push_int(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }
}
