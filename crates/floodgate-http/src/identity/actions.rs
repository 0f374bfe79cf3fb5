//! Running actions against a request: each writes its entry's value into
//! the descriptor being built, or yields nothing.

use std::net::IpAddr;

use http::header::AUTHORIZATION;

use super::client_ip::MAX_RENDERED;
use super::config::{Action, SecretSource, Source};
use super::extension::ExtensionSource;
use super::hash::{SECRET_HASH_LEN, write_bounded, write_secret_hash};
use super::head::RequestHead;
use super::http_identity::HttpIdentity;
use super::output::HttpDescriptor;

/// The parts of a request actions read.
pub(crate) struct Request<'r, H: ?Sized, E: ?Sized> {
    pub head: &'r H,
    pub ext: &'r E,
    pub peer: IpAddr,
}

/// What is worked out at most once per request.
pub(crate) struct Lazy<'s> {
    pub client: Option<IpAddr>,
    pub route: Option<Option<&'s str>>,
}

/// The value of `source`, trimmed; none when absent or empty.
pub(crate) fn source_value<'r, H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
    source: &Source,
    head: &'r H,
    ext: &'r E,
) -> Option<&'r [u8]> {
    let raw = match source {
        Source::Header(name) => head.header(name)?,
        Source::Extension(name) => ext.get(name)?.as_bytes(),
    };
    Some(raw.trim_ascii()).filter(|v| !v.is_empty())
}

/// The token of `Authorization: Bearer <token>` (scheme in any case).
pub(crate) fn bearer_token<H: RequestHead + ?Sized>(head: &H) -> Option<&[u8]> {
    let value = head.header(&AUTHORIZATION)?.trim_ascii();
    let space = value.iter().position(|&b| b == b' ' || b == b'\t')?;
    let (scheme, rest) = value.split_at(space);
    let token = rest.trim_ascii();
    let valid = scheme.eq_ignore_ascii_case(b"bearer")
        && !token.is_empty()
        && !token.iter().any(|&b| b == b' ' || b == b'\t');
    valid.then_some(token)
}

impl HttpIdentity {
    /// The most bytes `action` writes (key and value).
    pub(crate) fn bound(&self, action: &Action) -> usize {
        let value = match action {
            Action::ClientIp { .. } => MAX_RENDERED,
            Action::Value { .. } | Action::Method { .. } | Action::Path { .. } => {
                self.config.max_value_len
            }
            Action::Secret { hash: true, .. } => SECRET_HASH_LEN,
            Action::Secret { hash: false, .. } => self.config.max_value_len,
            Action::Route { unmatched, .. } => self
                .routes
                .longest()
                .max(unmatched.as_deref().map_or(0, str::len)),
            Action::Generic { value, .. } => value.len(),
            Action::Tier { values, .. } => values.iter().map(String::len).max().unwrap_or(0),
        };
        action.key().len() + value
    }

    /// Runs `action`, appending its entry to `out`; false when it yields
    /// nothing (`out` then holds a partial entry: discard the descriptor).
    pub(crate) fn run<'s, H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &'s self,
        action: &'s Action,
        req: &Request<'_, H, E>,
        lazy: &mut Lazy<'s>,
        out: &mut HttpDescriptor,
    ) -> bool {
        let max = self.config.max_value_len;
        out.entry(action.key(), |text| match action {
            Action::ClientIp { .. } => {
                let ip = *lazy
                    .client
                    .get_or_insert_with(|| self.config.client_ip.resolve(req.head, req.peer));
                self.config.client_ip.render(ip, text);
                true
            }
            Action::Value { source, .. } => source_value(source, req.head, req.ext)
                .map(|v| write_bounded(text, v, max))
                .is_some(),
            Action::Secret { source, hash, .. } => {
                let secret = match source {
                    SecretSource::Header(name) => req
                        .head
                        .header(name)
                        .map(<[u8]>::trim_ascii)
                        .filter(|v| !v.is_empty()),
                    SecretSource::Bearer => bearer_token(req.head),
                };
                match (secret, hash) {
                    (Some(s), true) => write_secret_hash(text, s),
                    (Some(s), false) => write_bounded(text, s, max),
                    (None, _) => {}
                }
                secret.is_some()
            }
            Action::Method { .. } => {
                write_bounded(text, req.head.method().as_bytes(), max);
                true
            }
            Action::Route { unmatched, .. } => {
                let found = *lazy
                    .route
                    .get_or_insert_with(|| self.routes.find(req.head.path()));
                match found.or(unmatched.as_deref()) {
                    Some(v) => {
                        text.push_str(v);
                        true
                    }
                    None => false,
                }
            }
            Action::Path { .. } => {
                let path = req.head.path();
                write_bounded(text, path.as_bytes(), max);
                !path.is_empty()
            }
            Action::Generic { value, .. } => {
                text.push_str(value);
                true
            }
            Action::Tier {
                source,
                values,
                default,
                ..
            } => {
                let given = source_value(source, req.head, req.ext);
                let known = given
                    .and_then(|g| values.iter().find(|v| v.as_bytes().eq_ignore_ascii_case(g)));
                match known.or(default.as_ref()) {
                    Some(tier) => {
                        text.push_str(tier);
                        true
                    }
                    None => false,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::HttpHead;
    use http::{HeaderMap, Method, Uri};

    fn head<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> HttpHead<'a> {
        HttpHead {
            method: &Method::GET,
            uri,
            headers,
        }
    }

    #[test]
    fn bearer() {
        let uri = Uri::from_static("/");
        let token = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, v.parse().unwrap());
            bearer_token(&head(&h, &uri)).map(|t| String::from_utf8(t.to_vec()).unwrap())
        };
        assert_eq!(token("Bearer abc.def-ghi"), Some("abc.def-ghi".into()));
        assert_eq!(token("bearer   tok=="), Some("tok==".into()));
        assert_eq!(token("BEARER\ttok"), Some("tok".into()));
        assert_eq!(token("Basic dXNlcjpwYXNz"), None);
        assert_eq!(token("Bearer"), None);
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearer a b"), None);
        assert_eq!(token("Bearerabc"), None);
        assert_eq!(bearer_token(&head(&HeaderMap::new(), &uri)), None);
    }
}
