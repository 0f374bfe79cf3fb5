//! Route templates: many request paths, one key.
//!
//! A template is a path whose segments are literals, parameters (`{id}`,
//! one whole segment) or, last, a catch-all (`{*rest}`, one or more
//! segments). Matching is allocation-free and tries literals before
//! parameters before catch-alls, so `/users/me` wins over `/users/{id}`.
//!
//! A client must not dodge a route's key by spelling the path
//! differently. The gateway normalises every path once, before routes are
//! matched and with the same result forwarded
//! ([`normalize_path`](super::normalize_path): `..` and `%2e%2e` resolved,
//! encoded slashes refused), so what reaches the matcher there has one
//! spelling. The matcher is also safe on its own, for paths no one
//! normalised (the tower layer's): empty segments (`//`, a trailing `/`)
//! and `.` segments are ignored, literal segments are compared after
//! percent-decoding (`/us%65rs` is `/users`), and a path with a `..`
//! segment matches no template (an application behind the layer that
//! resolves `..` should normalise first).

use super::config::IdentityError;

/// Most segments in a template.
pub const MAX_TEMPLATE_SEGMENTS: usize = 32;

#[derive(Debug, Default, Clone, PartialEq)]
struct Node {
    statics: Vec<(Box<[u8]>, u32)>,
    param: Option<u32>,
    catch_all: Option<u32>,
    route: Option<u32>,
}

/// A compiled set of route templates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Routes {
    templates: Vec<Box<str>>,
    nodes: Vec<Node>,
}

/// One segment of a template.
enum Segment<'t> {
    /// Literal text.
    Static(&'t str),
    /// `{name}`: any one segment.
    Param,
    /// `{*name}`: the rest of the path.
    CatchAll,
}

/// Parses the template segment `part`; the reason it is malformed if it is.
fn segment(part: &str) -> Result<Segment<'_>, String> {
    if part == ".." {
        return Err("'..' segments are not allowed".into());
    }
    match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
        Some(inner) => {
            let name = inner.strip_prefix('*').unwrap_or(inner);
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(format!(
                    "invalid parameter `{part}` (expected {{name}} or {{*name}})"
                ));
            }
            Ok(if name.len() < inner.len() {
                Segment::CatchAll
            } else {
                Segment::Param
            })
        }
        None if part.contains(['{', '}']) => Err(format!(
            "invalid segment `{part}`: a parameter must be a whole segment, e.g. /files/{{name}}"
        )),
        None => Ok(Segment::Static(part)),
    }
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            templates: Vec::new(),
            nodes: vec![Node::default()],
        }
    }
}

impl Routes {
    /// Adds `template`; an error if it is malformed or matches exactly the
    /// same paths as an earlier one.
    pub(super) fn insert(&mut self, template: &str) -> Result<(), IdentityError> {
        let err = |reason: String| IdentityError::Route {
            template: template.to_owned(),
            reason,
        };
        if !template.starts_with('/') {
            return Err(err("a route template starts with '/'".into()));
        }
        let parts: Vec<&str> = template
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect();
        if parts.len() > MAX_TEMPLATE_SEGMENTS {
            return Err(err(format!("more than {MAX_TEMPLATE_SEGMENTS} segments")));
        }
        let index = self.templates.len() as u32;
        let mut node = 0usize;
        for (i, part) in parts.iter().enumerate() {
            let next = self.nodes.len() as u32;
            let n = &mut self.nodes[node];
            let child = match segment(part).map_err(err)? {
                Segment::CatchAll => {
                    if i + 1 != parts.len() {
                        let last = "a catch-all {*name} must be the last segment";
                        return Err(err(last.into()));
                    }
                    if let Some(other) = n.catch_all {
                        return Err(err(self.same_as(other)));
                    }
                    n.catch_all = Some(index);
                    self.templates.push(template.into());
                    return Ok(());
                }
                Segment::Param => *n.param.get_or_insert(next),
                Segment::Static(part) => {
                    match n.statics.iter().find(|(l, _)| **l == *part.as_bytes()) {
                        Some(&(_, c)) => c,
                        None => {
                            n.statics.push((part.as_bytes().into(), next));
                            next
                        }
                    }
                }
            };
            if child == next {
                self.nodes.push(Node::default());
            }
            node = child as usize;
        }
        if let Some(other) = self.nodes[node].route {
            return Err(err(self.same_as(other)));
        }
        self.nodes[node].route = Some(index);
        self.templates.push(template.into());
        Ok(())
    }

    /// The reason a template is refused for matching what template
    /// `other` matches.
    fn same_as(&self, other: u32) -> String {
        format!(
            "it matches the same paths as `{}`",
            self.templates[other as usize]
        )
    }

    /// The longest template, in bytes.
    pub(super) fn longest(&self) -> usize {
        self.templates.iter().map(|t| t.len()).max().unwrap_or(0)
    }

    /// The template matching `path` (a request path without the query).
    pub(super) fn find(&self, path: &str) -> Option<&str> {
        let index = self.find_index(path)?;
        self.templates.get(index).map(|t| &**t)
    }

    /// The position, in the order inserted, of the template matching
    /// `path`: what a table built per template is indexed by.
    pub(super) fn find_index(&self, path: &str) -> Option<usize> {
        if self.templates.is_empty() || has_dot_dot(path.as_bytes()) {
            return None;
        }
        self.walk(0, segments(path.as_bytes())).map(|i| i as usize)
    }

    fn walk<'p>(&self, node: u32, mut segs: impl Iterator<Item = &'p [u8]> + Clone) -> Option<u32> {
        let n = self.nodes.get(node as usize)?;
        let Some(seg) = segs.next() else {
            return n.route;
        };
        let literal = n.statics.iter().find(|(lit, _)| eq_decoded(seg, lit));
        literal
            .and_then(|&(_, child)| self.walk(child, segs.clone()))
            .or_else(|| n.param.and_then(|child| self.walk(child, segs)))
            .or(n.catch_all)
    }
}

/// The segments of a request path, without empty and `.` segments.
fn segments(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    std::iter::from_fn(move || {
        while !rest.is_empty() {
            let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
            let seg = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or_default();
            if !seg.is_empty() && !eq_decoded(seg, b".") {
                return Some(seg);
            }
        }
        None
    })
}

fn has_dot_dot(path: &[u8]) -> bool {
    path.split(|&b| b == b'/').any(|seg| eq_decoded(seg, b".."))
}

/// Whether `raw`, percent-decoded, equals `literal`.
fn eq_decoded(raw: &[u8], literal: &[u8]) -> bool {
    percent_encoding::percent_decode(raw).eq(literal.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(list: &[&str]) -> Routes {
        let mut r = Routes::default();
        for t in list {
            r.insert(t).unwrap();
        }
        r
    }

    #[test]
    fn matching() {
        let r = routes(&[
            "/",
            "/users/{id}",
            "/users/me",
            "/orders/{id}/items/{item}",
            "/static/{*rest}",
        ]);
        assert_eq!(r.find("/"), Some("/"));
        assert_eq!(r.find("/users/42"), Some("/users/{id}"));
        assert_eq!(r.find("/users/me"), Some("/users/me"));
        assert_eq!(
            r.find("/orders/1/items/2"),
            Some("/orders/{id}/items/{item}")
        );
        assert_eq!(r.find("/static/a/b/c.css"), Some("/static/{*rest}"));
        assert_eq!(r.find("/static"), None);
        assert_eq!(r.find("/users/42/posts"), None);
        assert_eq!(r.find("/nope"), None);
    }

    #[test]
    fn indexes_follow_the_order_inserted() {
        let r = routes(&["/users/{id}", "/users/me", "/static/{*rest}"]);
        assert_eq!(r.find_index("/users/42"), Some(0));
        assert_eq!(r.find_index("/users/me"), Some(1));
        assert_eq!(r.find_index("/static/a/b"), Some(2));
        assert_eq!(r.find_index("/nope"), None);
        assert_eq!(Routes::default().find_index("/"), None);
    }

    #[test]
    fn normalisation() {
        let r = routes(&["/users/{id}", "/admin/stats"]);
        assert_eq!(r.find("//users//42/"), Some("/users/{id}"));
        assert_eq!(r.find("/./users/42"), Some("/users/{id}"));
        assert_eq!(r.find("/%61dmin/st%61ts"), Some("/admin/stats"));
        assert_eq!(r.find("/users/../admin/stats"), None);
        assert_eq!(r.find("/users/%2e%2E/admin/stats"), None);
        assert_eq!(r.find("/admin/stats%"), None);
    }

    #[test]
    fn backtracking() {
        let r = routes(&["/a/{x}/c", "/a/b/d"]);
        assert_eq!(r.find("/a/b/c"), Some("/a/{x}/c"));
        assert_eq!(r.find("/a/b/d"), Some("/a/b/d"));
    }

    #[test]
    fn invalid_templates() {
        let mut r = Routes::default();
        for bad in [
            "users",
            "/files/{name}.png",
            "/{}",
            "/{*rest}/x",
            "/a/../b",
            "/{a b}",
        ] {
            assert!(r.insert(bad).is_err(), "{bad}");
        }
        r.insert("/users/{id}").unwrap();
        let e = r.insert("/users/{name}/").unwrap_err().to_string();
        assert!(e.contains("same paths as `/users/{id}`"), "{e}");
        r.insert("/s/{*a}").unwrap();
        assert!(r.insert("/s/{*b}").is_err());
    }
}
