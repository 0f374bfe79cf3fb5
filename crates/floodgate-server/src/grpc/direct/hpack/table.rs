//! The static table (RFC 7541 Appendix A) and a connection's dynamic table
//! (§2.3.2, §4), whose storage is allocated once: entries' bytes in one
//! buffer of twice the largest table size, each entry contiguous, and a
//! ring of entry positions as long as the most entries the table can
//! hold. Inserting and evicting never allocate.

/// The static table's fields, index 1 first.
pub(super) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// What an entry adds to the table's size beyond its name and value.
const ENTRY_OVERHEAD: usize = 32;

/// Where an entry's bytes are in the buffer: its name, then its value.
#[derive(Clone, Copy, Default)]
struct Slot {
    offset: usize,
    name_len: usize,
    value_len: usize,
}

impl Slot {
    /// The bytes the entry holds in the buffer: at least one, so that
    /// entries never share a position and the oldest and newest tell
    /// whether the entries wrap around the buffer's end.
    fn footprint(&self) -> usize {
        (self.name_len + self.value_len).max(1)
    }

    fn end(&self) -> usize {
        self.offset + self.footprint()
    }
}

/// A dynamic table: entries newest first, evicted oldest first.
///
/// The entries' bytes lie in a buffer of twice the largest size, in
/// insertion order from the oldest, wrapping to the start when the next
/// entry does not fit before the end. The size bounds the bytes held, so
/// a new entry always fits: after the end of the newest entry, else
/// before the oldest (at the start, which the wrap left at least the
/// largest size away from the newest entry's end).
pub(super) struct Table {
    bytes: Box<[u8]>,
    /// Entry positions; the newest at `newest`, older ones before it
    /// (circularly).
    slots: Box<[Slot]>,
    newest: usize,
    len: usize,
    /// The entries' size (name + value + 32 each).
    size: usize,
    /// The size the encoder last set (at most `largest`).
    max_size: usize,
    /// The size announced to the peer: what the storage is sized for.
    largest: usize,
}

impl Table {
    /// An empty table of at most `largest` bytes, which is also its size
    /// until the encoder sets another.
    pub(super) fn new(largest: usize) -> Self {
        Table {
            bytes: vec![0; largest.saturating_mul(2)].into_boxed_slice(),
            slots: vec![Slot::default(); largest / ENTRY_OVERHEAD].into_boxed_slice(),
            newest: 0,
            len: 0,
            size: 0,
            max_size: largest,
            largest,
        }
    }

    /// How many entries the table holds.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entries' size (RFC 7541 §4.1).
    #[cfg(test)]
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// The size announced to the peer, above which the encoder may not set
    /// the table's.
    pub(super) fn largest(&self) -> usize {
        self.largest
    }

    /// Entry `index` (0 the newest): its name and value. `None` beyond the
    /// oldest.
    #[inline]
    pub(super) fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        if index >= self.len {
            return None;
        }
        // Older entries are before the newest, circularly.
        let at = match self.newest.checked_sub(index) {
            Some(at) => at,
            None => self.newest + self.slots.len() - index,
        };
        let slot = self.slots[at];
        let name_end = slot.offset + slot.name_len;
        Some((
            &self.bytes[slot.offset..name_end],
            &self.bytes[name_end..name_end + slot.value_len],
        ))
    }

    /// Sets the table's size (at most [`largest`](Self::largest), which
    /// the caller checks), evicting the oldest entries above it.
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        debug_assert!(max_size <= self.largest);
        self.max_size = max_size;
        self.evict_above(max_size);
    }

    /// Adds `name: value` as the newest entry, evicting the oldest to make
    /// room; an entry larger than the table empties it (§4.4).
    pub(super) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            self.evict_above(0);
            return;
        }
        self.evict_above(self.max_size - size);
        let mut slot = Slot {
            offset: 0,
            name_len: name.len(),
            value_len: value.len(),
        };
        slot.offset = self.place(slot.footprint());
        let name_end = slot.offset + name.len();
        self.bytes[slot.offset..name_end].copy_from_slice(name);
        self.bytes[name_end..name_end + value.len()].copy_from_slice(value);
        self.newest = (self.newest + 1) % self.slots.len();
        self.slots[self.newest] = slot;
        self.len += 1;
        self.size += size;
    }

    /// Where `footprint` bytes go: after the newest entry, else at the
    /// start. With the entries' bytes within the largest size, including
    /// the new entry's, the place is free (see [`Table`]).
    fn place(&self, footprint: usize) -> usize {
        if self.len == 0 {
            return 0;
        }
        let newest = self.slots[self.newest];
        let oldest = self.slots[(self.newest + self.slots.len() + 1 - self.len) % self.slots.len()];
        let wrapped = newest.offset < oldest.offset;
        let at = if wrapped || newest.end() + footprint <= self.bytes.len() {
            newest.end()
        } else {
            0
        };
        debug_assert!(
            if wrapped || at == 0 {
                at + footprint <= oldest.offset
            } else {
                at + footprint <= self.bytes.len()
            },
            "a new entry overlaps the oldest"
        );
        at
    }

    /// Evicts the oldest entries until the size is at most `size`.
    fn evict_above(&mut self, size: usize) {
        while self.size > size {
            let oldest = self.get(self.len - 1).map(|(n, v)| n.len() + v.len());
            self.size -= oldest.unwrap_or(0) + ENTRY_OVERHEAD;
            self.len -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(table: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..table.len())
            .map(|i| {
                let (n, v) = table.get(i).unwrap();
                (n.to_vec(), v.to_vec())
            })
            .collect()
    }

    #[test]
    fn entries_wrap_around_the_buffer_and_stay_whole() {
        // 100 bytes: room for two entries of 10 + 8 bytes (50 each).
        let mut table = Table::new(100);
        for i in 0..50u8 {
            let name = [b'a' + i % 26; 10];
            let value = [i; 8];
            table.insert(&name, &value);
            let (n, v) = table.get(0).unwrap();
            assert_eq!((n, v), (&name[..], &value[..]), "entry {i}");
            if i > 0 {
                assert_eq!(table.get(1).unwrap().1, [i - 1; 8], "entry {i}");
            }
            assert_eq!(table.size(), (table.len()) * 50);
        }
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn entries_of_mixed_sizes_never_overlap() {
        let mut table = Table::new(256);
        let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for i in 0..2_000usize {
            let name = vec![(i % 251) as u8; i * 7 % 90];
            let value = vec![(i % 241) as u8; i * 13 % 150];
            table.insert(&name, &value);
            model.insert(0, (name, value));
            while model
                .iter()
                .map(|(n, v)| n.len() + v.len() + 32)
                .sum::<usize>()
                > 256
            {
                model.pop();
            }
            assert_eq!(entries(&table), model, "after insertion {i}");
        }
    }

    #[test]
    fn a_smaller_size_evicts_the_oldest_and_an_oversized_entry_empties() {
        let mut table = Table::new(4096);
        table.insert(b"one", b"1");
        table.insert(b"two", b"2");
        table.set_max_size(36);
        assert_eq!(entries(&table), [(b"two".to_vec(), b"2".to_vec())]);
        table.insert(b"three", b"3");
        assert_eq!(table.len(), 0);
        assert_eq!(table.size(), 0);
    }

    #[test]
    fn a_table_too_small_for_any_entry_holds_none() {
        let mut table = Table::new(31);
        table.insert(b"", b"");
        assert_eq!(table.len(), 0);
        let mut table = Table::new(0);
        table.insert(b"a", b"b");
        assert_eq!(table.len(), 0);
    }
}
