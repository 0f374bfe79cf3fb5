//! Exact integer helpers shared by the algorithms.

use std::time::Duration;

/// `x / d`, taking the fast 64-bit path when `x` fits in 64 bits.
#[inline]
pub(crate) fn div(x: u128, d: u64) -> u128 {
    debug_assert!(d != 0);
    if d == 1 {
        x
    } else if x <= u128::from(u64::MAX) {
        u128::from((x as u64) / d)
    } else {
        x / u128::from(d)
    }
}

/// `ceil(x / d)`.
#[inline]
pub(crate) fn div_ceil(x: u128, d: u64) -> u128 {
    debug_assert!(d != 0);
    if d == 1 {
        x
    } else if x <= u128::from(u64::MAX) {
        u128::from((x as u64).div_ceil(d))
    } else {
        x.div_ceil(u128::from(d))
    }
}

/// Saturating conversion to `u64`.
#[inline]
pub(crate) fn sat64(x: u128) -> u64 {
    if x > u128::from(u64::MAX) {
        u64::MAX
    } else {
        x as u64
    }
}

/// Nanoseconds to a `Duration`, saturating.
#[inline]
pub(crate) fn nanos(x: u128) -> Duration {
    Duration::from_nanos(sat64(x))
}

/// Greatest common divisor.
pub(crate) const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// Division by a divisor fixed at configuration time, by multiplication:
/// two multiplications and one correction instead of a hardware divide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: u64,
    /// `floor((2^64 − 1) / d)`.
    m: u64,
}

impl Divisor {
    /// `d` must not be zero.
    pub(crate) const fn new(d: u64) -> Divisor {
        Divisor { d, m: u64::MAX / d }
    }

    /// `floor(x / d)`, exact for every `x`.
    #[inline]
    pub(crate) fn div(&self, x: u64) -> u64 {
        // q ∈ {x/d − 1, x/d} because m·d > 2^64 − 1 − d: one correction.
        let q = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        if x - q * self.d >= self.d { q + 1 } else { q }
    }

    /// `ceil(x / d)`.
    #[inline]
    pub(crate) fn div_ceil(&self, x: u64) -> u64 {
        let q = self.div(x);
        if q * self.d < x { q + 1 } else { q }
    }

    /// `floor(x / d)` for a 128-bit `x`.
    #[inline]
    pub(crate) fn div_wide(&self, x: u128) -> u128 {
        if x <= u128::from(u64::MAX) {
            u128::from(self.div(x as u64))
        } else {
            x / u128::from(self.d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Divisor;

    #[test]
    fn division_by_multiplication_is_exact() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut divisors: Vec<u64> = vec![
            1,
            2,
            3,
            7,
            10,
            1000,
            16_666,
            1 << 32,
            u64::MAX - 1,
            u64::MAX,
        ];
        divisors.extend(
            (0..200)
                .map(|_| next() >> (next() % 64))
                .filter(|&d| d != 0),
        );
        for d in divisors {
            let div = Divisor::new(d);
            let mut xs = vec![0, 1, d - 1, d, d.wrapping_add(1), u64::MAX, u64::MAX - 1];
            xs.extend((0..200).map(|_| next() >> (next() % 64)));
            for x in xs {
                assert_eq!(div.div(x), x / d, "{x} / {d}");
                assert_eq!(div.div_ceil(x), x.div_ceil(d), "ceil {x} / {d}");
                assert_eq!(
                    div.div_wide(u128::from(x) * 3),
                    (u128::from(x) * 3) / u128::from(d)
                );
            }
        }
    }
}
