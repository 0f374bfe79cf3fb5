//! The identity a counter is held under in memory (see [`KeyId`]).

use std::hash::{BuildHasher, Hasher};

use siphasher::sip::SipHasher13;

/// The identity a counter is held under in memory: a 64-bit keyed hash of
/// its key (SipHash-1-3 under a key drawn at random per store).
///
/// An entry then holds no pointer to chase and no allocation of its own,
/// and 8 bytes where the key's bytes could be any length. Two distinct keys
/// share a counter only if their identities are equal: for `n` keys held
/// at once the chance that any two of them do is about n²/2⁶⁵ — 3·10⁻⁸ at
/// a million keys, 3·10⁻⁶ at ten million, 3·10⁻⁴ at 10⁸ — and the hash
/// key is secret, so clients cannot aim at a collision. Two keys that do
/// collide share one counter: each is decided on their summed use, so
/// both may be denied earlier than their own use alone would make them,
/// never later.
pub type KeyId = u64;

/// The hash key of a store's [`KeyId`]s.
pub(super) struct KeyIds {
    k0: u64,
    k1: u64,
    /// The identity's bits kept: all of them, but for tests that force
    /// collisions.
    mask: u64,
}

impl KeyIds {
    /// A secret hash key, drawn per store.
    pub(super) fn random() -> Self {
        // `RandomState` is seeded from the OS once per process and differs
        // per instance; its hashes of two constants are two secret words.
        let seed = std::hash::RandomState::new();
        KeyIds {
            k0: seed.hash_one(0x243f_6a88_85a3_08d3_u64),
            k1: seed.hash_one(0x1319_8a2e_0370_7344_u64),
            mask: u64::MAX,
        }
    }

    /// Identities of only `bits` bits, so that distinct keys collide.
    #[cfg(test)]
    pub(super) fn truncated(bits: u32) -> Self {
        KeyIds {
            mask: (1 << bits) - 1,
            ..Self::random()
        }
    }

    /// The identity of `key`.
    #[inline]
    pub(super) fn of(&self, key: &[u8]) -> KeyId {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(key);
        h.finish() & self.mask
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate::algorithms::{AnyLimit, FixedWindow};
    use floodgate::{Apply, Decision, Outcome, StoreConfig, Timestamp};

    use super::KeyIds;
    use crate::backend::{Item, MemoryBackend, SyncBackend};
    use crate::permit::Permit;

    fn decide(b: &MemoryBackend, limit: &AnyLimit, key: &[u8]) -> Decision {
        let item = Item {
            group: key,
            key,
            limit,
            cost: 1,
            on_failure: None,
            sync: None,
            permit: Permit::NONE,
            zone: None,
        };
        let mut out = [Decision {
            outcome: Outcome::Never,
            limit: 0,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
        }];
        b.decide_now(
            &[item],
            Timestamp::from_secs(1_700_000_000),
            Apply::Commit,
            &mut out,
        )
    }

    /// Distinct keys collide as often as [`KeyId`](super::KeyId) states:
    /// about n²/2^(b+1) pairs among `n` keys of `b`-bit identities (here
    /// 10 000 keys and 20 bits: 47.7 pairs expected, within five standard
    /// deviations).
    #[test]
    fn collisions_are_as_rare_as_stated() {
        let ids = KeyIds::truncated(20);
        let n = 10_000u64;
        let mut all: Vec<u64> = (0..n).map(|k| ids.of(format!("k{k}").as_bytes())).collect();
        all.sort_unstable();
        let mut pairs = 0u64;
        let mut run = 1u64;
        for w in all.windows(2) {
            if w[0] == w[1] {
                run += 1;
            } else {
                pairs += run * (run - 1) / 2;
                run = 1;
            }
        }
        pairs += run * (run - 1) / 2;
        let expected = (n * (n - 1) / 2) as f64 / f64::from(1 << 20);
        let sd = expected.sqrt();
        assert!(
            (pairs as f64 - expected).abs() <= 5.0 * sd,
            "{pairs} pairs, {expected:.1} expected"
        );
    }

    /// Two keys whose identities collide share one counter: the second is
    /// decided on both keys' use (denied here), as documented on
    /// [`KeyId`](super::KeyId); with whole identities they are apart.
    #[test]
    fn colliding_keys_share_a_counter() {
        let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3600)).unwrap());
        let mut b = MemoryBackend::new(StoreConfig::with_capacity(1000)).unwrap();
        b.ids = KeyIds::truncated(4);
        let keys: Vec<Vec<u8>> = (0..100).map(|k| format!("user_{k}").into_bytes()).collect();
        let (a, c) = (0..keys.len())
            .flat_map(|i| (0..i).map(move |j| (j, i)))
            .find(|&(j, i)| b.ids.of(&keys[j]) == b.ids.of(&keys[i]))
            .expect("17 of 100 keys share 4 bits");
        assert!(decide(&b, &limit, &keys[a]).is_allowed());
        assert!(decide(&b, &limit, &keys[c]).is_denied());
        let whole = MemoryBackend::new(StoreConfig::with_capacity(1000)).unwrap();
        for k in &keys {
            assert!(decide(&whole, &limit, k).is_allowed());
        }
        assert_eq!(whole.store().len(), keys.len());
    }
}
