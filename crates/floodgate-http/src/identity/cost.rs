//! A request's weighted cost: a decimal integer from a header or the
//! application, bounded.

use super::config::CostConfig;

/// The cost of a request whose cost source holds `value`: a decimal integer
/// from 1 to `max` as it is, larger ones as `max`, and anything else
/// (absent, empty, `0`, signs, not a number) as `default`.
///
/// ```
/// use floodgate_http::identity::{CostConfig, Source, cost_of};
///
/// let c = CostConfig {
///     source: Source::Header(http::HeaderName::from_static("x-request-cost")),
///     max: 100,
///     default: 1,
/// };
/// assert_eq!(cost_of(Some(b"7"), &c), 7);
/// assert_eq!(cost_of(Some(b"100000000000000000000000"), &c), 100);
/// assert_eq!(cost_of(Some(b"-3"), &c), 1);
/// assert_eq!(cost_of(None, &c), 1);
/// ```
pub fn cost_of(value: Option<&[u8]>, c: &CostConfig) -> u32 {
    let Some(digits) = value.map(<[u8]>::trim_ascii) else {
        return c.default;
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return c.default;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.saturating_mul(10).saturating_add((d - b'0') as u64);
    }
    match n {
        0 => c.default,
        n if n > c.max as u64 => c.max,
        n => n as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Source;

    #[test]
    fn bounds() {
        let c = CostConfig {
            source: Source::Extension("cost".into()),
            max: 50,
            default: 2,
        };
        let cost = |s: &str| cost_of(Some(s.as_bytes()), &c);
        assert_eq!(cost("1"), 1);
        assert_eq!(cost(" 50 "), 50);
        assert_eq!(cost("51"), 50);
        assert_eq!(cost("0"), 2);
        assert_eq!(cost("000"), 2);
        assert_eq!(cost("007"), 7);
        assert_eq!(cost(""), 2);
        assert_eq!(cost("+5"), 2);
        assert_eq!(cost("5.0"), 2);
        assert_eq!(cost("1e3"), 2);
        assert_eq!(cost("５"), 2);
        assert_eq!(cost(&"9".repeat(1000)), 50);
    }
}
