//! Huffman-coded strings (RFC 7541 §5.2, Appendix B). The code is
//! canonical: codes of one length are consecutive numbers, in the order
//! of their symbols, and each length's codes follow the shorter ones. A
//! code of up to 8 bits (most of header text) is found by its first byte
//! in a table; a longer one by comparing the next 32 bits, left-aligned,
//! with the end of each length's codes, shortest first (the tables built
//! at compile time from [`CODES`]).

use super::HpackError;
use super::huffman_codes::CODES;

/// The end-of-string symbol, which a string must not contain.
const EOS: u16 = 256;
/// The longest code, in bits.
const LONGEST: u32 = 30;

/// The decoding tables, by code length (0 to 30).
struct Canonical {
    /// Where each length's codes end, left-aligned in 32 bits: a window
    /// below `limit[n]` (and not below `limit[n - 1]`) starts with a code
    /// of `n` bits. 2^32 for the longest.
    limit: [u64; 31],
    /// The first code of each length.
    first: [u32; 31],
    /// Where each length's symbols start in `symbols`.
    offset: [u16; 31],
    /// The symbols by code (by length, then symbol).
    symbols: [u16; 257],
    /// By a window's first byte: the symbol of 8 bits or fewer it starts
    /// with and its length, or length 0 when its code is longer (what
    /// header text is made of, mostly, found in one step).
    short: [(u16, u8); 256],
}

/// Builds the tables; fails to compile if the code is not canonical.
const fn canonical() -> Canonical {
    let mut t = Canonical {
        limit: [0; 31],
        first: [0; 31],
        offset: [0; 31],
        symbols: [0; 257],
        short: [(0, 0); 256],
    };
    let mut placed = 0;
    let mut next_code: u32 = 0;
    let mut len = 1;
    while len <= LONGEST as usize {
        next_code <<= 1;
        t.first[len] = next_code;
        t.offset[len] = placed as u16;
        let mut symbol = 0;
        while symbol < CODES.len() {
            if CODES[symbol].1 as usize == len {
                assert!(CODES[symbol].0 == next_code, "the code is canonical");
                t.symbols[placed] = symbol as u16;
                placed += 1;
                next_code += 1;
            }
            symbol += 1;
        }
        t.limit[len] = (next_code as u64) << (32 - len);
        len += 1;
    }
    assert!(
        placed == CODES.len() && t.limit[30] == 1 << 32,
        "the code is complete"
    );
    let mut byte = 0;
    while byte < 256 {
        let (symbol, len) = long_symbol(&t, (byte as u64) << 24);
        if len <= 8 {
            t.short[byte] = (symbol, len as u8);
        }
        byte += 1;
    }
    t
}

static CANONICAL: Canonical = canonical();

/// The symbol the 32-bit left-aligned `window` starts with, and its
/// length in bits.
fn symbol(window: u64) -> (u16, u32) {
    let (symbol, len) = CANONICAL.short[(window >> 24) as usize];
    if len != 0 {
        return (symbol, u32::from(len));
    }
    long_symbol(&CANONICAL, window)
}

/// [`symbol`], by comparing the window with each length's codes.
const fn long_symbol(t: &Canonical, window: u64) -> (u16, u32) {
    let mut len = 5;
    while window >= t.limit[len] {
        len += 1;
    }
    let code = (window >> (32 - len)) as u32;
    let index = t.offset[len] as usize + (code - t.first[len]) as usize;
    (t.symbols[index], len as u32)
}

/// Appends the decoding of `coded` to `out`. Refuses EOS in the string,
/// and padding that is longer than 7 bits or not the start of EOS (all
/// ones). Allocates only when `out` lacks room for the longest possible
/// decoding.
pub(super) fn decode(coded: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    // The shortest code is 5 bits.
    out.reserve(coded.len() * 8 / 5);
    // The bits read and not yet decoded, right-aligned (fewer than 38;
    // above `count`, bits already decoded until the byte's end).
    let mut bits: u64 = 0;
    let mut count: u32 = 0;
    for &byte in coded {
        bits = (bits << 8) | u64::from(byte);
        count += 8;
        while count >= 8 {
            let Some((symbol, len)) = next_symbol(bits, count) else {
                break;
            };
            if symbol == EOS {
                return Err(HpackError::HuffmanEos);
            }
            out.push(symbol as u8);
            count -= len;
        }
        bits &= (1 << count) - 1;
    }
    decode_tail(bits, count, out)
}

/// The symbol the last `count` bits of `bits` start with, and its length,
/// once they decide it: a code of 8 bits or fewer needs 8 bits, a longer
/// one 30.
#[inline]
fn next_symbol(bits: u64, count: u32) -> Option<(u16, u32)> {
    let (symbol, len) = CANONICAL.short[((bits >> (count - 8)) & 0xff) as usize];
    if len != 0 {
        return Some((symbol, u32::from(len)));
    }
    if count < LONGEST {
        return None;
    }
    let window = ((bits >> (count - LONGEST)) & 0x3fff_ffff) << 2;
    Some(long_symbol(&CANONICAL, window))
}

/// Decodes the last `count` bits (fewer than 30), then checks the padding.
fn decode_tail(mut bits: u64, mut count: u32, out: &mut Vec<u8>) -> Result<(), HpackError> {
    while count > 0 {
        // Padded with ones: a string's padding is the start of EOS.
        let pad = LONGEST - count;
        let (symbol, len) = symbol(((bits << pad) | ((1 << pad) - 1)) << 2);
        if len > count {
            if bits != (1 << count) - 1 {
                return Err(HpackError::HuffmanPaddingNotEos);
            }
            if count > 7 {
                return Err(HpackError::HuffmanPaddingTooLong);
            }
            return Ok(());
        }
        out.push(symbol as u8);
        count -= len;
        bits &= (1 << count) - 1;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Huffman-codes `text` (the reference encoder of the tests).
    pub(crate) fn encode(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut bits, mut count) = (0u64, 0u32);
        for &b in text {
            let (code, len) = CODES[usize::from(b)];
            bits = (bits << len) | u64::from(code);
            count += u32::from(len);
            while count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
            }
            bits &= (1 << count) - 1;
        }
        if count > 0 {
            let pad = 8 - count;
            out.push(((bits << pad) | ((1 << pad) - 1)) as u8);
        }
        out
    }

    fn decoded(coded: &[u8]) -> Result<Vec<u8>, HpackError> {
        let mut out = Vec::new();
        decode(coded, &mut out).map(|()| out)
    }

    #[test]
    fn every_symbol_decodes_alone_and_among_others() {
        for b in 0..=255u8 {
            assert_eq!(decoded(&encode(&[b])).unwrap(), [b], "symbol {b}");
        }
        let all: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        assert_eq!(decoded(&encode(&all)).unwrap(), all);
    }

    #[test]
    fn the_empty_string_is_no_bytes() {
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn eos_in_the_string_is_refused() {
        // '0' (00000), then EOS (30 ones), then 5 bits of padding.
        let coded = [0x07, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(decoded(&coded), Err(HpackError::HuffmanEos));
    }

    #[test]
    fn a_whole_byte_of_padding_is_refused() {
        // 'a' (00011) padded with 3 ones, then 8 more ones.
        assert_eq!(
            decoded(&[0x1f, 0xff]),
            Err(HpackError::HuffmanPaddingTooLong)
        );
    }

    #[test]
    fn padding_other_than_ones_is_refused() {
        // 'a' (00011) then 3 bits of zeros.
        assert_eq!(decoded(&[0x18]), Err(HpackError::HuffmanPaddingNotEos));
        // A whole byte that is not a code's end: '0' then 3 bits of a
        // longer code.
        assert_eq!(decoded(&[0x06]), Err(HpackError::HuffmanPaddingNotEos));
    }

    #[test]
    fn seven_bits_of_ones_are_padding() {
        // '0' (00000) then 3 ones; then 'a' and 7 bits across two bytes.
        assert_eq!(decoded(&[0x07]).unwrap(), b"0");
        assert_eq!(decoded(&encode(b"ab")).unwrap(), b"ab");
    }
}
