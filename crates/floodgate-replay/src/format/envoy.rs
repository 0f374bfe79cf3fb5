//! Envoy's JSON access log: fields named by the `json_format` dictionary
//! the log was written with (its values command operators such as
//! `%START_TIME%` or `%REQ(X-API-KEY)%`), or by the names usually given.

use std::sync::Arc;

use floodgate_policy::yaml::Document;

use super::json::{JsonFormat, Role};
use crate::record::HeaderSet;

/// Nanoseconds in Envoy's `%DURATION%` unit (milliseconds).
const MS: u64 = 1_000_000;

/// The format for `json_format` (JSON or YAML), or the usual field names.
pub(crate) fn format(spec: Option<&str>, headers: &HeaderSet) -> Result<JsonFormat, String> {
    let mut f = JsonFormat::default();
    match spec {
        None => {
            let fixed = [
                ("start_time", Role::Start),
                ("method", Role::Method),
                (":method", Role::Method),
                ("path", Role::Path),
                (":path", Role::Path),
                ("x-envoy-origin-path", Role::Path),
                ("downstream_remote_address", Role::Address),
                ("duration", Role::Duration(MS)),
                ("response_code", Role::Status),
            ];
            f.fields = fixed.iter().map(|(k, r)| (k.to_string(), *r)).collect();
            for (i, name) in headers.names().iter().enumerate() {
                let dashed = name.as_str();
                f.fields.push((dashed.to_owned(), Role::Header(i)));
                f.fields.push((dashed.replace('-', "_"), Role::Header(i)));
            }
        }
        Some(text) => {
            let doc =
                Document::parse(&Arc::from("json_format"), text).map_err(|e| e.to_string())?;
            let root = doc.root();
            let map = root.map().map_err(|e| e.to_string())?;
            for (key, node) in map.entries() {
                let Some(op) = node.scalar_text() else {
                    continue;
                };
                if let Some(role) = role_of(op.trim(), headers) {
                    f.fields.push((key.to_owned(), role));
                }
            }
        }
    }
    f.check()
}

/// The role of a value that is one command operator.
fn role_of(op: &str, headers: &HeaderSet) -> Option<Role> {
    let inner = op.strip_prefix('%')?.strip_suffix('%')?;
    let (name, arg) = match inner.split_once('(') {
        Some((n, rest)) => {
            let arg = rest.split(')').next().unwrap_or_default();
            (n, Some(arg))
        }
        None => (inner, None),
    };
    match name {
        "START_TIME" => Some(Role::Start),
        "DURATION" => Some(Role::Duration(MS)),
        "RESPONSE_CODE" => Some(Role::Status),
        "DOWNSTREAM_REMOTE_ADDRESS" | "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT" => {
            Some(Role::Address)
        }
        "REQ" => {
            // `REQ(X?Y):Z`: header X, else Y; a maximum length after `:`.
            let arg = arg?;
            let names: Vec<&str> = arg.split('?').collect();
            if names.iter().any(|n| n.eq_ignore_ascii_case(":path")) {
                return Some(Role::Path);
            }
            if names.iter().any(|n| n.eq_ignore_ascii_case(":method")) {
                return Some(Role::Method);
            }
            names
                .iter()
                .find_map(|n| headers.position(n.as_bytes()))
                .map(Role::Header)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Span, bytes};

    fn hs() -> HeaderSet {
        HeaderSet::new(vec![http::HeaderName::from_static("x-api-key")])
    }

    #[test]
    fn json_format_dictionary() {
        let spec = r#"{"t": "%START_TIME%", "m": "%REQ(:METHOD)%", "p": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
            "ip": "%DOWNSTREAM_REMOTE_ADDRESS%", "k": "%REQ(X-API-KEY)%", "d": "%DURATION%", "s": "%RESPONSE_CODE%", "x": "%PROTOCOL%"}"#;
        let f = format(Some(spec), &hs()).unwrap();
        let line = br#"{"t":"2024-05-01T12:00:00.250Z","m":"POST","p":"/v1/x?y=1","ip":"192.0.2.7:5555","k":"ke\"y","d":12,"s":429,"x":"HTTP/1.1"}"#;
        let mut extra = Vec::new();
        let mut h = vec![Span::NONE];
        let fields = f.parse(line, 0, line.len(), &mut extra, &mut h).unwrap();
        let p = (line, extra);
        assert_eq!(fields.time, 1_714_564_800_250_000_000);
        assert_eq!(fields.duration, Some(12 * MS));
        assert_eq!(fields.status, 429);
        assert_eq!(fields.peer, Some("192.0.2.7".parse().unwrap()));
        assert_eq!(bytes(p.0, &p.1, fields.method), b"POST");
        assert_eq!(bytes(p.0, &p.1, fields.path), b"/v1/x");
        assert_eq!(bytes(p.0, &p.1, h[0]), b"ke\"y");
    }

    #[test]
    fn usual_names_and_errors() {
        let f = format(None, &hs()).unwrap();
        let line = br#"{"start_time":"2024-05-01T12:00:00Z","method":"GET","path":"/","x_api_key":"k","downstream_remote_address":"[2001:db8::1]:80"}"#;
        let mut h = vec![Span::NONE];
        let fields = f
            .parse(line, 0, line.len(), &mut Vec::new(), &mut h)
            .unwrap();
        assert_eq!(fields.peer, Some("2001:db8::1".parse().unwrap()));
        assert!(!h[0].is_none());
        for bad in [
            &br#"{"start_time":"noon"}"#[..],
            b"{",
            b"[1]",
            br#"{"method":"GET"}"#,
        ] {
            let e = f.parse(bad, 0, bad.len(), &mut Vec::new(), &mut [Span::NONE]);
            assert!(e.is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(format(Some(r#"{"m": "%REQ(:METHOD)%"}"#), &hs()).is_err());
    }
}
