//! Exponential backoff with full jitter: the wait before retry `n` is
//! uniform in `[0, min(max, base · 2ⁿ)]` (AWS's "full jitter").

use std::time::Duration;

use fastrand::Rng;

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
        let ceiling = self.ceiling(attempt).as_nanos().min(u128::from(u64::MAX)) as u64;
        Duration::from_nanos(rng.u64(..=ceiling))
    }
}
