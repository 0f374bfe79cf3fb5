//! Timestamps as access logs write them, to nanoseconds since the Unix
//! epoch: nginx's `$msec`, `$time_local`, `$time_iso8601`, RFC 3339 (Envoy's
//! `%START_TIME%`, JSON logs) and epoch numbers. Hand-written for the fixed
//! formats: a log has one timestamp per line, millions of lines.

/// Nanoseconds in a second.
pub(crate) const NANOS: u64 = 1_000_000_000;

/// Days from 1970-01-01 to `y-m-d` (proleptic Gregorian; Howard
/// Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `(year, month, day)` of a day counted from 1970-01-01 (the inverse of
/// `days_from_civil`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Appends `nanos` (since the Unix epoch) as RFC 3339 in UTC with
/// microseconds: `2024-05-01T12:00:00.250000Z`.
pub(crate) fn write_rfc3339(nanos: u64, out: &mut String) {
    use std::fmt::Write;
    let secs = nanos / NANOS;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        nanos % NANOS / 1000
    );
}

/// A decimal number of 1 to 18 digits (no sign, no point).
fn digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// Seconds of the civil time, checked.
fn civil(y: u64, mo: u32, d: u32, h: u64, mi: u64, s: u64) -> Option<i64> {
    let valid = (1970..=9999).contains(&y)
        && (1..=12).contains(&mo)
        && (1..=31).contains(&d)
        && h < 24
        && mi < 60
        && s <= 60;
    valid.then(|| days_from_civil(y as i64, mo, d) * 86_400 + (h * 3600 + mi * 60 + s) as i64)
}

/// `secs` since the epoch plus `frac` ns, in ns; `None` before the epoch
/// or past `u64`.
fn to_nanos(secs: i64, frac: u64) -> Option<u64> {
    u64::try_from(secs)
        .ok()?
        .checked_mul(NANOS)?
        .checked_add(frac)
}

/// A fraction of a second (the digits after the point) in nanoseconds;
/// digits past the ninth are dropped.
fn fraction(b: &[u8]) -> Option<u64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n = 0u64;
    for i in 0..9 {
        n = n * 10 + b.get(i).map_or(0, |&d| u64::from(d - b'0'));
    }
    Some(n)
}

/// `1712345678.123` (seconds, an optional fraction): `$msec`, epoch
/// seconds in JSON.
pub(crate) fn epoch_seconds(b: &[u8]) -> Option<u64> {
    let (whole, frac) = match memchr::memchr(b'.', b) {
        Some(dot) => (&b[..dot], fraction(&b[dot + 1..])?),
        None => (b, 0),
    };
    digits(whole)?.checked_mul(NANOS)?.checked_add(frac)
}

/// A duration in seconds with an optional fraction (`$request_time`:
/// `0.005`), in nanoseconds.
pub(crate) fn seconds(b: &[u8]) -> Option<u64> {
    epoch_seconds(b)
}

/// A whole number of `unit` nanoseconds (`%DURATION%` in milliseconds,
/// the gateway's `micros`).
pub(crate) fn scaled(b: &[u8], unit: u64) -> Option<u64> {
    digits(b)?.checked_mul(unit)
}

/// Month abbreviations, as `$time_local` writes them.
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// A `+hhmm`, `-hh:mm` or `Z` offset, in seconds east of UTC.
fn offset(b: &[u8]) -> Option<i64> {
    if b == b"Z" || b == b"z" {
        return Some(0);
    }
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &b[1..];
    let (h, m) = match rest.len() {
        4 => (&rest[..2], &rest[2..]),
        5 if rest[2] == b':' => (&rest[..2], &rest[3..]),
        _ => return None,
    };
    let (h, m) = (digits(h)?, digits(m)?);
    (h < 24 && m < 60).then(|| sign * (h * 3600 + m * 60) as i64)
}

thread_local! {
    /// The last `$time_local` read on this thread and its time: lines
    /// written in the same second share it, and a log has many per second.
    static LAST_LOCAL: std::cell::Cell<([u8; 26], u64)> =
        const { std::cell::Cell::new(([0; 26], u64::MAX)) };
}

/// nginx's `$time_local`: `10/Oct/2000:13:55:36 -0700`.
pub(crate) fn time_local(b: &[u8]) -> Option<u64> {
    let key: [u8; 26] = b.try_into().ok()?;
    let (last, time) = LAST_LOCAL.get();
    if time != u64::MAX && last == key {
        return Some(time);
    }
    let time = parse_time_local(&key)?;
    LAST_LOCAL.set((key, time));
    Some(time)
}

/// `$time_local` (`10/Oct/2000:13:55:36 -0700`) in ns since the epoch.
fn parse_time_local(b: &[u8; 26]) -> Option<u64> {
    if b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[20] != b' ' {
        return None;
    }
    let d = digits(&b[0..2])? as u32;
    let mo = MONTHS.iter().position(|m| m[..] == b[3..6])? as u32 + 1;
    let y = digits(&b[7..11])?;
    if b[14] != b':' || b[17] != b':' {
        return None;
    }
    let (h, mi, s) = (
        digits(&b[12..14])?,
        digits(&b[15..17])?,
        digits(&b[18..20])?,
    );
    let secs = civil(y, mo, d, h, mi, s)? - offset(&b[21..])?;
    to_nanos(secs, 0)
}

/// RFC 3339 / ISO 8601: `2000-10-10T13:55:36-07:00`,
/// `2024-05-01T12:00:00.123456Z` (nginx's `$time_iso8601`, Envoy's
/// `%START_TIME%`, JSON logs). A space is accepted for the `T`.
pub(crate) fn rfc3339(b: &[u8]) -> Option<u64> {
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let y = digits(&b[0..4])?;
    let mo = digits(&b[5..7])? as u32;
    let d = digits(&b[8..10])? as u32;
    let (h, mi, s) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    let mut rest = &b[19..];
    let mut frac = 0;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        frac = fraction(&rest[1..1 + n])?;
        rest = &rest[1 + n..];
    }
    let secs = civil(y, mo, d, h, mi, s)? - offset(rest)?;
    to_nanos(secs, frac)
}

/// An epoch number whose unit is told by its size: seconds (below 10¹¹,
/// i.e. before the year 5138), milliseconds (below 10¹⁴), microseconds
/// (below 10¹⁷), else nanoseconds. A fraction is allowed on seconds.
pub(crate) fn epoch_auto(b: &[u8]) -> Option<u64> {
    if memchr::memchr(b'.', b).is_some() {
        return epoch_seconds(b);
    }
    let n = digits(b)?;
    Some(if n < 100_000_000_000 {
        n * NANOS
    } else if n < 100_000_000_000_000 {
        n * 1_000_000
    } else if n < 100_000_000_000_000_000 {
        n * 1_000
    } else {
        n
    })
}

/// Any timestamp this module reads: RFC 3339, `$time_local`, or an epoch
/// number.
pub(crate) fn any(b: &[u8]) -> Option<u64> {
    match b.first()? {
        b'0'..=b'9' if b.len() == 26 && b[2] == b'/' => time_local(b),
        b'0'..=b'9' if b.len() >= 20 && b[4] == b'-' => rfc3339(b),
        b'0'..=b'9' => epoch_auto(b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last time read is remembered: repeated, alternating and broken
    /// values after it are each read for themselves.
    #[test]
    fn time_local_remembers_only_the_same_text() {
        let t = 971_211_336 * NANOS;
        for _ in 0..2 {
            assert_eq!(time_local(b"10/Oct/2000:13:55:36 -0700"), Some(t));
            assert_eq!(time_local(b"10/Oct/2000:13:55:37 -0700"), Some(t + NANOS));
            assert_eq!(
                time_local(b"10/Oct/2000:13:55:37 +0000"),
                Some(t + NANOS - 7 * 3600 * NANOS)
            );
        }
        assert_eq!(
            time_local(b"10/Oct/2000:13:55:37 +0000"),
            Some(t - 7 * 3600 * NANOS + NANOS)
        );
        assert_eq!(time_local(b"10/Oct/2000:13:55:3x +0000"), None);
        assert_eq!(time_local(b"10/Oct/2000:13:55:37 +0000 "), None);
        assert_eq!(
            time_local(b"10/Oct/2000:13:55:37 +0000"),
            Some(t - 7 * 3600 * NANOS + NANOS)
        );
    }

    #[test]
    fn formats() {
        // 2000-10-10T20:55:36Z
        let t = 971_211_336 * NANOS;
        assert_eq!(time_local(b"10/Oct/2000:13:55:36 -0700"), Some(t));
        assert_eq!(rfc3339(b"2000-10-10T13:55:36-07:00"), Some(t));
        assert_eq!(rfc3339(b"2000-10-10T20:55:36Z"), Some(t));
        assert_eq!(rfc3339(b"2000-10-10 20:55:36+00:00"), Some(t));
        assert_eq!(rfc3339(b"2000-10-10T20:55:36.5Z"), Some(t + NANOS / 2));
        assert_eq!(
            rfc3339(b"2000-10-10T20:55:36.123456789123Z"),
            Some(t + 123_456_789)
        );
        assert_eq!(epoch_seconds(b"971211336.250"), Some(t + NANOS / 4));
        assert_eq!(epoch_auto(b"971211336"), Some(t));
        assert_eq!(epoch_auto(b"971211336000"), Some(t));
        assert_eq!(epoch_auto(b"971211336000000"), Some(t));
        assert_eq!(epoch_auto(b"971211336000000000"), Some(t));
        assert_eq!(any(b"10/Oct/2000:13:55:36 -0700"), Some(t));
        assert_eq!(any(b"2000-10-10T20:55:36Z"), Some(t));
        assert_eq!(seconds(b"0.005"), Some(5_000_000));
        assert_eq!(scaled(b"153", 1000), Some(153_000));
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for day in [-1, 0, 59, 60, 11_016, 11_017, 19_844, 2_932_896] {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        let mut s = String::new();
        write_rfc3339(t + 250_000_123, &mut s);
        assert_eq!(s, "2000-10-10T20:55:36.250000Z");
        assert_eq!(rfc3339(s.as_bytes()), Some(t + 250_000_000));
    }

    #[test]
    fn rejects() {
        for bad in [
            &b"10/Foo/2000:13:55:36 -0700"[..],
            b"10/Oct/2000:13:55:36 +2500",
            b"32/Oct/2000:13:55:36 -0700",
            b"10/Oct/2000 13:55:36 -0700",
            b"",
            b"-",
        ] {
            assert_eq!(time_local(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        for bad in [
            &b"2000-13-10T20:55:36Z"[..],
            b"2000-10-10T20:55:36",
            b"2000-10-10T25:55:36Z",
            b"2000-10-10T20:55:36.Z",
            b"1969-12-31T23:59:59Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(epoch_seconds(b"12a.5"), None);
        assert_eq!(epoch_seconds(b"99999999999999999999"), None);
        assert_eq!(any(b"yesterday"), None);
    }
}
