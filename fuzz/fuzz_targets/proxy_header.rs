//! Any bytes as the start of a connection to a listener behind a load
//! balancer, read for a PROXY protocol header (v1 or v2) as the listener
//! reads it: the bytes received so far, looked at again as more arrive.
//! No panic; the decision (a header, or why not) comes within the bound
//! and does not change as more bytes arrive, so that however the header
//! is split into reads it is read the same; a header is decided by its
//! own bytes alone, and begins with a signature.
#![no_main]

use floodgate_runtime::listener::proxy_protocol::{MAX_HEADER, Parsed, has_signature, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Each read adds bytes: the first decision is at `k`.
    let mut decided = None;
    for k in 0..=data.len().min(MAX_HEADER + 1) {
        let out = parse(&data[..k]);
        if !matches!(out, Ok(Parsed::Incomplete)) {
            decided = Some((k, describe(&out)));
            break;
        }
    }
    let whole = describe(&parse(data));
    let Some((k, first)) = decided else {
        assert!(data.len() <= MAX_HEADER, "undecided past the bound");
        assert_eq!(whole, "Ok(Incomplete)");
        return;
    };
    assert_eq!(first, whole, "decided at {k} bytes, then changed");
    if let Ok(Parsed::Header { len, .. }) = parse(data) {
        assert!(len <= k && len <= MAX_HEADER, "{len} > {k}");
        assert_eq!(describe(&parse(&data[..len])), whole, "the header alone");
        assert_eq!(has_signature(data), Some(true));
        if data[0] == b'P' {
            assert!(len <= 107 && data[..len].ends_with(b"\r\n"));
        }
    }
    if has_signature(data) == Some(false) {
        assert!(whole.starts_with("Err(Missing"), "{whole}");
    }
});

fn describe<T: std::fmt::Debug>(out: &T) -> String {
    format!("{out:?}")
}
