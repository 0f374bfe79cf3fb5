//! Request paths made one spelling per resource, before anything reads
//! them: the gateway normalises a path once, computes identities and
//! routes from the result, and forwards that same path, so the limiter
//! and the upstream agree on what was asked.
//!
//! [`normalize_path`] resolves a path the way servers do (RFC 3986 §6.2.2
//! and §5.2.4):
//!
//! * percent-encodings of unreserved characters (`A-Z a-z 0-9 - . _ ~`)
//!   are decoded (`/%6Cogin` is `/login`, `%2e` is `.`), the others are
//!   written with upper-case hex digits (`%3a` is `%3A`);
//! * `.` and `..` segments are removed, including those spelled with
//!   `%2e`; a `..` above the root (`/../x`) is refused, as nginx does
//!   (RFC 3986 would keep it at the root);
//! * empty segments (`//`) are merged, as nginx's `merge_slashes` and the
//!   route matcher do; a final `/` is kept (`/login/` and `/login` may be
//!   different resources);
//! * an encoded slash or backslash (`%2F`, `%5C`), or a raw backslash,
//!   is refused by default ([`EncodedSlashes::Refuse`]): upstreams
//!   disagree on them (nginx decodes `%2F` into a separator, servers on
//!   Windows read `\` as one, others keep them as data or refuse them), so
//!   no reading can be known to be the upstream's. With
//!   [`EncodedSlashes::Keep`] they are data inside their segment, written
//!   `%2F`, `%5C`, `\`;
//! * a `%` not followed by two hex digits is refused, as nginx does.
//!
//! Pure and allocation-free for a path that is already normal (the
//! common case): bytes in, the same bytes or a new spelling out.

use std::borrow::Cow;

/// What an encoded slash (`%2F`), an encoded backslash (`%5C`) or a raw
/// backslash in a request path means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EncodedSlashes {
    /// The request is refused (400; the default): the upstream may read it
    /// as a separator, so neither reading is safe to key on.
    #[default]
    Refuse,
    /// Data inside its segment (`/a%2Fb` is one segment), forwarded as
    /// `%2F`, `%5C`, `\`.
    Keep,
}

/// Why a request path cannot be normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/`.
    #[error("the path does not start with '/'")]
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    #[error("invalid percent-encoding in the path")]
    BadPercent,
    /// A `..` above the root (`/../x`), as nginx refuses it: joined to an
    /// upstream's prefix it would leave it.
    #[error("the path climbs above the root with '..'")]
    AboveRoot,
    /// `%2F`, `%5C` or a raw `\`, refused by [`EncodedSlashes::Refuse`].
    #[error("an encoded slash (%2F, %5C) or a backslash in the path")]
    SlashSpelling,
}

/// `path` (without the query) in its normal form (see the module's
/// documentation): borrowed when it already is.
pub fn normalize_path(path: &[u8], slashes: EncodedSlashes) -> Result<Cow<'_, [u8]>, PathError> {
    if is_normal(path, slashes)? {
        return Ok(Cow::Borrowed(path));
    }
    rewrite(path, slashes).map(Cow::Owned)
}

/// Whether a path resolved by its least careful reader — every spelling
/// of a slash (`/`, `\`, `%2F`, `%5C`) a separator, every segment
/// percent-decoded — climbs above its root with `..`: joined to an
/// upstream's prefix, it would leave the prefix.
pub fn escapes_root(path: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut rest = path;
    loop {
        let (seg, next) = split_loosely(rest);
        if eq_decoded(seg, b"..") {
            match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            }
        } else if !seg.is_empty() && !eq_decoded(seg, b".") {
            depth += 1;
        }
        match next {
            Some(n) => rest = n,
            None => return false,
        }
    }
}

/// The first segment of `path` and what follows its separator (any
/// spelling of a slash).
fn split_loosely(path: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b'/' | b'\\' => return (&path[..i], Some(&path[i + 1..])),
            b'%' if matches!(decode_at(path, i), Some(b'/' | b'\\')) => {
                return (&path[..i], Some(&path[i + 3..]));
            }
            _ => i += 1,
        }
    }
    (path, None)
}

/// Whether `raw`, percent-decoded (invalid escapes kept as they are),
/// equals `literal`.
fn eq_decoded(raw: &[u8], literal: &[u8]) -> bool {
    let mut i = 0;
    let mut lit = literal.iter();
    while i < raw.len() {
        let (b, step) = match decode_at(raw, i) {
            Some(b) => (b, 3),
            None => (raw[i], 1),
        };
        if lit.next() != Some(&b) {
            return false;
        }
        i += step;
    }
    lit.next().is_none()
}

/// The byte `%XY` at `path[i]` encodes, if it is a valid escape.
fn decode_at(path: &[u8], i: usize) -> Option<u8> {
    if path.get(i) != Some(&b'%') {
        return None;
    }
    let hi = hex(*path.get(i + 1)?)?;
    let lo = hex(*path.get(i + 2)?)?;
    Some(hi << 4 | lo)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986's unreserved characters: their encodings mean the same as
/// the characters.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// What the escape at `path[i]` is: its byte, or the path's error.
fn escape(path: &[u8], i: usize, slashes: EncodedSlashes) -> Result<u8, PathError> {
    let b = decode_at(path, i).ok_or(PathError::BadPercent)?;
    if matches!(b, b'/' | b'\\') && slashes == EncodedSlashes::Refuse {
        return Err(PathError::SlashSpelling);
    }
    Ok(b)
}

/// Whether `path` is normal already (a scan, no writing): it starts with
/// `/`, has no empty segment but a final one, no `.` or `..` segment, and
/// every escape is valid, upper case and not of an unreserved character.
fn is_normal(path: &[u8], slashes: EncodedSlashes) -> Result<bool, PathError> {
    if path.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    let mut normal = true;
    let mut seg_start = 1;
    let mut i = 1;
    while i <= path.len() {
        let Some(&b) = path.get(i) else {
            normal &= !is_dot_segment(&path[seg_start..]);
            break;
        };
        match b {
            b'/' => {
                let seg = &path[seg_start..i];
                normal &= !seg.is_empty() && !is_dot_segment(seg);
                seg_start = i + 1;
                i += 1;
            }
            b'%' => {
                let d = escape(path, i, slashes)?;
                normal &= !unreserved(d) && !path[i + 1..i + 3].iter().any(u8::is_ascii_lowercase);
                i += 3;
            }
            b'\\' if slashes == EncodedSlashes::Refuse => return Err(PathError::SlashSpelling),
            _ => i += 1,
        }
    }
    Ok(normal)
}

fn is_dot_segment(seg: &[u8]) -> bool {
    seg == b"." || seg == b".."
}

/// The normal form of `path`, written out.
fn rewrite(path: &[u8], slashes: EncodedSlashes) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len());
    // The segments after the leading `/`.
    let mut segments = path[1..].split(|&b| b == b'/').peekable();
    let mut trailing = false;
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        let start = out.len();
        out.push(b'/');
        decode_segment(raw, slashes, &mut out)?;
        let seg = &out[start + 1..];
        if seg.is_empty() || seg == b"." {
            out.truncate(start);
            trailing = last;
        } else if seg == b".." {
            out.truncate(start);
            if out.is_empty() {
                return Err(PathError::AboveRoot);
            }
            let parent = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
            out.truncate(parent);
            trailing = last;
        } else {
            trailing = false;
        }
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    Ok(out)
}

/// Appends `raw` to `out` with unreserved characters decoded and other
/// escapes in upper case.
fn decode_segment(raw: &[u8], slashes: EncodedSlashes, out: &mut Vec<u8>) -> Result<(), PathError> {
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && slashes == EncodedSlashes::Refuse {
            return Err(PathError::SlashSpelling);
        }
        if raw[i] != b'%' {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        let b = escape(raw, i, slashes)?;
        if unreserved(b) {
            out.push(b);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
        i += 3;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<String, PathError> {
        normalize_path(path.as_bytes(), EncodedSlashes::Refuse)
            .map(|p| String::from_utf8(p.into_owned()).unwrap())
    }

    #[test]
    fn spellings_of_one_path() {
        for spelling in [
            "/login",
            "//login",
            "/./login",
            "/x/../login",
            "/x/y/../../login",
            "/a/%2e%2e/login",
            "/a/%2E%2E/login",
            "/a/.%2e/login",
            "/%2e/login",
            "/%6cogin",
            "/%6C%6F%67%69%6E",
            "/login/.",
            "/x/..//login",
        ] {
            let want = if spelling.ends_with("/.") {
                "/login/"
            } else {
                "/login"
            };
            assert_eq!(norm(spelling).as_deref(), Ok(want), "{spelling}");
        }
    }

    #[test]
    fn rewritten() {
        for (path, want) in [
            ("/", "/"),
            ("//", "/"),
            ("/a/..", "/"),
            ("/a/.", "/a/"),
            ("/a//b/", "/a/b/"),
            ("/a%3ab", "/a%3Ab"),
            ("/a%20b", "/a%20b"),
            ("/%7e%2D%5f", "/~-_"),
            ("/a/b/../../c", "/c"),
            ("/é/./x", "/é/x"),
            ("/a/...", "/a/..."),
        ] {
            assert_eq!(norm(path).as_deref(), Ok(want), "{path}");
        }
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for path in ["/", "/login", "/login/", "/a%20b/c", "/a/.../b", "/x%2Fy"] {
            let slashes = EncodedSlashes::Keep;
            let n = normalize_path(path.as_bytes(), slashes).unwrap();
            assert!(matches!(n, Cow::Borrowed(_)), "{path}");
        }
    }

    #[test]
    fn refused() {
        use PathError::*;
        for (path, e) in [
            ("", NotAbsolute),
            ("login", NotAbsolute),
            ("*", NotAbsolute),
            ("/%2Flogin", SlashSpelling),
            ("/login%2f", SlashSpelling),
            ("/a%5cb", SlashSpelling),
            ("/a\\b", SlashSpelling),
            ("/x/../a\\b", SlashSpelling),
            ("/a/%", BadPercent),
            ("/a%2", BadPercent),
            ("/a%zz", BadPercent),
            ("/../x%g1", BadPercent),
            ("/..", AboveRoot),
            ("/../login", AboveRoot),
            ("/a/%2e%2e/..", AboveRoot),
            ("/a/b/../../../c", AboveRoot),
        ] {
            assert_eq!(norm(path), Err(e), "{path}");
        }
    }

    #[test]
    fn encoded_slashes_kept_as_data() {
        let keep = |p: &'static str| normalize_path(p.as_bytes(), EncodedSlashes::Keep).unwrap();
        assert_eq!(&*keep("/%2flogin"), b"/%2Flogin");
        assert_eq!(&*keep("/a%2f..%2Fb/../c"), b"/c");
        assert_eq!(&*keep("/a%5c%2e%2e"), b"/a%5C..");
    }

    #[test]
    fn escapes_from_the_root() {
        for path in [
            "/..",
            "/a/../..",
            "/a%2F..%2F..",
            "/a\\..\\..",
            "/%2e%2E/x",
            "/a%5C..%5c..",
        ] {
            assert!(escapes_root(path.as_bytes()), "{path}");
        }
        for path in ["/", "/a/..", "/a/./b/../c", "/a%2F..", "/...", "/a/..%2Fb"] {
            assert!(!escapes_root(path.as_bytes()), "{path}");
        }
    }

    proptest::proptest! {
        /// Normal forms are fixed points, borrowed exactly when unchanged,
        /// rooted and free of dot and empty segments.
        #[test]
        fn normal_forms_are_stable(path in "/[/.%2eEfF5cCa0-9\\\\]{0,24}", keep: bool) {
            let slashes = if keep { EncodedSlashes::Keep } else { EncodedSlashes::Refuse };
            if let Ok(n) = normalize_path(path.as_bytes(), slashes) {
                proptest::prop_assert_eq!(matches!(n, Cow::Borrowed(_)), *n == *path.as_bytes());
                let again = normalize_path(&n, slashes).unwrap();
                proptest::prop_assert!(matches!(again, Cow::Borrowed(_)));
                proptest::prop_assert!(n.starts_with(b"/"));
                let segs: Vec<&[u8]> = n[1..].split(|&b| b == b'/').collect();
                for (i, seg) in segs.iter().enumerate() {
                    proptest::prop_assert!(!is_dot_segment(seg));
                    proptest::prop_assert!(!seg.is_empty() || i + 1 == segs.len());
                }
                proptest::prop_assert!(!escapes_root(&n) || keep);
            }
        }
    }
}
