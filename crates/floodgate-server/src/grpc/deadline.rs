//! The caller's deadline: gRPC's `grpc-timeout` request header.
//!
//! Envoy's rate limit filter sends its `timeout` (20 ms by default) this
//! way and gives up on the call when it passes; a decision still running
//! then is wasted work, so the fast RLS path stops waiting and answers
//! `DEADLINE_EXCEEDED`, as tonic's own server does for the other methods.

use std::time::Duration;

/// The longest timeout the header can express is 99 999 999 hours; a
/// deadline further away than this is no deadline at all.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a `grpc-timeout` value (`TimeoutValue TimeoutUnit`: 1 to 8 ASCII
/// digits, then one of `H M S m u n`). `None` for a malformed value: like
/// tonic, a header that cannot be read imposes no deadline.
pub(super) fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let d = match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    };
    (d < LONGEST).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit() {
        let cases: [(&[u8], Duration); 7] = [
            (b"2H", Duration::from_secs(7200)),
            (b"3M", Duration::from_secs(180)),
            (b"4S", Duration::from_secs(4)),
            (b"20m", Duration::from_millis(20)),
            (b"99999999u", Duration::from_micros(99_999_999)),
            (b"7n", Duration::from_nanos(7)),
            (b"0m", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse_grpc_timeout(text), Some(want), "{text:?}");
        }
    }

    #[test]
    fn malformed_values_impose_no_deadline() {
        for text in [
            &b""[..],
            b"m",
            b"-1m",
            b"1.5S",
            b" 1S",
            b"123456789S",
            b"10",
            b"10s",
            b"\xff\xfem",
        ] {
            assert_eq!(parse_grpc_timeout(text), None, "{text:?}");
        }
        // The largest values stay finite and are not deadlines.
        assert_eq!(parse_grpc_timeout(b"99999999H"), None);
        assert!(parse_grpc_timeout(b"99999999S").is_some());
    }
}
