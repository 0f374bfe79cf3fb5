//! Reading one setting's text: the same parser whatever the text came
//! from (a flag, a variable, the file).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use floodgate_policy::unit::read_duration;
use floodgate_redis::FailurePolicy;

/// All interfaces, for the public listeners written without an address.
pub const ANY: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
/// Loopback, for the admin listener written without an address.
pub(super) const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Parses a listen address: `host:port`, `:port` or a bare port (on
/// `default_host`), or `off` (no listener).
pub fn parse_listen_on(text: &str, default_host: IpAddr) -> Result<Option<SocketAddr>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("off") || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let port = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(Some(SocketAddr::new(default_host, port)));
    }
    t.replace("localhost:", "127.0.0.1:")
        .parse::<SocketAddr>()
        .map(Some)
        .map_err(|_| format!("expected host:port, :port, a port number or off, found `{t}`"))
}

/// Parses a size: bytes, or with a suffix `KiB`, `MiB`, `GiB` (also `K`,
/// `M`, `G`, `KB`, `MB`, `GB`, all powers of 1024).
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let n: usize = t[..digits].parse().ok()?;
    let mult: usize = match t[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// One of a few words: the value of the first of `choices` with a
/// spelling that is the trimmed text; else an error naming each choice's
/// first spelling.
pub fn choice<T: Clone>(text: &str, choices: &[(&[&str], T)]) -> Result<T, String> {
    let t = text.trim();
    let found = choices.iter().find(|(names, _)| names.contains(&t));
    found.map(|(_, value)| value.clone()).ok_or_else(|| {
        let names: Vec<&str> = choices.iter().map(|(names, _)| names[0]).collect();
        let (last, rest) = names.split_last().expect("choices");
        let expected = match rest {
            [] => last.to_string(),
            _ => format!("{} or {last}", rest.join(", ")),
        };
        let found = floodgate_policy::yaml::excerpt(t);
        format!("expected {expected}, found `{found}`")
    })
}

/// `fail_open`, `fail_closed`, `local` or `local/N` (N instances share the
/// limits).
pub(super) fn parse_failure_policy(v: &str) -> Result<FailurePolicy, String> {
    let v = v.trim().to_ascii_lowercase().replace('-', "_");
    if let Some(n) = v.strip_prefix("local/") {
        return n
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(|divide_by| FailurePolicy::Local { divide_by })
            .ok_or_else(|| format!("expected local/N with N ≥ 1, found `{v}`"));
    }
    choice(
        &v,
        &[
            (&["fail_open", "open"], FailurePolicy::FailOpen),
            (&["fail_closed", "closed"], FailurePolicy::FailClosed),
            (&["local"], FailurePolicy::Local { divide_by: 1 }),
        ],
    )
}

/// A duration ([`read_duration`]: the one reader of every section), zero
/// included.
pub fn duration(v: &str) -> Result<Duration, String> {
    read_duration(v, true)
}

/// A duration above zero.
pub fn positive_duration(v: &str) -> Result<Duration, String> {
    read_duration(v, false)
}

/// A boolean: `true`/`false`, and the spellings Go and YAML accept (`1`,
/// `t`, `yes`, `on`, any case).
pub fn boolean(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "y" | "yes" | "on" => Ok(true),
        "0" | "f" | "false" | "n" | "no" | "off" => Ok(false),
        _ => Err(format!("expected true or false, found `{}`", v.trim())),
    }
}

/// A size above zero.
pub fn size(v: &str) -> Result<usize, String> {
    parse_size(v).filter(|s| *s > 0).ok_or_else(|| {
        format!(
            "expected a size such as 1MiB or 65536, found `{}`",
            v.trim()
        )
    })
}

/// A whole number, 0 included.
pub(super) fn count(v: &str) -> Result<usize, String> {
    let t = v.trim().replace('_', "");
    t.parse()
        .map_err(|_| format!("expected a whole number (0 or more), found `{}`", v.trim()))
}

/// The size of a request head: 1KiB to 16MiB.
pub fn header_bytes(v: &str) -> Result<usize, String> {
    match size(v)? {
        n @ 1024..=16_777_216 => Ok(n),
        n => Err(format!("must be from 1KiB to 16MiB, found {n} bytes")),
    }
}

/// A whole number from `min` to `max`.
pub fn count_in(v: &str, min: usize, max: usize) -> Result<usize, String> {
    let n = count(v)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else if max == usize::MAX {
        Err(format!("must be at least {min}, found {n}"))
    } else {
        Err(format!("must be from {min} to {max}, found {n}"))
    }
}

/// Pairs `a<sep>b` of a list, its items split at commas too (as
/// envoyproxy/ratelimit reads its variables); a pair without `sep` is an
/// error.
pub(super) fn pairs(items: &[String], sep: char) -> Result<Vec<(String, String)>, String> {
    let pair = |item: &str| {
        let (k, v) = item
            .split_once(sep)
            .ok_or_else(|| format!("expected `name{sep}value`, found `{item}`"))?;
        Ok((k.trim().to_owned(), v.trim().to_owned()))
    };
    let items = items.iter().flat_map(|i| i.split(','));
    items.filter(|i| !i.trim().is_empty()).map(pair).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        let parse_listen = |t| parse_listen_on(t, ANY);
        assert_eq!(
            parse_listen("8081").unwrap(),
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(
            parse_listen(":9090").unwrap(),
            Some("0.0.0.0:9090".parse().unwrap())
        );
        assert_eq!(
            parse_listen_on(":9090", LOOPBACK).unwrap(),
            Some("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(
            parse_listen_on("9090", LOOPBACK).unwrap(),
            Some("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(
            parse_listen("localhost:1").unwrap(),
            Some("127.0.0.1:1".parse().unwrap())
        );
        assert_eq!(
            parse_listen("[::1]:7").unwrap(),
            Some("[::1]:7".parse().unwrap())
        );
        assert_eq!(parse_listen("off").unwrap(), None);
        assert!(parse_listen("nowhere").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("64 KiB"), Some(64 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("1 parsec"), None);
    }
}
