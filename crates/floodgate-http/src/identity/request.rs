//! What an identity reads of a request, whatever holds it: its head
//! ([`RequestHead`]: an [`http::Request`] in a server, a line of an access
//! log in a replay), and the values only the application knows
//! ([`ExtensionSource`]: the user an auth middleware authenticated, the
//! tenant, the plan), read by name by `extension` sources.

use std::borrow::Cow;

use http::header::HOST;
use http::{HeaderName, HeaderValue};

/// The parts of a request an identity reads: its method, its path and its
/// header fields.
///
/// Implemented for [`http::Request`] and its
/// [`Parts`](http::request::Parts); implement it for anything else that
/// knows a request — a parsed access log line, say — to build descriptors
/// with [`HttpIdentity::build`](super::HttpIdentity::build) without making
/// an [`http::Request`] first. Header names are given lowercase
/// (as [`HeaderName`] holds them); compare them ignoring ASCII case.
///
/// ```
/// use floodgate_http::identity::{HttpIdentity, NoExtensions, RequestHead};
/// use floodgate_policy::Descriptor;
/// use http::HeaderName;
///
/// /// A request known from a log line: a method, a path and one header.
/// struct Logged<'a> {
///     method: &'a str,
///     path: &'a str,
///     api_key: Option<&'a str>,
/// }
///
/// impl RequestHead for Logged<'_> {
///     fn method(&self) -> &str {
///         self.method
///     }
///     fn path(&self) -> &str {
///         self.path
///     }
///     fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
///         let key = (name.as_str() == "x-api-key").then_some(self.api_key).flatten();
///         key.map(str::as_bytes).into_iter()
///     }
/// }
///
/// let id = HttpIdentity::from_yaml_str("gw.yaml", r#"
/// http:
///   domain: api
///   routes: ["/users/{id}"]
///   descriptors:
///     - [{header: {name: x-api-key, key: key}}, route]
/// "#).unwrap();
/// let mut out = id.new_output();
/// let line = Logged { method: "GET", path: "/users/42", api_key: Some("k1") };
/// id.build(&line, "192.0.2.1".parse().unwrap(), &NoExtensions, &mut out);
/// assert_eq!(out[0].entry(0), ("key", "k1"));
/// assert_eq!(out[0].entry(1), ("route", "/users/{id}"));
/// ```
pub trait RequestHead {
    /// The method, as sent (`GET`, ...).
    fn method(&self) -> &str;

    /// The path, without the query (empty when there is none, as for an
    /// authority-form `CONNECT`).
    fn path(&self) -> &str;

    /// Every line of header `name`, in order.
    fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]>;

    /// The first line of header `name`.
    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        self.header_lines(name).next()
    }

    /// The authority the request is for, as sent: HTTP/2's `:authority`
    /// or an absolute-form target's, else `Host` (what `header: host`
    /// entries read, and key on its host). By default, `Host`.
    fn authority(&self) -> Option<&[u8]> {
        self.header(&HOST)
    }
}

/// The authority of a request target, else its `Host`.
fn authority_of<'a>(uri: &'a http::Uri, headers: &'a http::HeaderMap) -> Option<&'a [u8]> {
    match uri.authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => headers.get(HOST).map(HeaderValue::as_bytes),
    }
}

impl<B> RequestHead for http::Request<B> {
    fn method(&self) -> &str {
        self.method().as_str()
    }

    fn path(&self) -> &str {
        self.uri().path()
    }

    fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
        self.headers()
            .get_all(name)
            .iter()
            .map(HeaderValue::as_bytes)
    }

    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        self.headers().get(name).map(HeaderValue::as_bytes)
    }

    fn authority(&self) -> Option<&[u8]> {
        authority_of(self.uri(), self.headers())
    }
}

impl RequestHead for http::request::Parts {
    #[inline]
    fn method(&self) -> &str {
        self.method.as_str()
    }

    #[inline]
    fn path(&self) -> &str {
        self.uri.path()
    }

    #[inline]
    fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
        self.headers.get_all(name).iter().map(HeaderValue::as_bytes)
    }

    #[inline]
    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        self.headers.get(name).map(HeaderValue::as_bytes)
    }

    fn authority(&self) -> Option<&[u8]> {
        authority_of(&self.uri, &self.headers)
    }
}

/// Where `extension` sources read their values: the application's own
/// knowledge of a request, by name.
///
/// Implemented for [`http::Extensions`] (reading the [`Attributes`] an
/// earlier middleware inserted), for [`Attributes`] itself, and for
/// [`NoExtensions`]. Implement it for your own request context to avoid
/// copying values into [`Attributes`].
///
/// ```
/// use floodgate_http::identity::ExtensionSource;
///
/// struct Session { user: String }
///
/// impl ExtensionSource for Session {
///     fn get(&self, name: &str) -> Option<&str> {
///         (name == "user").then_some(self.user.as_str())
///     }
/// }
/// let s = Session { user: "alice".into() };
/// assert_eq!(s.get("user"), Some("alice"));
/// assert_eq!(s.get("tenant"), None);
/// ```
pub trait ExtensionSource {
    /// The value named `name`, if the application knows one.
    fn get(&self, name: &str) -> Option<&str>;
}

/// A source that knows nothing: every `extension` action yields nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExtensions;

impl ExtensionSource for NoExtensions {
    fn get(&self, _name: &str) -> Option<&str> {
        None
    }
}

/// Named values an application attaches to a request, typically inserted
/// into the request's [`http::Extensions`] by an authentication middleware
/// and read by `extension` actions.
///
/// ```
/// use floodgate_http::identity::{Attributes, ExtensionSource};
///
/// let mut req = http::Request::new(());
/// req.extensions_mut()
///     .insert(Attributes::new().with("user", "alice").with("plan", "pro"));
/// assert_eq!(ExtensionSource::get(req.extensions(), "user"), Some("alice"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    entries: Vec<(Cow<'static, str>, String)>,
}

impl Attributes {
    /// No values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn insert(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.entries.push((name, value)),
        }
    }

    /// With `name` set to `value`.
    pub fn with(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) -> Self {
        self.insert(name, value);
        self
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.swap_remove(i).1)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl ExtensionSource for Attributes {
    fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl ExtensionSource for http::Extensions {
    fn get(&self, name: &str) -> Option<&str> {
        http::Extensions::get::<Attributes>(self)?.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes() {
        let mut a = Attributes::new().with("user", "alice");
        a.insert("user", "bob");
        a.insert(String::from("tenant"), "acme");
        assert_eq!(ExtensionSource::get(&a, "user"), Some("bob"));
        assert_eq!(a.len(), 2);
        assert_eq!(a.remove("user").as_deref(), Some("bob"));
        assert_eq!(ExtensionSource::get(&a, "user"), None);
    }

    #[test]
    fn http_extensions() {
        let mut ext = http::Extensions::new();
        assert_eq!(ExtensionSource::get(&ext, "user"), None);
        ext.insert(Attributes::new().with("user", "carol"));
        assert_eq!(ExtensionSource::get(&ext, "user"), Some("carol"));
        assert_eq!(NoExtensions.get("user"), None);
    }
}
