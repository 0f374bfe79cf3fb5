//! [`HttpIdentity`]: a compiled identity configuration, turning requests
//! into descriptors by running each action against the request: each
//! writes its entry's value into the descriptor being built, or yields
//! nothing.

use std::net::{IpAddr, SocketAddr};

use http::header::AUTHORIZATION;
use http::{HeaderMap, Method, Uri};

use super::client_ip::MAX_RENDERED;
use super::config::{Action, IdentityConfig, IdentityError, SecretSource, Source, cost_of};
use super::hash::{SECRET_HASH_LEN, write_bounded, write_secret_hash};
use super::output::{HttpDescriptor, RequestDescriptors};
use super::request::{ExtensionSource, HttpHead, RequestHead};
use super::route::Routes;

/// Turns HTTP requests into the descriptors of one policy domain.
///
/// Immutable and shareable across threads; build each request's
/// descriptors into a [`RequestDescriptors`] kept per connection or task.
///
/// ```
/// use floodgate_http::identity::{HttpIdentity, NoExtensions, RequestDescriptors};
/// use floodgate_policy::Descriptor;
///
/// let id = HttpIdentity::from_yaml_str("gw.yaml", r#"
/// http:
///   domain: api
///   client_ip: {trusted_hops: 1}
///   routes: ["/users/{id}"]
///   descriptors:
///     - [client_ip]
///     - [method, route]
/// "#).unwrap();
///
/// let (parts, ()) = http::Request::get("/users/42")
///     .header("x-forwarded-for", "198.51.100.7")
///     .body(())
///     .unwrap()
///     .into_parts();
/// let peer = "10.0.0.2:40000".parse().unwrap();
/// let mut out = RequestDescriptors::new();
/// id.descriptors(&parts, peer, &NoExtensions, &mut out);
///
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[0].entry(0), ("remote_address", "198.51.100.7"));
/// assert_eq!(out[1].entry(1), ("route", "/users/{id}"));
/// assert_eq!(out.hits_addend(), 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HttpIdentity {
    pub(super) config: IdentityConfig,
    pub(super) routes: Routes,
    slot_bytes: usize,
    slot_entries: usize,
}

impl HttpIdentity {
    /// Compiles `config`.
    pub fn new(config: IdentityConfig) -> Result<Self, IdentityError> {
        config.validate()?;
        let mut routes = Routes::default();
        for t in &config.routes {
            routes.insert(t)?;
        }
        let mut id = HttpIdentity {
            config,
            routes,
            slot_bytes: 0,
            slot_entries: 0,
        };
        let descriptors = &id.config.descriptors;
        let bound = |d: &[Action]| d.iter().map(|a| id.bound(a)).sum::<usize>();
        let slot_bytes = descriptors.iter().map(|d| bound(d)).max().unwrap_or(0);
        id.slot_entries = descriptors.iter().map(Vec::len).max().unwrap_or(0);
        id.slot_bytes = slot_bytes;
        Ok(id)
    }

    /// The configuration it was compiled from.
    pub fn config(&self) -> &IdentityConfig {
        &self.config
    }

    /// The policy domain to evaluate the descriptors in.
    pub fn domain(&self) -> &str {
        &self.config.domain
    }

    /// Number of configured descriptors (at most this many are built).
    pub fn descriptor_count(&self) -> usize {
        self.config.descriptors.len()
    }

    /// Buffers sized for this identity: building into them never
    /// allocates, from the first request on.
    pub fn new_output(&self) -> RequestDescriptors {
        let mut out = RequestDescriptors::new();
        out.prepare(self.descriptor_count(), self.slot_bytes, self.slot_entries);
        out
    }

    /// Builds the descriptors of a request (its head `parts`, from `peer`,
    /// with the application's values in `ext`) into `out`, replacing what
    /// it held. A descriptor is built only when all its actions produce an
    /// entry.
    pub fn descriptors<E: ExtensionSource + ?Sized>(
        &self,
        parts: &http::request::Parts,
        peer: SocketAddr,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        let head = HttpHead {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        self.build(&head, peer.ip(), None, ext, out);
    }

    /// Like [`descriptors`](Self::descriptors) for a whole request, reading
    /// `extension` values from its [`http::Extensions`] (the
    /// [`Attributes`](super::Attributes) an earlier middleware inserted).
    pub fn request_descriptors<B>(
        &self,
        request: &http::Request<B>,
        peer: SocketAddr,
        out: &mut RequestDescriptors,
    ) {
        self.request_descriptors_of(request, peer.ip(), None, out);
    }

    /// Like [`request_descriptors`](Self::request_descriptors), with the
    /// client address behind trusted proxies already resolved (`client`;
    /// none: resolved here if a descriptor needs it).
    pub(crate) fn request_descriptors_of(
        &self,
        request: &http::Request<impl Sized>,
        peer: IpAddr,
        client: Option<IpAddr>,
        out: &mut RequestDescriptors,
    ) {
        let head = HttpHead {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
        };
        self.build(&head, peer, client, request.extensions(), out);
    }

    /// Like [`descriptors`](Self::descriptors), from any [`RequestHead`]
    /// (a request known from elsewhere than an [`http::Request`], such as
    /// an access log line) sent from `peer`.
    pub fn build_head<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        self.build(head, peer, None, ext, out);
    }

    fn build<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        client: Option<IpAddr>,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        let descriptors = &self.config.descriptors;
        out.prepare(descriptors.len(), self.slot_bytes, self.slot_entries);
        let cost = self.config.cost.as_ref();
        let hits = cost.map_or(1, |c| cost_of(source_value(&c.source, head, ext), c));
        out.hits = hits;
        let per_descriptor = cost.map(|_| hits as u64);
        let mut req = Request {
            head,
            ext,
            peer,
            client,
            route: None,
        };
        for actions in descriptors {
            let Some(slot) = out.current() else { break };
            let complete = actions.iter().all(|a| self.run(a, &mut req, slot));
            if complete {
                out.commit(per_descriptor);
            } else {
                out.discard();
            }
        }
        out.client = req.client;
    }

    /// The client address of a request from `peer` (after trusted proxies;
    /// not grouped by prefix).
    pub fn client_ip(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let head = HttpHead {
            method: &Method::GET,
            uri: &Uri::default(),
            headers,
        };
        self.config.client_ip.resolve(&head, peer)
    }

    /// The route template matching `path`, if any.
    pub fn route(&self, path: &str) -> Option<&str> {
        self.routes.find(path)
    }
}

/// The request actions read, and what is worked out at most once for it
/// (its client address, its route template).
struct Request<'r, 's, H: ?Sized, E: ?Sized> {
    head: &'r H,
    ext: &'r E,
    peer: IpAddr,
    client: Option<IpAddr>,
    route: Option<Option<&'s str>>,
}

/// The value of `source`, trimmed; none when absent or empty.
fn source_value<'r, H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
    source: &Source,
    head: &'r H,
    ext: &'r E,
) -> Option<&'r [u8]> {
    match source {
        Source::Header(name) => trimmed(head.header(name)?),
        Source::Extension(name) => trimmed(ext.get(name)?.as_bytes()),
    }
}

/// `value` without surrounding whitespace; none when that leaves nothing.
fn trimmed(value: &[u8]) -> Option<&[u8]> {
    Some(value.trim_ascii()).filter(|v| !v.is_empty())
}

/// The token of `Authorization: Bearer <token>` (scheme in any case).
fn bearer_token<H: RequestHead + ?Sized>(head: &H) -> Option<&[u8]> {
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
    fn bound(&self, action: &Action) -> usize {
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
    fn run<'s, H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &'s self,
        action: &'s Action,
        req: &mut Request<'_, 's, H, E>,
        out: &mut HttpDescriptor,
    ) -> bool {
        let max = self.config.max_value_len;
        out.entry(action.key(), |text| match action {
            Action::ClientIp { .. } => {
                let ip = *req
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
                    SecretSource::Header(name) => req.head.header(name).and_then(trimmed),
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
                let found = *req
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
