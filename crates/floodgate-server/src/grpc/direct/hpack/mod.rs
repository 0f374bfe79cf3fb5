//! HPACK (RFC 7541), the decoding half: a connection's header blocks read
//! into fields, borrowed in place where they can be, with no allocation
//! per block once the decoder's buffers have grown to the blocks it reads.
//! Any input is safe: what RFC 7541 does not allow is an [`HpackError`],
//! the connection's COMPRESSION_ERROR.

mod huffman;
mod huffman_codes;
mod reader;
#[cfg(test)]
mod roundtrip;
mod table;
#[cfg(test)]
mod tests;

use std::ops::Range;

use reader::Reader;
use table::{STATIC, Table};

/// Why a header block cannot be decoded: the connection's
/// COMPRESSION_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ends inside an integer.
    #[error("HPACK: the block ends inside an integer")]
    IntegerTruncated,
    /// An integer does not fit in 32 bits, or runs past 5 continuation
    /// bytes.
    #[error("HPACK: an integer is larger than 32 bits")]
    IntegerOverflow,
    /// A string's length runs past the end of the block.
    #[error("HPACK: a string of {length} bytes runs past the end of the block")]
    StringTruncated {
        /// The length the string announces.
        length: u32,
    },
    /// A field refers to index 0.
    #[error("HPACK: index 0 refers to no field")]
    ZeroIndex,
    /// A field refers to an index beyond the static and dynamic tables.
    #[error("HPACK: index {index} is beyond the tables' {entries} entries")]
    IndexOutOfRange {
        /// The index referred to.
        index: u32,
        /// The entries of the static and dynamic tables.
        entries: usize,
    },
    /// A Huffman-coded string contains the end-of-string symbol.
    #[error("HPACK: a Huffman-coded string contains EOS")]
    HuffmanEos,
    /// A Huffman-coded string ends with more than 7 bits of padding.
    #[error("HPACK: a Huffman-coded string has more than 7 bits of padding")]
    HuffmanPaddingTooLong,
    /// A Huffman-coded string ends with bits that are not the start of EOS.
    #[error("HPACK: a Huffman-coded string's padding is not all ones")]
    HuffmanPaddingNotEos,
    /// A dynamic table size update follows a field of the block.
    #[error("HPACK: a table size update after the start of a block")]
    SizeUpdateNotFirst,
    /// A dynamic table size update exceeds the size announced.
    #[error("HPACK: a table size update to {size} bytes, above the {largest} announced")]
    SizeUpdateTooLarge {
        /// The size asked for.
        size: u32,
        /// The size announced (SETTINGS_HEADER_TABLE_SIZE).
        largest: usize,
    },
    /// The caller refused a field (and the rest of the block).
    #[error("HPACK: the header list was refused")]
    Stopped,
}

/// An HPACK decoder of one connection: its dynamic table, and a scratch
/// buffer for Huffman-coded strings.
pub struct Decoder {
    table: Table,
    scratch: Vec<u8>,
}

/// A string as read: borrowed (from the block or the static table), or
/// Huffman-decoded into the scratch buffer.
enum Text<'b> {
    Borrowed(&'b [u8]),
    Scratch(Range<usize>),
}

impl<'b> Text<'b> {
    /// The string's bytes, `scratch` being the decoder's scratch buffer.
    fn bytes<'a>(&self, scratch: &'a [u8]) -> &'a [u8]
    where
        'b: 'a,
    {
        match self {
            Text::Borrowed(bytes) => bytes,
            Text::Scratch(range) => &scratch[range.clone()],
        }
    }
}

/// A literal field's name: a string, or a dynamic table entry's name.
enum Name<'b> {
    Text(Text<'b>),
    Dynamic(usize),
}

impl Decoder {
    /// A decoder whose dynamic table holds at most `max_table_size` bytes
    /// (what the connection announces in SETTINGS_HEADER_TABLE_SIZE). It
    /// allocates twice that for the table's entries.
    pub fn new(max_table_size: usize) -> Self {
        Decoder {
            table: Table::new(max_table_size),
            scratch: Vec::new(),
        }
    }

    /// Decodes one complete header block, calling `each(name, value)` for
    /// each field in order, as raw bytes. `each` may refuse a field
    /// (`Err(())`, e.g. a header list too large): decoding stops with
    /// [`HpackError::Stopped`]. After an error the table's state is
    /// undefined: the connection is over.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut each: impl FnMut(&[u8], &[u8]) -> Result<(), ()>,
    ) -> Result<(), HpackError> {
        let mut reader = Reader::new(block);
        self.size_updates(&mut reader)?;
        while let Some(first) = reader.peek() {
            if first >= 0x80 {
                let (name, value) = lookup(&self.table, reader.integer(7)?)?;
                each(name, value).map_err(|()| HpackError::Stopped)?;
            } else {
                self.literal(&mut reader, first, &mut each)?;
            }
        }
        Ok(())
    }

    /// The table size updates that may start a block (§4.2).
    fn size_updates(&mut self, reader: &mut Reader<'_>) -> Result<(), HpackError> {
        while reader.peek().is_some_and(|b| b & 0xe0 == 0x20) {
            let size = reader.integer(5)?;
            if size as usize > self.table.largest() {
                return Err(HpackError::SizeUpdateTooLarge {
                    size,
                    largest: self.table.largest(),
                });
            }
            self.table.set_max_size(size as usize);
        }
        Ok(())
    }

    /// Decodes a literal field (§6.2) starting with `first`, adding it
    /// to the dynamic table if it asks to be.
    fn literal(
        &mut self,
        reader: &mut Reader<'_>,
        first: u8,
        each: &mut impl FnMut(&[u8], &[u8]) -> Result<(), ()>,
    ) -> Result<(), HpackError> {
        self.scratch.clear();
        let (prefix, indexed) = match first {
            0x40.. => (6, true),
            0x20.. => return Err(HpackError::SizeUpdateNotFirst),
            // Without indexing (0000) and never indexed (0001) read alike.
            _ => (4, false),
        };
        let name = match reader.integer(prefix)? {
            0 => Name::Text(self.string(reader)?),
            index => self.name(index)?,
        };
        let value = self.string(reader)?;
        let (name, value) = if indexed {
            let name = self.own_name(name)?;
            let (name, value) = (name.bytes(&self.scratch), value.bytes(&self.scratch));
            self.table.insert(name, value);
            (name, value)
        } else {
            let name = match name {
                Name::Text(text) => text.bytes(&self.scratch),
                Name::Dynamic(index) => dynamic(&self.table, index)?.0,
            };
            (name, value.bytes(&self.scratch))
        };
        each(name, value).map_err(|()| HpackError::Stopped)
    }

    /// The name of entry `index` of the static then the dynamic table.
    fn name(&self, index: u32) -> Result<Name<'static>, HpackError> {
        let i = index as usize;
        if (1..=STATIC.len()).contains(&i) {
            return Ok(Name::Text(Text::Borrowed(STATIC[i - 1].0)));
        }
        lookup(&self.table, index)?;
        Ok(Name::Dynamic(i - STATIC.len() - 1))
    }

    /// The name of a field joining the table, out of the table: inserting
    /// may evict the entry it names (§4.4), so it is copied to the scratch
    /// buffer.
    fn own_name<'b>(&mut self, name: Name<'b>) -> Result<Text<'b>, HpackError> {
        let index = match name {
            Name::Text(text) => return Ok(text),
            Name::Dynamic(index) => index,
        };
        let (name, _) = dynamic(&self.table, index)?;
        let start = self.scratch.len();
        self.scratch.extend_from_slice(name);
        Ok(Text::Scratch(start..self.scratch.len()))
    }

    /// A string literal (§5.2): borrowed from the block, or Huffman-decoded
    /// into the scratch buffer.
    fn string<'b>(&mut self, reader: &mut Reader<'b>) -> Result<Text<'b>, HpackError> {
        let (huffman, bytes) = reader.string()?;
        if !huffman {
            return Ok(Text::Borrowed(bytes));
        }
        let start = self.scratch.len();
        huffman::decode(bytes, &mut self.scratch)?;
        Ok(Text::Scratch(start..self.scratch.len()))
    }
}

/// Entry `index` (from 1) of the static then the dynamic table (§2.3.3).
fn lookup(table: &Table, index: u32) -> Result<(&[u8], &[u8]), HpackError> {
    match index as usize {
        0 => Err(HpackError::ZeroIndex),
        i @ 1..=61 => Ok(STATIC[i - 1]),
        i => dynamic(table, i - STATIC.len() - 1),
    }
}

/// Entry `index` of the dynamic table (0 the newest).
#[inline]
fn dynamic(table: &Table, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
    table.get(index).ok_or_else(|| out_of_range(table, index))
}

/// The error of dynamic table entry `index` (0 the newest) beyond the
/// oldest.
fn out_of_range(table: &Table, index: usize) -> HpackError {
    HpackError::IndexOutOfRange {
        index: u32::try_from(index + STATIC.len() + 1).unwrap_or(u32::MAX),
        entries: STATIC.len() + table.len(),
    }
}
