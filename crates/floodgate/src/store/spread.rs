//! Which shard a hash belongs to: shards of staggered sizes, so that their
//! tables do not all grow at once.
//!
//! A hash table doubles when it is 7/8 full, so it sits between 7/16 and
//! 7/8 full. Were the shards of equal size, they would all double at the
//! same number of keys and the whole store would swing between 44 % and
//! 87.5 % full (69 and 38 bytes a key for 32-byte entries). Instead the
//! shards' shares of the keys grow geometrically over one octave (the last
//! shard's share is twice the first's), so at any number of keys their
//! tables stand at evenly spread points of their growth: together they are
//! about 63 % full whatever the count (52–57 bytes a key for 32-byte
//! entries). Each shard's capacity is the same share of the store's.
//!
//! The shares are drawn from [`CLASSES`] size classes (2^(c/C) for class
//! `c` of `C`), each given a run of the [`SLICES`] slices of twelve hash
//! bits; with more shards than classes, each class is split evenly by ten
//! further bits.

/// The most size classes: enough for an even spread, few enough that each
/// has some 45–90 slices of [`SLICES`].
const CLASSES: usize = 64;
/// The slices of hash bits shared out among the classes.
const SLICES: usize = 1 << 12;
/// The class's slice: twelve bits below the table's tag bits (the top
/// seven) and above any bucket index.
const CLASS_SHIFT: u32 = 44;
/// The shard within its class: ten bits below those.
const WITHIN_SHIFT: u32 = 34;

/// Where each hash goes (see the module docs).
pub(crate) struct Spread {
    /// The first shard of each slice's class, in ascending runs (held
    /// inline, and shifted already: fewer instructions per decision).
    first_of: [u16; SLICES],
    /// Slices per class.
    slices: Box<[u16]>,
    /// log2 of the shards per class.
    split: u32,
    /// The shards per class, less one: the mask of the bits choosing among
    /// them.
    within: usize,
}

impl Spread {
    /// The spread over `shards` shards, a power of two up to 2^16.
    pub(crate) fn new(shards: usize) -> Self {
        let classes = shards.min(CLASSES);
        let bound = |c: usize| {
            let share = (c as f64 / classes as f64).exp2() - 1.0;
            (share * SLICES as f64).round() as usize
        };
        let split = (shards / classes).trailing_zeros();
        let mut first_of = [0u16; SLICES];
        let mut slices = Vec::with_capacity(classes);
        for c in 0..classes {
            let run = bound(c)..bound(c + 1);
            slices.push(run.len() as u16);
            first_of[run].fill((c << split) as u16);
        }
        Spread {
            first_of,
            slices: slices.into(),
            split,
            within: (1 << split) - 1,
        }
    }

    /// The shard of `hash`.
    #[inline]
    pub(crate) fn shard_of(&self, hash: u64) -> usize {
        let first = self.first_of[(hash >> CLASS_SHIFT) as usize & (SLICES - 1)] as usize;
        first | (hash >> WITHIN_SHIFT) as usize & self.within
    }

    /// Each shard's capacity: its share of `capacity`, rounded so that
    /// they add up to `capacity` (but at least one each). Also about the
    /// keys each holds when the store holds `capacity`.
    pub(crate) fn caps(&self, capacity: usize) -> impl Iterator<Item = usize> + '_ {
        let whole = (SLICES as u128) << self.split;
        // Shard boundaries, in slices of a class divided among its shards.
        let bounds = self
            .slices
            .iter()
            .flat_map(|&s| std::iter::repeat_n(u128::from(s), 1 << self.split));
        bounds.scan(0u128, move |done, width| {
            let upto = |slices: u128| (capacity as u128 * slices).div_ceil(whole);
            let cap = upto(*done + width) - upto(*done);
            *done += width;
            Some((cap as usize).max(1))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{CLASS_SHIFT, SLICES, Spread};

    /// Every shard is reached, its share follows its class, and the
    /// capacities add up to the store's.
    #[test]
    fn shares_grow_over_one_octave() {
        for shards in [1, 2, 8, 64, 256, 1 << 16] {
            let spread = Spread::new(shards);
            let mut seen = vec![0u64; shards];
            for slice in 0..SLICES as u64 {
                for within in 0..1024u64 {
                    let hash = (slice << CLASS_SHIFT) | (within << super::WITHIN_SHIFT);
                    seen[spread.shard_of(hash)] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n > 0), "{shards} shards");
            if shards >= 64 {
                let (first, last) = (seen[0], seen[shards - 1]);
                let ratio = last as f64 / first as f64;
                assert!((1.9..2.1).contains(&ratio), "{shards}: {ratio}");
            }
            let caps: Vec<usize> = spread.caps(1_000_000).collect();
            assert_eq!(caps.len(), shards);
            let total: usize = caps.iter().sum();
            assert_eq!(total, 1_000_000.max(shards));
        }
    }
}
