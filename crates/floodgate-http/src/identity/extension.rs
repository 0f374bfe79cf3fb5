//! Values only the application knows (the user an auth middleware
//! authenticated, the tenant, the plan), read by name by `extension`
//! sources.

use std::borrow::Cow;

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

impl<T: ExtensionSource + ?Sized> ExtensionSource for &T {
    fn get(&self, name: &str) -> Option<&str> {
        (**self).get(name)
    }
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
