//! The header fields the limiter keys on, made to mean one thing to the
//! limiter and to the upstream alike:
//!
//! * more than one line of a keyed field (two `X-Api-Key` lines) is a
//!   client error (400): the identity reads the first, an upstream may read
//!   the last, or all of them joined;
//! * a field whose name is a keyed field's with `_` and `-` swapped
//!   (`X_Api_Key` beside `X-Api-Key`) is removed before the request is
//!   forwarded: upstreams behind CGI, PHP-FPM or nginx with
//!   `underscores_in_headers on` read both as one variable
//!   (`HTTP_X_API_KEY`), while the identity keys only the one it names.
//!
//! `Host` is not among them (one `Host` is checked before, see
//! [`crate::host`]); neither is the client address's header, whose lines
//! are one list.

use floodgate_http::identity::{ActionKind, IdentityConfig, Source};
use http::header::{AUTHORIZATION, HOST};
use http::{HeaderMap, HeaderName};

/// The fields an identity keys on (see the module docs).
#[derive(Debug, Default, Clone)]
pub(crate) struct KeyedFields {
    names: Vec<HeaderName>,
}

/// A keyed field sent more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DuplicateKeyedField;

impl KeyedFields {
    /// The fields `identity`'s descriptors and cost read.
    pub(crate) fn new(identity: &IdentityConfig) -> Self {
        let mut names: Vec<HeaderName> = Vec::new();
        let sources = identity
            .descriptors
            .iter()
            .flatten()
            .filter_map(|a| match &a.kind {
                ActionKind::Value { source, .. } | ActionKind::Tier { source, .. } => Some(source),
                _ => None,
            });
        let cost = identity.cost.as_ref().map(|c| &c.source);
        for source in sources.chain(cost) {
            let name = match source {
                Source::Header(name) if *name != HOST => name.clone(),
                Source::Bearer => AUTHORIZATION,
                _ => continue,
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        KeyedFields { names }
    }

    /// Checks `headers`: a keyed field sent more than once is refused;
    /// fields spelled as a keyed one with `_` for `-` (or the other way)
    /// are removed.
    pub(crate) fn check(&self, headers: &mut HeaderMap) -> Result<(), DuplicateKeyedField> {
        if self.names.is_empty() {
            return Ok(());
        }
        // As many lines as names: no field has two lines, and no lookup is
        // needed (the common case, in constant time).
        let repeated = headers.len() != headers.keys_len();
        if repeated && (self.names.iter()).any(|name| headers.get_all(name).iter().nth(1).is_some())
        {
            return Err(DuplicateKeyedField);
        }
        // Rare: found by a look at each name, removed only when present.
        while let Some(variant) = headers.keys().find(|n| self.is_variant(n)).cloned() {
            headers.remove(&variant);
        }
        Ok(())
    }

    /// Whether `name` is a keyed field's name with some `-` and `_`
    /// swapped, but not that name itself.
    fn is_variant(&self, name: &HeaderName) -> bool {
        let n = name.as_str().as_bytes();
        let dash = |b: u8| if b == b'_' { b'-' } else { b };
        self.names.iter().any(|k| {
            let k = k.as_str().as_bytes();
            k.len() == n.len() && k != n && k.iter().zip(n).all(|(&a, &b)| dash(a) == dash(b))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_http::HttpIdentity;

    fn keyed(yaml: &str) -> KeyedFields {
        let id = HttpIdentity::from_yaml_str("k.yaml", yaml).unwrap();
        KeyedFields::new(id.config())
    }

    fn headers(lines: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in lines {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const ID: &str = r#"
http:
  domain: d
  client_ip: {trusted_hops: 1}
  cost: {header: x-cost, max: 10}
  descriptors:
    - [api_key, client_ip]
    - [bearer]
    - [{tier: {header: x_plan, values: [free]}}]
    - [{header: {name: host}}]
"#;

    #[test]
    fn the_keyed_fields() {
        let names: Vec<String> = keyed(ID)
            .names
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        assert_eq!(names, ["x-api-key", "authorization", "x_plan", "x-cost"]);
    }

    #[test]
    fn duplicates_are_refused() {
        let k = keyed(ID);
        for dup in ["x-api-key", "authorization", "x_plan", "x-cost"] {
            let mut h = headers(&[(dup, "a"), ("other", "1"), (dup, "b")]);
            assert_eq!(k.check(&mut h), Err(DuplicateKeyedField), "{dup}");
        }
        // Lists the identity reads whole, or does not read, pass.
        let mut h = headers(&[
            ("x-forwarded-for", "192.0.2.1"),
            ("x-forwarded-for", "192.0.2.2"),
            ("accept", "a"),
            ("accept", "b"),
            ("x-api-key", "k"),
        ]);
        assert_eq!(k.check(&mut h), Ok(()));
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn variants_are_removed() {
        let k = keyed(ID);
        let mut h = headers(&[
            ("x-api-key", "k1"),
            ("x_api_key", "k2"),
            ("x_api-key", "k3"),
            ("x-plan", "pro"),
            ("x_plan", "free"),
            ("x_cost", "1"),
            ("x_other", "kept"),
            ("x-api-keys", "kept"),
        ]);
        assert_eq!(k.check(&mut h), Ok(()));
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["x-api-key", "x-api-keys", "x_other", "x_plan"]);
        assert_eq!(h["x-api-key"], "k1");
        // Nothing keyed: nothing looked at.
        let none = keyed("http:\n  domain: d\n  descriptors: [[client_ip]]\n");
        let mut h = headers(&[("x-api-key", "a"), ("x-api-key", "b"), ("x_api_key", "c")]);
        assert_eq!(none.check(&mut h), Ok(()));
        assert_eq!(h.len(), 3);
    }
}
