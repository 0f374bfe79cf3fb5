//! Time units and durations as configuration files spell them.

use std::fmt;
use std::time::Duration;

/// Envoy's rate limit units, numbered as in the RLS protocol
/// (`RateLimitResponse.RateLimit.Unit`). Window lengths are those of
/// envoyproxy/ratelimit: a MONTH is 30 days and a YEAR 365 days, and windows
/// are aligned to the Unix epoch (so WEEK windows start on Thursdays).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days.
    Month = 5,
    /// 365 days.
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's window length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The window length.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// The unit named `name`, case-insensitively (`second` ... `year`).
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit with protocol number `n` (`UNKNOWN` = 0 is none).
    pub fn from_number(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| *u as i32 == n)
    }

    /// The protocol name (`SECOND` ... `WEEK`).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a duration, with the one grammar every Floodgate setting and
/// policy uses: `0`; Go's `time.ParseDuration` syntax, which
/// envoyproxy/ratelimit's settings use (one or more decimal numbers, each
/// with an optional fraction and a unit: `ns`, `us`/`µs`, `ms`, `s`, `m`,
/// `h`; `250ms`, `1.5s`, `1m30s`, `2h45m`); the units `d` and `w`; or a
/// unit name (`second`, `minute`, ... `year`). Negative durations are
/// refused; fractions finer than a nanosecond are cut, as Go does.
///
/// ```
/// use floodgate_policy::unit::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
/// assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
/// assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("day"), Some(Duration::from_secs(86_400)));
/// assert_eq!(parse_duration("5 parsecs"), None);
/// ```
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Some(u) = Unit::parse(text) {
        return Some(u.duration());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if (int_part.is_empty() && frac_part.is_empty()) || int_part.len() > 30 {
            return None;
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let nanos_per: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "w" => 604_800_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        total = total.checked_add(whole.checked_mul(nanos_per)?)?;
        let mut scale = nanos_per;
        for d in frac_part.bytes() {
            if scale < 10 {
                break;
            }
            scale /= 10;
            total = total.checked_add(u128::from(d - b'0') * scale)?;
        }
    }
    u64::try_from(total).ok().map(Duration::from_nanos)
}

/// Reads a duration value, the one way every setting, section and policy
/// does: [`parse_duration`]'s grammar, and zero only where `allow_zero`
/// (where `0` means "none" or "off"). The error says what was expected
/// and what was found.
///
/// ```
/// use floodgate_policy::unit::read_duration;
/// use std::time::Duration;
/// assert_eq!(read_duration("1m30s", false), Ok(Duration::from_secs(90)));
/// assert_eq!(read_duration("0", true), Ok(Duration::ZERO));
/// assert_eq!(read_duration("0s", false).unwrap_err(), "expected a duration above zero, found `0s`");
/// ```
pub fn read_duration(text: &str, allow_zero: bool) -> Result<Duration, String> {
    let found = crate::yaml::excerpt(text.trim());
    match parse_duration(text) {
        Some(d) if d.is_zero() && !allow_zero => {
            Err(format!("expected a duration above zero, found `{found}`"))
        }
        Some(d) => Ok(d),
        None => Err(format!(
            "expected a duration such as {}500ms, 1.5s, 1m30s, 1d or minute, found `{found}`",
            if allow_zero { "0, " } else { "" }
        )),
    }
}

/// Formats a duration the way [`parse_duration`] reads it (`5m`, `1500ms`).
pub fn format_duration(d: Duration) -> String {
    let n = d.as_nanos();
    for (suffix, per) in [
        ("w", 604_800_000_000_000u128),
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if n >= per && n % per == 0 {
            return format!("{}{suffix}", n / per);
        }
    }
    format!("{n}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A duration value says what it expected, wherever it is read.
    #[test]
    fn duration_values_name_what_they_expected() {
        use crate::yaml::Document;
        let doc = Document::parse(&"f.yaml".into(), "{a: 0, b: {c: 1}, d: soon, e: 2m}").unwrap();
        let map = doc.root().map().unwrap();
        let node = |k| map.get(k).unwrap();
        assert_eq!(node("a").duration(true).unwrap(), Duration::ZERO);
        assert_eq!(node("e").duration(false).unwrap(), Duration::from_secs(120));
        for (key, zero, expected) in [
            (
                "a",
                false,
                "f.yaml:1:5: expected a duration above zero, found `0`",
            ),
            (
                "b",
                true,
                "f.yaml:1:11: expected a duration, found a mapping",
            ),
            (
                "d",
                true,
                "f.yaml:1:22: expected a duration such as 0, 500ms, 1.5s, 1m30s, 1d or minute, found `soon`",
            ),
            (
                "d",
                false,
                "f.yaml:1:22: expected a duration such as 500ms, 1.5s, 1m30s, 1d or minute, found `soon`",
            ),
        ] {
            let e = node(key).duration(zero).unwrap_err().to_string();
            assert_eq!(e, expected);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("MINUTE"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2w"), Some(Duration::from_secs(1_209_600)));
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("1.5s"), Some(ms(1500)));
        assert_eq!(parse_duration("0.5m"), Some(ms(30_000)));
        assert_eq!(parse_duration(".25s"), Some(ms(250)));
        assert_eq!(parse_duration("1h0.5m"), Some(ms(3_630_000)));
        assert_eq!(parse_duration("1.5µs"), Some(Duration::from_nanos(1500)));
        assert_eq!(
            parse_duration("2.0000000009s"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        for bad in [
            "",
            "5",
            "s",
            "1.5",
            "-1s",
            "5x",
            "1.s.",
            ".s",
            "1..5s",
            "99999999999999999999999d",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        for d in [90, 300, 3600, 86_400] {
            let d = Duration::from_secs(d);
            assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
    }
}
