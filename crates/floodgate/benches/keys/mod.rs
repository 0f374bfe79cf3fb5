//! The key stream the benchmarks share: `STREAM` keys drawn from a fixed
//! xorshift sequence, reduced modulo the key count, so that every
//! benchmark (and every limiter in it) sees the same keys in the same order.

/// Keys in a stream (a power of two: indices wrap with a mask).
pub(crate) const STREAM: usize = 1 << 20;

/// The stream over `keys` distinct keys.
pub(crate) fn stream(keys: u64) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..STREAM)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % keys
        })
        .collect()
}
