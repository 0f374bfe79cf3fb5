//! Permit identities: one per evaluated response holding a concurrency
//! limit, passed to the backend with the decision and again with the
//! release (see [`Item::permit`](crate::Item::permit)).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out permit ids: a random 64-bit base per engine plus a counter.
///
/// Ids of one engine never repeat (before 2⁶⁴ of them); ids of two engines
/// (in one process or several) collide only if their ranges overlap,
/// about `n / 2⁶³` for `n` ids handed out by both, since each base is drawn
/// independently from the OS's randomness.
#[derive(Debug)]
pub(crate) struct PermitIds {
    base: u64,
    next: AtomicU64,
}

impl PermitIds {
    /// Ids from a fresh random base.
    pub fn random() -> Self {
        // `RandomState` keys come from the OS's random source and differ
        // per instance; its hash of a constant is a secret 64-bit word.
        let base = std::hash::RandomState::new().hash_one(0xa409_3822_299f_31d0_u64);
        Self::starting_at(base)
    }

    /// Ids from `base` on.
    pub fn starting_at(base: u64) -> Self {
        PermitIds {
            base,
            next: AtomicU64::new(0),
        }
    }

    /// The next id; never 0 (the permit of items that hold none).
    pub fn next(&self) -> u64 {
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let id = self.base.wrapping_add(n);
            if id != 0 {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_never_zero() {
        let ids = PermitIds::starting_at(u64::MAX - 1);
        let got: Vec<u64> = (0..4).map(|_| ids.next()).collect();
        assert_eq!(got, [u64::MAX - 1, u64::MAX, 1, 2]);
    }

    #[test]
    fn engines_start_at_unrelated_bases() {
        let (a, b) = (PermitIds::random(), PermitIds::random());
        assert_ne!(a.next(), b.next());
    }
}
