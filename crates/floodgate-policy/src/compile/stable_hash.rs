//! A hash that is the same in every process and version (FNV-1a, 64 bits),
//! for counter keys shared through Redis by many instances and kept across
//! restarts and reloads.

/// An FNV-1a hasher with length-prefixed fields.
#[derive(Clone, Debug)]
pub struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl StableHasher {
    /// Adds raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Adds a field (its length first, so fields cannot run into each other).
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes(&(bytes.len() as u64).to_le_bytes()).bytes(bytes)
    }

    /// Adds a number.
    pub fn u64(&mut self, n: u64) -> &mut Self {
        self.bytes(&n.to_le_bytes())
    }

    /// The hash.
    pub fn finish(&self) -> u64 {
        self.0
    }
}
