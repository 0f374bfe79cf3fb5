//! Exact integer helpers shared by the algorithms.

use std::time::Duration;

/// `x / d`, taking the fast 64-bit path when `x` fits in 64 bits.
#[inline]
pub(crate) fn div(x: u128, d: u64) -> u128 {
    debug_assert!(d != 0);
    if d == 1 {
        x
    } else if x <= u64::MAX as u128 {
        ((x as u64) / d) as u128
    } else {
        x / d as u128
    }
}

/// `ceil(x / d)`.
#[inline]
pub(crate) fn div_ceil(x: u128, d: u64) -> u128 {
    debug_assert!(d != 0);
    if d == 1 {
        x
    } else if x <= u64::MAX as u128 {
        (x as u64).div_ceil(d) as u128
    } else {
        x.div_ceil(d as u128)
    }
}

/// Saturating conversion to `u64`.
#[inline]
pub(crate) fn sat64(x: u128) -> u64 {
    if x > u64::MAX as u128 {
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
