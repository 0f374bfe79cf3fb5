//! The pause before reconnecting to the xDS server, computed as
//! envoyproxy/ratelimit computes it (the Go package `jpillora/backoff`):
//! `initial × factor^attempt`, drawn at random between `initial` and that
//! when jittered, kept within `[initial, max]`. With its defaults (a
//! factor of 0.5) every pause is the initial one.

use std::time::Duration;

use crate::settings::Backoff;

/// The pauses of one run of failed attempts.
pub(super) struct Pauses {
    backoff: Backoff,
    attempt: i32,
}

impl Pauses {
    /// Pauses as `backoff` says, from the first attempt.
    pub(super) fn new(backoff: Backoff) -> Self {
        Pauses {
            backoff,
            attempt: 0,
        }
    }

    /// The pause before the next attempt.
    pub(super) fn next(&mut self) -> Duration {
        let b = &self.backoff;
        let min = b.initial.as_secs_f64();
        let max = b.max.as_secs_f64().max(min);
        let mut d = min * b.factor.powi(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        if b.jitter {
            d = fastrand::f64() * (d - min) + min;
        }
        Duration::from_secs_f64(d.clamp(min, max))
    }

    /// Starts over (a stream got an answer).
    pub(super) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pauses(factor: f64, jitter: bool) -> Pauses {
        Pauses::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(5),
            factor,
            jitter,
        })
    }

    /// envoyproxy/ratelimit's default factor (0.5) keeps every pause at
    /// the initial one; a factor of 2 doubles it up to the maximum.
    #[test]
    fn pauses_follow_jpillora_backoff() {
        let mut p = pauses(0.5, true);
        assert!((0..5).all(|_| p.next() == Duration::from_secs(1)));
        let mut p = pauses(2.0, false);
        let secs: Vec<u64> = (0..5).map(|_| p.next().as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 5, 5]);
        p.reset();
        assert_eq!(p.next(), Duration::from_secs(1));
        let mut p = pauses(2.0, true);
        for _ in 0..5 {
            let d = p.next();
            assert!(
                d >= Duration::from_secs(1) && d <= Duration::from_secs(5),
                "{d:?}"
            );
        }
    }
}
