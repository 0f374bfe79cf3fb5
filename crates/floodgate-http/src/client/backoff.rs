//! Exponential backoff with full jitter: the wait before retry `n` is
//! uniform in `[0, min(max, base · 2ⁿ)]` (AWS's "full jitter").

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Backoff settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first retry's wait.
    pub base: Duration,
    /// The largest ceiling.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(20),
        }
    }
}

impl Backoff {
    /// The ceiling of retry `attempt` (0-based): `min(max, base · 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// A wait for retry `attempt`, uniform in `[0, ceiling]`.
    pub fn wait(&self, attempt: u32, rng: &mut Rng) -> Duration {
        let ceiling = self.ceiling(attempt).as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(rng.below(ceiling.saturating_add(1)))
    }
}

/// A small random generator (SplitMix64) seeded from the process's hash
/// keys: enough to decorrelate clients, no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Default for Rng {
    fn default() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        Rng(h.finish())
    }
}

impl Rng {
    /// A generator with a fixed seed (reproducible tests).
    pub fn seeded(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
