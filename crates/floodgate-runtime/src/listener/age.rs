//! Connection ageing (gRPC's `MaxConnectionAge`): a connection older than
//! its listener's maximum age, give or take a tenth drawn per connection
//! (as grpc-go's jitter, so that connections opened together do not all
//! reconnect together), is asked to close (`GOAWAY` on HTTP/2, `Connection:
//! close` after the request in flight on HTTP/1.1): its calls in flight
//! complete, its client opens a new connection — reaching the instances
//! added since, where a balancer spreads connections, not calls. After
//! the grace, the connection is closed, whatever it still carries.
//!
//! One timer per connection, armed when it is accepted; nothing per
//! request.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use super::ConnectionLimits;

/// When a connection is asked to close for its age, and how long it then
/// has to finish.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ageing {
    /// When it is asked to close.
    pub at: Instant,
    /// How long it then has to finish its calls in flight before it is
    /// closed (zero: however long they take, as grpc-go's default).
    pub grace: Duration,
}

impl Ageing {
    /// The ageing of a connection accepted now under `limits` (none when
    /// the listener does not age its connections).
    pub(super) fn of(limits: &ConnectionLimits) -> Option<Ageing> {
        let age = limits.max_connection_age;
        if age.is_zero() {
            return None;
        }
        Some(Ageing {
            at: Instant::now() + jittered(age, random_unit()),
            grace: limits.max_connection_age_grace,
        })
    }
}

/// `age` moved by up to a tenth either way: `unit` in [0, 1) picks where
/// (grpc-go's ±10 %).
fn jittered(age: Duration, unit: f64) -> Duration {
    age.mul_f64(0.9 + 0.2 * unit)
}

/// A number in [0, 1), different for each call: from the standard
/// library's randomly keyed hasher (a fresh key for each, nothing to
/// share between threads).
fn random_unit() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_is_a_tenth_either_way() {
        let age = Duration::from_secs(100);
        assert_eq!(jittered(age, 0.0), Duration::from_secs(90));
        assert_eq!(jittered(age, 0.5), Duration::from_secs(100));
        assert!(jittered(age, 0.999_999) < Duration::from_secs(110));
        let draws: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        // Spread over the range, not one value.
        assert!(draws.iter().any(|u| *u < 0.2) && draws.iter().any(|u| *u > 0.8));
    }

    #[tokio::test]
    async fn no_age_no_ageing() {
        let mut limits = ConnectionLimits::default();
        assert!(Ageing::of(&limits).is_none());
        limits.max_connection_age = Duration::from_secs(10);
        limits.max_connection_age_grace = Duration::from_secs(2);
        let a = Ageing::of(&limits).unwrap();
        let left = a.at - Instant::now();
        assert!(left > Duration::from_secs(8) && left <= Duration::from_secs(11));
        assert_eq!(a.grace, Duration::from_secs(2));
    }
}
