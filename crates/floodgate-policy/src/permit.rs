//! [`Permit`]: the name of one acquisition of concurrency limits.

use std::fmt;
use std::str::FromStr;

use rand::Rng;

/// Names the concurrency units one admitted request holds: 128 bits drawn
/// from a cryptographically secure generator (the thread's ChaCha12
/// generator, seeded and reseeded from the operating system), so that
/// nobody can name a permit they were not given. The engine draws one per
/// evaluated request that matches a concurrency limit; a backend records
/// each permit with the counter key and the units it took, and a release
/// gives back at most those units of that key, once.
///
/// Written as a decimal number (`Display`, `FromStr`), the form the HTTP
/// API hands out and takes back. [`Permit::NONE`] (0) is the permit of an
/// item that holds no concurrency limit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Permit {
    // Two words rather than a `u128`: an `Item` stays 8-byte aligned.
    hi: u64,
    lo: u64,
}

impl Permit {
    /// No permit (an item of a limit that holds none).
    pub const NONE: Permit = Permit { hi: 0, lo: 0 };

    /// A fresh permit, never [`NONE`](Self::NONE).
    pub fn random() -> Permit {
        let mut rng = rand::rng();
        loop {
            let p = Permit::from(rng.random::<u128>());
            if !p.is_none() {
                return p;
            }
        }
    }

    /// Whether this is [`NONE`](Self::NONE).
    #[inline]
    pub fn is_none(self) -> bool {
        self.hi == 0 && self.lo == 0
    }

    /// The permit as a number.
    #[inline]
    pub fn get(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }
}

impl From<u128> for Permit {
    #[inline]
    fn from(v: u128) -> Self {
        Permit {
            hi: (v >> 64) as u64,
            lo: v as u64,
        }
    }
}

impl From<u64> for Permit {
    #[inline]
    fn from(v: u64) -> Self {
        Permit::from(u128::from(v))
    }
}

impl fmt::Display for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.get(), f)
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Permit({:#x})", self.get())
    }
}

/// Why a permit's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a permit is the decimal number a check answered (1 to 39 digits, not 0)")]
pub struct BadPermit;

impl FromStr for Permit {
    type Err = BadPermit;

    /// The decimal form (as [`Display`](fmt::Display) writes it); 0, signs,
    /// spaces and anything beyond 128 bits are refused.
    fn from_str(s: &str) -> Result<Self, BadPermit> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BadPermit);
        }
        let p = Permit::from(s.parse::<u128>().map_err(|_| BadPermit)?);
        if p.is_none() {
            return Err(BadPermit);
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_refuses_what_is_no_permit() {
        for v in [
            1u128,
            42,
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
            u128::MAX,
        ] {
            let p = Permit::from(v);
            assert_eq!(p.get(), v);
            assert_eq!(p.to_string().parse::<Permit>(), Ok(p));
        }
        for bad in ["", "0", "000", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0"] {
            assert_eq!(bad.parse::<Permit>(), Err(BadPermit), "{bad:?}");
        }
        let too_big = format!("{}0", u128::MAX);
        assert_eq!(too_big.parse::<Permit>(), Err(BadPermit));
        assert_eq!("007".parse::<Permit>(), Ok(Permit::from(7u64)));
    }

    /// Drawn at random: distinct, never NONE, and spread over all 128
    /// bits (about half of them set on average, both words used).
    #[test]
    fn random_permits_use_all_their_bits() {
        let ps: Vec<Permit> = (0..1_000).map(|_| Permit::random()).collect();
        let mut sorted = ps.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ps.len());
        assert!(ps.iter().all(|p| !p.is_none()));
        let ones: u32 = ps.iter().map(|p| p.get().count_ones()).sum();
        let mean = f64::from(ones) / ps.len() as f64;
        assert!((60.0..68.0).contains(&mean), "{mean}");
        assert!(ps.iter().any(|p| p.hi != 0) && ps.iter().any(|p| p.lo != 0));
    }
}
