//! [`RequestHead`]: what an identity reads of a request, whatever holds it —
//! an [`http::Request`] in a server, a line of an access log in a replay.

use http::{HeaderMap, HeaderName, Method, Uri};

/// The parts of a request an identity reads: its method, its path and its
/// header fields.
///
/// Implemented for [`HttpHead`] (the pieces of an [`http::Request`]);
/// implement it for anything else that knows a request — a parsed access
/// log line, say — to build descriptors with
/// [`HttpIdentity::build_head`](super::HttpIdentity::build_head) without
/// making an [`http::Request`] first. Header names are given lowercase
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
/// id.build_head(&line, "192.0.2.1".parse().unwrap(), &NoExtensions, &mut out);
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
}

/// The pieces of an [`http::Request`] as a [`RequestHead`].
#[derive(Clone, Copy, Debug)]
pub struct HttpHead<'r> {
    /// The method.
    pub method: &'r Method,
    /// The request target.
    pub uri: &'r Uri,
    /// The header fields.
    pub headers: &'r HeaderMap,
}

impl RequestHead for HttpHead<'_> {
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
        self.headers.get_all(name).iter().map(|v| v.as_bytes())
    }

    #[inline]
    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        self.headers.get(name).map(|v| v.as_bytes())
    }
}
