//! Text from a log made safe to print: a client chose it (a path, a key, a
//! user agent), and a control character in it would reach the terminal
//! the summary is printed on (`ESC [2J` clears it, a CR overwrites a line,
//! a LF forges one, C1's CSI `U+009B` starts a sequence on its own).
//! Every control character (C0, DEL, C1) is written as an escape instead:
//! `\r`, `\n`, `\t`, `\x1b` below U+0080, `\u{9b}` above.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character escaped (borrowed when it has none).
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_printable(&mut out, c);
    }
    Cow::Owned(out)
}

/// Appends `c` to `out`, escaped if it is a control character.
pub(crate) fn push_printable(out: &mut String, c: char) {
    match c {
        '\r' => out.push_str("\\r"),
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() && (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if c.is_control() => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("/a b/é?x=1"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\x1b[2J\r\n\t\x00\x7f\u{9b}31m\u{85}ok"),
            "\\x1b[2J\\r\\n\\t\\x00\\x7f\\u{9b}31m\\u{85}ok"
        );
        let every: String = (0u32..0x200).filter_map(char::from_u32).collect();
        assert!(!printable(&every).chars().any(char::is_control));
    }
}
