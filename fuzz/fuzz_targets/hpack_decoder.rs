//! Header blocks, any bytes, decoded in sequence by one HPACK decoder (as
//! one connection's): the decoder never panics, and stops at its first
//! error (the connection's end). The first byte picks the table size
//! announced; then each block is a length byte and that many bytes.
#![no_main]

use floodgate_server::internals::HpackDecoder;
use libfuzzer_sys::fuzz_target;

/// Table sizes: none, too small for most entries, RFC 7541's C.5 and the
/// default.
const SIZES: [usize; 4] = [0, 40, 256, 4096];

/// The header list size past which the callback refuses the block.
const LIST_LIMIT: usize = 16 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&size, mut rest)) = data.split_first() else {
        return;
    };
    let mut decoder = HpackDecoder::new(SIZES[usize::from(size) % SIZES.len()]);
    while let Some((&len, tail)) = rest.split_first() {
        let (block, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let mut list = 0;
        let decoded = decoder.decode(block, |name, value| {
            list += name.len() + value.len() + 32;
            if list > LIST_LIMIT { Err(()) } else { Ok(()) }
        });
        if decoded.is_err() {
            return;
        }
    }
});
