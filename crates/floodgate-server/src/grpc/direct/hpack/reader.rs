//! The primitives of a header block: integers with an N-bit prefix
//! (RFC 7541 §5.1) and string literals (§5.2), read with every length
//! checked against the block.

use super::HpackError;

/// The most continuation bytes an integer may take: enough for any value
/// of 32 bits.
const MOST_CONTINUATIONS: usize = 5;

/// A cursor over one header block.
pub(super) struct Reader<'b> {
    block: &'b [u8],
}

impl<'b> Reader<'b> {
    pub(super) fn new(block: &'b [u8]) -> Self {
        Reader { block }
    }

    /// The next byte, not consumed.
    pub(super) fn peek(&self) -> Option<u8> {
        self.block.first().copied()
    }

    /// An integer whose first byte keeps its value in the low `prefix`
    /// bits (the high ones being the representation's pattern).
    #[inline]
    pub(super) fn integer(&mut self, prefix: u32) -> Result<u32, HpackError> {
        let (&first, mut rest) = self
            .block
            .split_first()
            .ok_or(HpackError::IntegerTruncated)?;
        let max_prefix = (1u32 << prefix) - 1;
        let mut value = u64::from(u32::from(first) & max_prefix);
        if value < u64::from(max_prefix) {
            self.block = rest;
            return Ok(value as u32);
        }
        for shift in (0..MOST_CONTINUATIONS as u32).map(|i| i * 7) {
            let (&byte, tail) = rest.split_first().ok_or(HpackError::IntegerTruncated)?;
            rest = tail;
            value += u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                self.block = rest;
                return u32::try_from(value).map_err(|_| HpackError::IntegerOverflow);
            }
        }
        Err(HpackError::IntegerOverflow)
    }

    /// A string literal: whether it is Huffman-coded, and its bytes as
    /// sent.
    pub(super) fn string(&mut self) -> Result<(bool, &'b [u8]), HpackError> {
        let huffman = self.peek().is_some_and(|b| b & 0x80 != 0);
        let length = self.integer(7)?;
        if length as usize > self.block.len() {
            return Err(HpackError::StringTruncated { length });
        }
        let (bytes, rest) = self.block.split_at(length as usize);
        self.block = rest;
        Ok((huffman, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn integer(bytes: &[u8], prefix: u32) -> Result<u32, HpackError> {
        let mut reader = Reader::new(bytes);
        let value = reader.integer(prefix)?;
        assert!(reader.peek().is_none(), "the whole integer is read");
        Ok(value)
    }

    #[test]
    fn the_rfc_examples_read() {
        // C.1.1 to C.1.3.
        assert_eq!(integer(&[0b0000_1010], 5), Ok(10));
        assert_eq!(
            integer(&[0b0001_1111, 0b1001_1010, 0b0000_1010], 5),
            Ok(1337)
        );
        assert_eq!(integer(&[42], 8), Ok(42));
    }

    #[test]
    fn the_largest_integer_fits_and_one_more_does_not() {
        // 2^32 - 1 = 127 + 0xffff_ff80, 7 bits at a time.
        let max = [0x7f, 0x80, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(integer(&max, 7), Ok(u32::MAX));
        let above = [0x7f, 0x81, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(integer(&above, 7), Err(HpackError::IntegerOverflow));
    }

    #[test]
    fn a_sixth_continuation_byte_is_refused() {
        // Zeros: a value that fits, spelled too long.
        let long = [0x7f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(integer(&long, 7), Err(HpackError::IntegerOverflow));
        assert_eq!(integer(&long[..6], 7), Err(HpackError::IntegerOverflow));
        assert_eq!(integer(&[0x7f, 0x80, 0x80, 0x80, 0x80, 0x00], 7), Ok(127));
    }

    #[test]
    fn a_block_ending_inside_an_integer_is_refused() {
        assert_eq!(integer(&[], 7), Err(HpackError::IntegerTruncated));
        assert_eq!(integer(&[0x7f, 0x80], 7), Err(HpackError::IntegerTruncated));
    }

    #[test]
    fn a_string_longer_than_the_block_is_refused() {
        let mut reader = Reader::new(&[0x03, b'a', b'b']);
        assert_eq!(
            reader.string(),
            Err(HpackError::StringTruncated { length: 3 })
        );
        let mut reader = Reader::new(&[0x82, 0xff, 0xff, b'x']);
        assert_eq!(reader.string(), Ok((true, &[0xff, 0xff][..])));
        assert_eq!(reader.peek(), Some(b'x'));
    }
}
