//! Any request path, read with either reading of encoded slashes, as the
//! gateway normalises it once before limiting and forwarding it. No
//! panic; a normal form starts with `/`, has no `.`, `..` or empty
//! segment (but a final empty one), no escape of an unreserved character
//! and no lower-case escape; normalising it again changes nothing (and
//! borrows); a path is borrowed exactly when it is already normal; with
//! encoded slashes refused, none is left and the path cannot climb out
//! of an upstream's prefix; and a path the `http` crate accepts stays one
//! it accepts.
#![no_main]

use std::borrow::Cow;

use floodgate_http::identity::{EncodedSlashes, escapes_root, normalize_path};
use http::uri::PathAndQuery;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, &[u8])| {
    let (keep, path) = input;
    let slashes = if keep {
        EncodedSlashes::Keep
    } else {
        EncodedSlashes::Refuse
    };
    let Ok(normal) = normalize_path(path, slashes) else {
        return;
    };
    assert_eq!(matches!(normal, Cow::Borrowed(_)), *normal == *path);
    assert!(normal.starts_with(b"/"), "{normal:?}");
    let segments: Vec<&[u8]> = normal[1..].split(|&b| b == b'/').collect();
    for (i, seg) in segments.iter().enumerate() {
        assert!(*seg != b"." && *seg != b"..", "{normal:?}");
        assert!(!seg.is_empty() || i + 1 == segments.len(), "{normal:?}");
    }
    for (i, _) in normal.iter().enumerate().filter(|&(_, &b)| b == b'%') {
        let hex = &normal[i + 1..i + 3];
        assert!(
            hex.iter()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b))
        );
        let b = u8::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap();
        assert!(
            !(b.is_ascii_alphanumeric() || b"-._~".contains(&b)),
            "{normal:?}"
        );
    }
    let again = normalize_path(&normal, slashes).expect("a normal path is normal");
    assert!(matches!(again, Cow::Borrowed(_)), "{normal:?}");
    if !keep {
        assert!(!escapes_root(&normal), "{normal:?}");
    }
    if PathAndQuery::try_from(path).is_ok() && !path.contains(&b'?') && !path.contains(&b'#') {
        assert!(PathAndQuery::try_from(&normal[..]).is_ok(), "{normal:?}");
    }
});
