//! JSON lines of any logger: an object per line, its fields named on the
//! command line (`jsonl:time=ts,client=ip,...`) or by the names usually
//! given — which include those of the gateway's own access log
//! (`timestamp`, `micros`, `method`, `path`, `client`, `status`).

use super::json::{JsonFormat, Role};
use super::time::NANOS;
use crate::record::HeaderSet;

/// Nanoseconds per unit `name` of a time field.
fn unit(name: &str) -> Result<u64, String> {
    match name {
        "s" => Ok(NANOS),
        "ms" => Ok(1_000_000),
        "us" | "µs" => Ok(1_000),
        "ns" => Ok(1),
        other => Err(format!("unknown unit `{other}` (expected s, ms, us or ns)")),
    }
}

/// The fields of the usual names, and the role each plays.
const USUAL: [(&str, Role); 17] = [
    ("start_time", Role::Start),
    ("timestamp", Role::End),
    ("time", Role::End),
    ("@timestamp", Role::End),
    ("ts", Role::End),
    ("micros", Role::Elapsed(1_000)),
    ("request_time", Role::Elapsed(NANOS)),
    ("method", Role::Method),
    ("request_method", Role::Method),
    ("path", Role::Path),
    ("uri", Role::Path),
    ("request_uri", Role::Path),
    ("client", Role::Address),
    ("client_ip", Role::Address),
    ("remote_addr", Role::Address),
    ("status", Role::Status),
    ("headers", Role::Headers),
];

/// The format for `role=field` pairs, or the usual names.
pub(crate) fn format(spec: Option<&str>, headers: &HeaderSet) -> Result<JsonFormat, String> {
    let mut f = JsonFormat {
        header_names: headers
            .names()
            .iter()
            .map(|n| n.as_str().to_owned())
            .collect(),
        ..Default::default()
    };
    let Some(spec) = spec else {
        f.fields = USUAL.iter().map(|(k, r)| (k.to_string(), *r)).collect();
        // A header as `http_NAME`, `-` as `_` (nginx's variables).
        for (i, name) in headers.names().iter().enumerate() {
            let under = name.as_str().replace('-', "_");
            f.fields.push((format!("http_{under}"), Role::Header(i)));
        }
        return f.check();
    };
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some(entry) = field_of(pair, headers)? {
            f.fields.push(entry);
        }
    }
    f.check()
}

/// The field and role one `role=field` pair names (a time with its unit,
/// `field:ms`); `None` for a header no identity reads: nothing to take.
fn field_of(pair: &str, headers: &HeaderSet) -> Result<Option<(String, Role)>, String> {
    let (role, field) = pair
        .split_once('=')
        .ok_or_else(|| format!("`{pair}` is not role=field"))?;
    let timed = |make: fn(u64) -> Role| -> Result<(String, Role), String> {
        match field.rsplit_once(':') {
            Some((name, u)) => Ok((name.to_owned(), make(unit(u)?))),
            None => Ok((field.to_owned(), make(NANOS))),
        }
    };
    let entry = match role {
        "time" => (field.to_owned(), Role::Start),
        "end" => (field.to_owned(), Role::End),
        "elapsed" => timed(Role::Elapsed)?,
        "duration" => timed(Role::Duration)?,
        "method" => (field.to_owned(), Role::Method),
        "path" => (field.to_owned(), Role::Path),
        "client" => (field.to_owned(), Role::Address),
        "status" => (field.to_owned(), Role::Status),
        "headers" => (field.to_owned(), Role::Headers),
        other => match other.strip_prefix("header.") {
            Some(h) => match headers.position(h.as_bytes()) {
                Some(i) => (field.to_owned(), Role::Header(i)),
                None => return Ok(None),
            },
            None => {
                return Err(format!(
                    "unknown role `{other}` (expected time, end, elapsed, duration, method, path, client, status, headers or header.<name>)"
                ));
            }
        },
    };
    Ok(Some(entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Span, bytes};

    #[test]
    fn the_gateways_access_log() {
        let hs = HeaderSet::new(vec![http::HeaderName::from_static("x-user")]);
        let f = format(None, &hs).unwrap();
        let line = br#"{"timestamp":"2024-05-01T12:00:01.000250Z","level":"INFO","method":"GET","path":"/api/orders","version":"HTTP/1.1","status":429,"limited":true,"micros":250,"peer":"10.1.2.3:51234","client":"203.0.113.7","headers":{"X-User":"u1"},"target":"floodgate::access"}"#;
        let mut h = vec![Span::NONE];
        let mut extra = Vec::new();
        let fields = f.parse(line, 0, line.len(), &mut extra, &mut h).unwrap();
        assert_eq!(fields.time, 1_714_564_801_000_000_000);
        assert_eq!(fields.peer, Some("203.0.113.7".parse().unwrap()));
        assert_eq!(fields.status, 429);
        let p = (line, extra);
        assert_eq!(bytes(p.0, &p.1, h[0]), b"u1");
    }

    #[test]
    fn named_fields() {
        let hs = HeaderSet::new(vec![http::HeaderName::from_static("x-api-key")]);
        let f = format(
            Some("time=at, duration=took:ms, client=ip, header.x-api-key=key, header.x-other=o"),
            &hs,
        )
        .unwrap();
        let line = br#"{"at": 1714564800.5, "took": 20, "ip": "192.0.2.1", "key": "k"}"#;
        let mut h = vec![Span::NONE];
        let fields = f
            .parse(line, 0, line.len(), &mut Vec::new(), &mut h)
            .unwrap();
        assert_eq!(fields.time, 1_714_564_800_500_000_000);
        assert_eq!(fields.duration, Some(20_000_000));
        assert!(format(Some("colour=red"), &hs).is_err());
        assert!(format(Some("method=m"), &hs).is_err());
        assert!(format(Some("time=t,elapsed=e:min"), &hs).is_err());
    }
}
